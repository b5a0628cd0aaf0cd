package gateway_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/gateway"
)

// A whole run through the gateway is the same as over NATS, frame by frame.
func TestEventStream(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	g := e.gateway(gateway.Config{})
	cr := g.create(t, runRequest(map[string]string{"emu_tokens": "30", "emu_token_ms": "2"}))
	got := g.stream(t, "/v1/runs/"+cr.RunID+"/events").readAll(t)
	want := e.watchAll(cr.RunID)
	if len(got) != len(want) {
		t.Fatalf("%d events over SSE, %d over NATS", len(got), len(want))
	}
	for i := range got {
		if g, w := mustJSON(t, got[i]), mustJSON(t, want[i]); g != w {
			t.Fatalf("event %d: SSE %+v, NATS %+v", i, got[i], want[i])
		}
	}
	checkContiguous(t, got, 1)
	if text(got) != e.emu.Records(cr.RunID)[0].Text {
		t.Fatalf("text %q, emulator %q", text(got), e.emu.Records(cr.RunID)[0].Text)
	}

	// Resuming after the terminal event: 204, so an EventSource stops.
	last := fmt.Sprint(got[len(got)-1].Seq)
	if _, status, _ := g.openStream(t, "/v1/runs/"+cr.RunID+"/events", "Last-Event-ID", last); status != http.StatusNoContent {
		t.Fatalf("after the terminal event: %d, want 204", status)
	}
	// Bad resume points and unknown runs are refused before the stream.
	for _, c := range []struct {
		path, hdr string
		status    int
		field     string
	}{
		{"/v1/runs/" + cr.RunID + "/events?after=x", "", 400, "after"},
		{"/v1/runs/" + cr.RunID + "/events", "-1", 400, "Last-Event-ID"},
		{"/v1/runs/" + cr.RunID + "/events?cancel_on_disconnect=maybe", "", 400, "cancel_on_disconnect"},
		{"/v1/runs/nope/events", "", 404, ""},
	} {
		var hdr []string
		if c.hdr != "" {
			hdr = []string{"Last-Event-ID", c.hdr}
		}
		r := g.do(t, "GET", c.path, nil, hdr...)
		if ae := r.apiError(t); r.status != c.status || ae.Field != c.field {
			t.Errorf("%s (%q): %d %+v", c.path, c.hdr, r.status, ae)
		}
	}
}

// A client that drops mid-stream resumes with Last-Event-ID (as an
// EventSource does) or ?after=N and gets every event once.
func TestEventStreamResume(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	g := e.gateway(gateway.Config{})
	cr := g.create(t, runRequest(map[string]string{"emu_tokens": "60", "emu_token_ms": "15"}))
	path := "/v1/runs/" + cr.RunID + "/events"

	s := g.stream(t, path)
	var first []events.RunEvent
	for len(first) < 4 {
		ev, _, err := s.nextEvent(t)
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, ev)
	}
	s.close()
	if first[len(first)-1].Type.Terminal() {
		t.Fatal("the run ended before the client dropped; make it slower")
	}
	lastID := fmt.Sprint(first[len(first)-1].Seq)

	rest := g.stream(t, path, "Last-Event-ID", lastID).readAll(t)
	all := append(first, rest...)
	checkContiguous(t, all, 1)
	if text(all) != e.emu.Records(cr.RunID)[0].Text {
		t.Fatalf("resumed text %q, emulator %q", text(all), e.emu.Records(cr.RunID)[0].Text)
	}
	if rest[0].Time.Sub(first[len(first)-1].Time) < 0 {
		t.Fatal("events out of order")
	}
	// ?after=N does the same.
	after := g.stream(t, path+"?after=2").readAll(t)
	checkContiguous(t, after, 3)
	if len(after) != len(all)-2 {
		t.Fatalf("after=2: %d events, want %d", len(after), len(all)-2)
	}
}

// A silent stream gets comment lines; events are not disturbed by them.
func TestEventStreamHeartbeats(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	g := e.gateway(gateway.Config{SSEHeartbeat: 30 * time.Millisecond})
	cr := g.create(t, runRequest(map[string]string{"emu_created_ms": "400", "emu_tokens": "20", "emu_token_ms": "50"}))
	s := g.stream(t, "/v1/runs/"+cr.RunID+"/events")
	comments := 0
	var evs []events.RunEvent
	for {
		f, err := s.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.comment != "" {
			comments++
			continue
		}
		var ev events.RunEvent
		if err := jsonUnmarshal(f.data, &ev); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	checkContiguous(t, evs, 1)
	if !evs[len(evs)-1].Type.Terminal() {
		t.Fatal("no terminal event")
	}
	if comments < 3 {
		t.Fatalf("%d comment lines over a stream silent for at least 400ms with a 30ms heartbeat", comments)
	}
}

// With ?cancel_on_disconnect=1 the gateway keeps a run submitted with
// cancel_on_disconnect_seconds alive while the client is connected, and
// the run is cancelled server-side (reason abandoned) once it drops.
func TestEventStreamCancelOnDisconnect(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	g := e.gateway(gateway.Config{WatchHeartbeat: 100 * time.Millisecond})
	req := runRequest(map[string]string{"emu_tokens": "100000", "emu_token_ms": "20"})
	req["cancel_on_disconnect_seconds"] = 1
	cr := g.create(t, req)
	s := g.stream(t, "/v1/runs/"+cr.RunID+"/events?cancel_on_disconnect=1")
	var started time.Time
	for {
		ev, _, err := s.nextEvent(t)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type.Terminal() {
			t.Fatalf("run ended while its watcher was connected: %+v", ev)
		}
		if started.IsZero() {
			started = ev.Time
		}
		if ev.Time.Sub(started) > 2500*time.Millisecond {
			break // alive well past cancel_on_disconnect_seconds
		}
	}
	s.close()
	evs := e.watchAll(cr.RunID)
	end := evs[len(evs)-1]
	if end.Type != events.TypeRunCancelled || end.Reason != events.ReasonAbandoned || end.UpstreamStatus != "cancelled" {
		t.Fatalf("after the client left: %+v", end)
	}
}

// Without the parameter the gateway sends no heartbeats: such a run is
// abandoned even while someone reads it.
func TestEventStreamNoHeartbeatsByDefault(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	g := e.gateway(gateway.Config{})
	req := runRequest(map[string]string{"emu_tokens": "100000", "emu_token_ms": "20"})
	req["cancel_on_disconnect_seconds"] = 1
	cr := g.create(t, req)
	evs := g.stream(t, "/v1/runs/"+cr.RunID+"/events").readAll(t)
	if end := evs[len(evs)-1]; end.Type != events.TypeRunCancelled || end.Reason != events.ReasonAbandoned {
		t.Fatalf("end %+v", end)
	}
}

// Two gateways on one NATS: a run created through one is followed,
// resumed and cancelled through the other (a load balancer may send each
// request anywhere).
func TestTwoGateways(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	a := e.gateway(gateway.Config{})
	b := e.gateway(gateway.Config{})
	cr := a.create(t, runRequest(map[string]string{"emu_tokens": "100000", "emu_token_ms": "10"}))
	path := "/v1/runs/" + cr.RunID + "/events"
	s := a.stream(t, path)
	var seen []events.RunEvent
	for len(seen) < 3 {
		ev, _, err := s.nextEvent(t)
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, ev)
	}
	s.close()
	a.stop() // the first gateway goes away; the client reconnects to the other

	rb := b.stream(t, path, "Last-Event-ID", fmt.Sprint(seen[len(seen)-1].Seq))
	ev, _, err := rb.nextEvent(t)
	if err != nil || ev.Seq != seen[len(seen)-1].Seq+1 {
		t.Fatalf("resumed on the second gateway: %+v, %v", ev, err)
	}
	r := b.do(t, "POST", "/v1/runs/"+cr.RunID+"/cancel", nil)
	var reply events.CancelReply
	r.decode(t, &reply)
	if r.status != http.StatusOK || !cancelTookEffect(reply) {
		t.Fatalf("cancel through the second gateway: %d %s", r.status, r.body)
	}
	rest := rb.readAll(t)
	if end := rest[len(rest)-1]; end.Type != events.TypeRunCancelled {
		t.Fatalf("end %+v", end)
	}
	var st events.RunState
	b.do(t, "GET", "/v1/runs/"+cr.RunID, nil).decode(t, &st)
	if st.Status != events.StatusCancelled {
		t.Fatalf("state through the second gateway: %+v", st)
	}
}

// Shutting a gateway down ends its open streams at once.
func TestShutdownEndsStreams(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	g := e.gateway(gateway.Config{ShutdownTimeout: 20 * time.Second})
	cr := g.create(t, runRequest(map[string]string{"emu_tokens": "100000", "emu_token_ms": "20"}))
	s := g.stream(t, "/v1/runs/"+cr.RunID+"/events")
	if _, _, err := s.nextEvent(t); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	g.stop()
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("shutdown took %s with a stream open", d)
	}
	for {
		if _, err := s.next(); err != nil {
			break // the stream ended
		}
	}
	_, _ = e.client.Cancel(t.Context(), cr.RunID, "")
}

func jsonUnmarshal(s string, v any) error {
	return jsonDecoder(strings.NewReader(s)).Decode(v)
}

// NATS limits consumers per stream (1000 by default). Event streams use
// none: with every consumer taken (by two NATS watches), streams still
// follow, from the start and resumed.
func TestEventStreamNeedsNoConsumer(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	url := startNATSConf(t, "", "default_max_consumers: 2")
	connect := func() (*nats.Conn, error) { return nats.Connect(url) }
	nc, err := connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := consumer.Provision(t.Context(), mustJS(t, nc), events.Names{}, consumer.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	startWorkerOn(t, connect, e.up, consumerConfig())
	g := startGateway(t, gateway.Config{NoAuth: true, Tenants: []gateway.Tenant{{Name: "dev", NATSURL: url}}}, nil)
	cr := g.create(t, runRequest(map[string]string{"emu_tokens": "100000", "emu_token_ms": "20"}))
	path := "/v1/runs/" + cr.RunID + "/events"
	client, err := events.NewClient(nc, events.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		w := client.Watch(t.Context(), cr.RunID, events.WatchOptions{NoHeartbeat: true})
		t.Cleanup(func() { w.Close() })
		if _, err := w.Next(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	var streams []*sse
	for i := range 6 {
		var s *sse
		if i%2 == 0 {
			s = g.stream(t, path)
		} else {
			s = g.stream(t, path, "Last-Event-ID", "2")
		}
		ev, _, err := s.nextEvent(t)
		if want := uint64(1 + 2*(i%2)); err != nil || ev.Seq != want {
			t.Fatalf("stream %d: first event %+v, %v; want seq %d", i, ev, err, want)
		}
		streams = append(streams, s)
	}
	if r := g.do(t, "POST", "/v1/runs/"+cr.RunID+"/cancel", nil); r.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	var endSeq uint64
	for i, s := range streams {
		evs := s.readAll(t)
		checkContiguous(t, evs, evs[0].Seq)
		end := evs[len(evs)-1]
		if end.Type != events.TypeRunCancelled || (endSeq != 0 && end.Seq != endSeq) {
			t.Fatalf("stream %d ended %+v (others at seq %d)", i, end, endSeq)
		}
		endSeq = end.Seq
	}
}

// Core NATS drops live events a slow client cannot take (here: a buffer of
// one, and a client that reads nothing until the run has ended, so that the
// gateway's writes block); the stream fills every gap from the events
// stream, in order.
func TestEventStreamFillsGaps(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	e.startWorker(consumer.Config{EventInterval: -time.Millisecond}) // every delta its own event
	nc, err := e.ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	g, err := gateway.New(gateway.Config{Addr: "127.0.0.1:0", NoAuth: true, Tenants: []gateway.Tenant{{Name: "dev", Conn: nc}}})
	if err != nil {
		t.Fatal(err)
	}
	gateway.SetLiveBuffer(g, 1)
	gw := runGateway(t, g, "http://")
	cr := gw.create(t, runRequest(map[string]string{"emu_tokens": "20000", "emu_token_ms": "0"}))
	s := gw.stream(t, "/v1/runs/"+cr.RunID+"/events")
	want := e.watchAll(cr.RunID)
	got := s.readAll(t)
	checkContiguous(t, got, 1)
	if len(got) != len(want) || text(got) != text(want) {
		t.Fatalf("%d events over SSE, %d over NATS", len(got), len(want))
	}
}

// Even if every live message is lost, the terminal event included (no
// subscription at all), the stream completes from the events stream.
func TestEventStreamSurvivesLostLiveEvents(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	nc, err := e.ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	g, err := gateway.New(gateway.Config{Addr: "127.0.0.1:0", NoAuth: true, SSEHeartbeat: 50 * time.Millisecond,
		Tenants: []gateway.Tenant{{Name: "dev", Conn: nc}}})
	if err != nil {
		t.Fatal(err)
	}
	gateway.SetLiveBuffer(g, -1)
	gw := runGateway(t, g, "http://")
	cr := gw.create(t, runRequest(map[string]string{"emu_tokens": "40", "emu_token_ms": "5"}))
	got := gw.stream(t, "/v1/runs/"+cr.RunID+"/events").readAll(t)
	want := e.watchAll(cr.RunID)
	checkContiguous(t, got, 1)
	if len(got) != len(want) || text(got) != text(want) {
		t.Fatalf("%d events over SSE, %d over NATS", len(got), len(want))
	}
}

// Events go out as stored: a field the gateway does not know (the contract
// grows additively) reaches the client, and JSON spread over several lines
// is compacted onto the one data line.
func TestEventStreamForwardsEventsAsStored(t *testing.T) {
	t.Parallel()
	e := setup(t, 0) // no worker: the events below are published by hand
	g := e.gateway(gateway.Config{})
	req := runRequest(nil)
	req["run_id"] = "by-hand"
	e.tap.IgnoreRun("by-hand") // its events are made by hand, one with a field from the future
	g.checker.IgnoreRun("by-hand")
	g.create(t, req)
	js := mustJS(t, e.nc)
	for _, body := range []string{
		"{\n  \"run_id\": \"by-hand\",\n  \"seq\": 1,\n  \"type\": \"text.delta\",\n  \"text\": \"line one\\nline two\",\n  \"added_later\": {\"x\": 1}\n}",
		`{"run_id":"by-hand","seq":2,"type":"run.completed","status":"completed"}`,
	} {
		if _, err := js.Publish(t.Context(), "foundryq.events.by-hand", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	s := g.stream(t, "/v1/runs/by-hand/events")
	ev, f, err := s.nextEvent(t)
	if err != nil || ev.Text != "line one\nline two" || !strings.Contains(f.data, `"added_later":{"x":1}`) || strings.Contains(f.data, "\": ") {
		t.Fatalf("first frame %+v (%v)", f, err)
	}
	if ev, _, err := s.nextEvent(t); err != nil || ev.Type != events.TypeRunCompleted {
		t.Fatalf("second event %+v %v", ev, err)
	}
}

// A publish that the events stream refuses (a worker that lost the run is
// fenced out) never reaches a client: followers hear the stream's copies
// of stored events, not the event subject.
func TestEventStreamSkipsRefusedPublishes(t *testing.T) {
	t.Parallel()
	e := setup(t, 0) // no worker: the events below are published by hand
	g := e.gateway(gateway.Config{})
	req := runRequest(nil)
	req["run_id"] = "fenced"
	e.tap.IgnoreRun("fenced") // its events are made by hand
	g.checker.IgnoreRun("fenced")
	g.create(t, req)
	js := mustJS(t, e.nc)
	ack, err := js.Publish(t.Context(), "foundryq.events.fenced", []byte(`{"run_id":"fenced","seq":1,"type":"text.delta","text":"owner"}`))
	if err != nil {
		t.Fatal(err)
	}
	s := g.stream(t, "/v1/runs/fenced/events")
	if ev, _, err := s.nextEvent(t); err != nil || ev.Text != "owner" {
		t.Fatalf("first event %+v %v", ev, err)
	}
	// A zombie's event 2 expects an older tail and is refused; then the
	// owner's event 2 and its end are stored.
	zombie := nats.NewMsg("foundryq.events.fenced")
	zombie.Data = []byte(`{"run_id":"fenced","seq":2,"type":"text.delta","text":"zombie"}`)
	if _, err := js.PublishMsg(t.Context(), zombie, jetstream.WithExpectLastSequencePerSubject(ack.Sequence-1)); err == nil {
		t.Fatal("the stream stored the fenced publish")
	}
	for _, body := range []string{
		`{"run_id":"fenced","seq":2,"type":"text.delta","text":" owner again"}`,
		`{"run_id":"fenced","seq":3,"type":"run.completed","status":"completed"}`,
	} {
		if _, err := js.Publish(t.Context(), "foundryq.events.fenced", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	ev, _, err := s.nextEvent(t)
	if err != nil || ev.Seq != 2 || ev.Text != " owner again" {
		t.Fatalf("second event %+v %v: a refused publish reached the client", ev, err)
	}
	if ev, _, err := s.nextEvent(t); err != nil || ev.Type != events.TypeRunCompleted {
		t.Fatalf("third event %+v %v", ev, err)
	}
}
