package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/gateway"
	"github.com/foundryq/foundryq/internal/natsembed"
)

// Stop in the middle: the cancel reaches Foundry, the stream ends with
// run.cancelled carrying Foundry's status and usage, and the emulator
// generated nothing after the cancel.
func testCancelRun(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	g := e.gateway(gateway.Config{})
	cr := g.create(t, runRequest(map[string]string{"emu_tokens": "100000", "emu_token_ms": "10"}))
	path := "/v1/runs/" + cr.RunID
	s := g.stream(t, path+"/events")
	deltas := 0
	for deltas < 3 {
		ev, _, err := s.nextEvent(t)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == events.TypeTextDelta {
			deltas++
		}
	}
	r := g.do(t, "POST", path+"/cancel", map[string]string{"reason": "user pressed stop"})
	var reply events.CancelReply
	r.decode(t, &reply)
	if r.status != http.StatusOK || !cancelTookEffect(reply) || reply.RunID != cr.RunID {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	rest := s.readAll(t)
	end := rest[len(rest)-1]
	if end.Type != events.TypeRunCancelled || end.Reason != events.ReasonRequested || end.UpstreamStatus != "cancelled" || end.Usage == nil || end.Usage.OutputTokens == 0 {
		t.Fatalf("end: %+v", end)
	}
	if st := e.emu.Stats(); st.TokensAfterCancel != 0 || st.ResponsesCancelled != 1 {
		t.Fatalf("emulator: %d tokens after the cancel, %d responses cancelled", st.TokensAfterCancel, st.ResponsesCancelled)
	}
	// Again: already finished.
	r = g.do(t, "POST", path+"/cancel", nil)
	r.decode(t, &reply)
	if r.status != http.StatusOK || reply.Result != events.CancelAlreadyFinished || reply.Terminal != events.TypeRunCancelled {
		t.Fatalf("second cancel: %d %s", r.status, r.body)
	}

	t.Run("refusals", func(t *testing.T) {
		r := g.do(t, "POST", "/v1/runs/no-such-run/cancel", nil)
		if ae := r.apiError(t); r.status != http.StatusNotFound || ae.RunID != "no-such-run" {
			t.Fatalf("unknown run: %d %+v", r.status, ae)
		}
		r = g.do(t, "POST", path+"/cancel", map[string]string{"reason": strings.Repeat("x", events.MaxCancelReasonLen+1)})
		if ae := r.apiError(t); r.status != http.StatusBadRequest || ae.Field != "reason" {
			t.Fatalf("long reason: %d %+v", r.status, ae)
		}
		r = g.do(t, "POST", path+"/cancel", `{"why":"x"}`)
		if ae := r.apiError(t); r.status != http.StatusBadRequest || ae.Field != "why" {
			t.Fatalf("unknown field: %d %+v", r.status, ae)
		}
		r = g.do(t, "POST", path+"/cancel", "stop", "Content-Type", "text/plain")
		if ae := r.apiError(t); r.status != http.StatusUnsupportedMediaType {
			t.Fatalf("text body: %d %+v", r.status, ae)
		}
	})
}

// A cancel of a run no worker has taken yet ends it before it reaches
// Foundry.
func testCancelQueuedRun(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	g := e.gateway(gateway.Config{CancelTimeout: 2 * time.Second})
	cr := g.create(t, runRequest(nil))
	r := g.do(t, "POST", "/v1/runs/"+cr.RunID+"/cancel", nil)
	var reply events.CancelReply
	r.decode(t, &reply)
	if r.status != http.StatusOK || reply.Result != events.CancelCancelling {
		t.Fatalf("cancel with no worker: %d %s", r.status, r.body)
	}
	e.startWorker(consumerConfig())
	evs := g.stream(t, "/v1/runs/"+cr.RunID+"/events").readAll(t)
	if end := evs[len(evs)-1]; end.Type != events.TypeRunCancelled || end.UpstreamStatus != "" {
		t.Fatalf("end %+v", end)
	}
	if n := e.emu.Stats().ResponsesCreated; n != 0 {
		t.Fatalf("%d responses created for a run cancelled in the queue", n)
	}
}

// A worker that never answers (the queue group picked it): the cancel is
// on record, so the gateway answers 200 cancelling within its one cancel
// timeout, never 503.
func testCancelRunUnanswered(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	const timeout = time.Second
	g := e.gateway(gateway.Config{CancelTimeout: timeout})
	devstack.StandInWorker(t, e.nc, events.Names{}, nil)
	for range 4 {
		cr := g.create(t, runRequest(nil))
		start := time.Now()
		r := g.do(t, "POST", "/v1/runs/"+cr.RunID+"/cancel", nil)
		took := time.Since(start)
		var reply events.CancelReply
		r.decode(t, &reply)
		if r.status != http.StatusOK || reply.Result != events.CancelCancelling || reply.RunID != cr.RunID {
			t.Fatalf("cancel answered by nobody: %d %s; want 200 cancelling", r.status, r.body)
		}
		if took > timeout+2*time.Second {
			t.Fatalf("the cancel took %s with a %s timeout", took, timeout)
		}
	}
}

// JetStream's store is full, so the cancel cannot be stored: with a worker
// that tells the owner it is 200 with unrecorded; with nobody to deliver
// it to, 503 saying so.
func testCancelRunStoreFull(t *testing.T) {
	t.Parallel()
	ns := natsembed.StartT(t, natsembed.Config{MaxStore: 2 << 20})
	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := mustJS(t, nc)
	if _, err := consumer.Provision(ctx, js, events.Names{}, consumer.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, gateway.Config{NoAuth: true, CancelTimeout: time.Second, Tenants: []gateway.Tenant{{Name: "default", Conn: nc}}}, nil)
	var ids []string
	for range 2 {
		ids = append(ids, g.create(t, runRequest(nil)).RunID)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler"}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if i > 1000 {
			t.Fatal("the store never filled up")
		}
		var apiErr *jetstream.APIError
		if _, err := js.Publish(ctx, "filler", make([]byte, 32<<10)); errors.As(err, &apiErr) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}

	r := g.do(t, "POST", "/v1/runs/"+ids[0]+"/cancel", nil)
	if ae := r.apiError(t); r.status != http.StatusServiceUnavailable || ae.Code != gateway.CodeUnavailable || !strings.Contains(ae.Message, "could not be stored") {
		t.Fatalf("nothing stored, nobody told: %d %s; want 503 saying so", r.status, r.body)
	}

	devstack.StandInWorker(t, nc, events.Names{}, &events.CancelReply{Result: events.CancelCancelling, Unrecorded: true})
	r = g.do(t, "POST", "/v1/runs/"+ids[1]+"/cancel", nil)
	var reply events.CancelReply
	r.decode(t, &reply)
	if r.status != http.StatusOK || reply != (events.CancelReply{RunID: ids[1], Result: events.CancelCancelling, Unrecorded: true}) {
		t.Fatalf("delivered but not stored: %d %s; want 200 with unrecorded", r.status, r.body)
	}
}

// cancelTookEffect reports a reply to the first cancel of a running run:
// cancelling, also when the run's owner ended it from the stored cancel
// record before the request was answered (then with the outcome).
func cancelTookEffect(reply events.CancelReply) bool {
	return reply.Result == events.CancelCancelling
}

// POST /v1/runs/{id}/cancel.
func TestCancelEndpoint(t *testing.T) {
	t.Run("a running run", testCancelRun)
	t.Run("a queued run", testCancelQueuedRun)
	t.Run("no worker answers", testCancelRunUnanswered)
	t.Run("the store is full", testCancelRunStoreFull)
}
