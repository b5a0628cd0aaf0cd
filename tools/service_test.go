package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/trace"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
	"github.com/foundryq/foundryq/tools"
)

func TestServeAnswersWithTheOutput(t *testing.T) {
	t.Parallel()
	nc := runNATS(t)
	calls := make(chan tools.Call, 1)
	serve(t, nc, "get_weather", func(_ context.Context, c tools.Call) (string, error) {
		calls <- c
		return `{"temp":21}`, nil
	})
	deadline := time.Now().Add(time.Hour).Round(0)
	reply := request(t, nc, withDeadline(toolRequest("get_weather", "r1", "call_1", `{"city":"Paris"}`), deadline))
	wantOutput(t, reply, `{"temp":21}`)

	c := <-calls
	if c.RunID != "r1" || c.CallID != "call_1" || c.Name != "get_weather" || string(c.Arguments) != `{"city":"Paris"}` || !c.Deadline.Equal(deadline) {
		t.Errorf("call = %+v, want r1 call_1 get_weather with the arguments and deadline %s", c, deadline)
	}

	// Without a deadline (a call by hand) and without the tool header.
	m := toolRequest("get_weather", "r1", "call_2", `{}`)
	m.Header.Del(events.HeaderToolName)
	wantOutput(t, request(t, nc, m), `{"temp":21}`)
	if c := <-calls; !c.Deadline.IsZero() || c.Name != "get_weather" {
		t.Errorf("call without deadline = %+v", c)
	}
}

func TestServeWithPrefixAndToolNamedCancel(t *testing.T) {
	t.Parallel()
	nc := runNATS(t)
	echo := func(_ context.Context, c tools.Call) (string, error) { return c.Name, nil }
	s := serve(t, nc, "cancel", echo)
	if s.Subject() != "foundryq.tools.cancel" {
		t.Errorf("Subject = %q", s.Subject())
	}
	wantOutput(t, request(t, nc, toolRequest("cancel", "r1", "c1", `{}`)), "cancel")

	p := serve(t, nc, "get_weather", echo, tools.WithPrefix("acme.fq"))
	if p.Subject() != "acme.fq.tools.get_weather" {
		t.Errorf("Subject with prefix = %q", p.Subject())
	}
	m := toolRequest("get_weather", "r1", "c1", `{}`)
	m.Subject = p.Subject()
	wantOutput(t, request(t, nc, m), "get_weather")
}

func TestHandlerErrorsAreMicroErrors(t *testing.T) {
	t.Parallel()
	nc := runNATS(t)
	serve(t, nc, "lookup", func(_ context.Context, c tools.Call) (string, error) {
		switch string(c.Arguments) {
		case "plain":
			return "", errors.New("database unreachable")
		case "coded":
			return "", fmt.Errorf("lookup: %w", tools.Error{Code: "404", Description: "no such city"})
		case "pointer":
			return "", &tools.Error{Code: "429", Description: "slow down"}
		default:
			return "", tools.Error{}
		}
	})
	for _, tt := range []struct{ args, code, desc string }{
		{"plain", "500", "database unreachable"},
		{"coded", "404", "no such city"},
		{"pointer", "429", "slow down"},
		{"empty", "500", "tool lookup failed"},
	} {
		reply := request(t, nc, toolRequest("lookup", "r1", "c1", tt.args))
		wantError(t, reply, tt.code, tt.desc)
		if len(reply.Data) != 0 {
			t.Errorf("%s: error reply has a body %q", tt.args, reply.Data)
		}
	}
}

func TestPanicIsAnsweredAsAnError(t *testing.T) {
	t.Parallel()
	nc := runNATS(t)
	serve(t, nc, "fragile", func(_ context.Context, c tools.Call) (string, error) {
		if string(c.Arguments) == "boom" {
			panic("boom")
		}
		return "fine", nil
	})
	wantError(t, request(t, nc, toolRequest("fragile", "r1", "c1", "boom")), "500", "tool fragile panicked: boom")
	wantOutput(t, request(t, nc, toolRequest("fragile", "r1", "c2", "ok")), "fine")
}

func TestBadRequestsAreRefusedWith400(t *testing.T) {
	t.Parallel()
	nc := runNATS(t)
	var ran atomic.Int32
	serve(t, nc, "get_weather", func(context.Context, tools.Call) (string, error) {
		ran.Add(1)
		return "ran", nil
	})
	for _, tt := range []struct {
		name   string
		header string
		value  string // "" deletes the header
		desc   string
	}{
		{"no run id", events.HeaderToolRunID, "", "Foundryq-Run-Id"},
		{"bad run id", events.HeaderToolRunID, "a.b", "Foundryq-Run-Id"},
		{"no call id", events.HeaderToolCallID, "", "Foundryq-Call-Id missing"},
		{"another tool", events.HeaderToolName, "get_time", `serves "get_weather"`},
		{"bad deadline", events.HeaderToolDeadline, "tomorrow", "Foundryq-Deadline"},
	} {
		m := toolRequest("get_weather", "r1", "c1", `{}`)
		if tt.value == "" {
			m.Header.Del(tt.header)
		} else {
			m.Header.Set(tt.header, tt.value)
		}
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, request(t, nc, m), "400", tt.desc)
		})
	}
	m := nats.NewMsg(events.Names{}.ToolSubject("get_weather")) // no header at all
	wantError(t, request(t, nc, m), "400", "Foundryq-Run-Id")
	if n := ran.Load(); n != 0 {
		t.Errorf("the handler ran %d times for bad requests", n)
	}
}

func TestServeRefusesBadSettings(t *testing.T) {
	t.Parallel()
	nc := runNATS(t)
	ok := func(context.Context, tools.Call) (string, error) { return "", nil }
	for _, name := range []string{"", "a.b", "get weather", "x*", "x>", "é", strings.Repeat("x", 65)} {
		if _, err := tools.Serve(nc, name, ok); !errors.Is(err, tools.ErrInvalidName) {
			t.Errorf("Serve(%q) error = %v, want ErrInvalidName", name, err)
		}
	}
	for what, opt := range map[string]tools.Option{
		"prefix":        tools.WithPrefix("a..b"),
		"heartbeat":     tools.WithHeartbeat(0),
		"max in flight": tools.WithMaxInFlight(0),
		"version":       tools.WithVersion("one"),
	} {
		if _, err := tools.Serve(nc, "get_weather", ok, opt); err == nil {
			t.Errorf("Serve with bad %s: no error", what)
		}
	}
	if _, err := tools.Serve(nc, "get_weather", nil); err == nil {
		t.Error("Serve with a nil handler: no error")
	}
	// A refused Serve leaves no subscription behind.
	if n := nc.NumSubscriptions(); n != 0 {
		t.Errorf("%d subscriptions left after refused Serves", n)
	}
}

// blocker is a handler that runs until its call is released or its ctx
// ends, and tells the test about each.
type blocker struct {
	started chan tools.Call
	ended   chan ended
	mu      sync.Mutex
	release map[string]chan struct{} // by call id
	ctxs    map[string]context.Context
	running atomic.Int32
	most    atomic.Int32
}

type ended struct {
	call  tools.Call
	at    time.Time
	cause error
}

func newBlocker() *blocker {
	return &blocker{
		started: make(chan tools.Call, 64), ended: make(chan ended, 64),
		release: map[string]chan struct{}{}, ctxs: map[string]context.Context{},
	}
}

func (b *blocker) releaser(key string) chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.release[key] == nil {
		b.release[key] = make(chan struct{})
	}
	return b.release[key]
}

func key(c tools.Call) string { return c.RunID + "/" + c.CallID }

// handle counts the calls running at once, and returns "released <key>"
// when released, or the cause of its ctx's end as an error.
func (b *blocker) handle(ctx context.Context, c tools.Call) (string, error) {
	n := b.running.Add(1)
	defer b.running.Add(-1)
	for m := b.most.Load(); n > m && !b.most.CompareAndSwap(m, n); m = b.most.Load() {
	}
	b.mu.Lock()
	b.ctxs[key(c)] = ctx
	b.mu.Unlock()
	b.started <- c
	select {
	case <-b.releaser(key(c)):
		return "released " + key(c), nil
	case <-ctx.Done():
		b.ended <- ended{c, time.Now(), context.Cause(ctx)}
		return "", context.Cause(ctx)
	}
}

// startedKeys returns the keys of the calls started so far, sorted.
func (b *blocker) startedKeys() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var keys []string
	for k := range b.ctxs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ctxOf returns the ctx of a started call (nil if it never started).
func (b *blocker) ctxOf(k string) context.Context {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ctxs[k]
}

// waitStarted waits for n calls to start and returns their keys.
func (b *blocker) waitStarted(t *testing.T, n int) []string {
	t.Helper()
	var keys []string
	for range n {
		select {
		case c := <-b.started:
			keys = append(keys, key(c))
		case <-time.After(wait):
			t.Fatalf("%d of %d calls started within %s", len(keys), n, wait)
		}
	}
	return keys
}

// waitEnded waits for a call's ctx to end.
func (b *blocker) waitEnded(t *testing.T) ended {
	t.Helper()
	select {
	case e := <-b.ended:
		return e
	case <-time.After(wait):
		t.Fatalf("no call's ctx ended within %s", wait)
		return ended{}
	}
}

// publishCancel sends the worker's cancel message for a call.
func publishCancel(t *testing.T, nc *nats.Conn, runID, callID string) {
	t.Helper()
	m := nats.NewMsg(events.Names{}.ToolCancelSubject(runID))
	if callID != "" {
		m.Header.Set(events.HeaderToolCallID, callID)
	}
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
}

func TestCancelMessageCancelsExactlyThatCall(t *testing.T) {
	t.Parallel()
	_, nc := natsembed.RunTest(t) // no contract tap: it sends a malformed cancel on purpose
	b := newBlocker()
	serve(t, nc, "slow", b.handle)
	replies := map[string]<-chan *nats.Msg{}
	for _, k := range []string{"r1/c1", "r1/c2", "r2/c1"} {
		run, call, _ := strings.Cut(k, "/")
		replies[k] = send(t, nc, toolRequest("slow", run, call, `{}`))
	}
	b.waitStarted(t, 3)

	sent := time.Now()
	publishCancel(t, nc, "r1", "c1")
	e := b.waitEnded(t)
	if key(e.call) != "r1/c1" || !errors.Is(e.cause, tools.ErrCancelled) {
		t.Fatalf("ended %s with %v, want r1/c1 with ErrCancelled", key(e.call), e.cause)
	}
	if took := e.at.Sub(sent); took > 100*time.Millisecond {
		t.Errorf("the cancel took %s to reach the handler, want at most 100ms", took)
	}
	wantError(t, answer(t, replies["r1/c1"]), "500", tools.ErrCancelled.Error())
	for _, k := range []string{"r1/c2", "r2/c1"} {
		if err := b.ctxOf(k).Err(); err != nil {
			t.Errorf("%s: ctx ended (%v) by another call's cancel", k, err)
		}
	}

	// Cancels that name no running call change nothing; the last one,
	// which names r2/c1, shows that the ones before it were handled.
	publishCancel(t, nc, "r1", "")
	publishCancel(t, nc, "r1", "c9")
	publishCancel(t, nc, "r3", "c2")
	publishCancel(t, nc, "r2", "c1")
	if e := b.waitEnded(t); key(e.call) != "r2/c1" {
		t.Fatalf("ended %s, want r2/c1", key(e.call))
	}
	if err := b.ctxOf("r1/c2").Err(); err != nil {
		t.Errorf("r1/c2: ctx ended (%v) by cancels of other calls", err)
	}
	close(b.releaser("r1/c2"))
	wantOutput(t, answer(t, replies["r1/c2"]), "released r1/c2")
}

func TestDeadlineEndsTheCall(t *testing.T) {
	t.Parallel()
	nc := runNATS(t)
	b := newBlocker()
	serve(t, nc, "slow", b.handle)
	deadline := time.Now().Add(300 * time.Millisecond)
	replies := send(t, nc, withDeadline(toolRequest("slow", "r1", "c1", `{}`), deadline))
	e := b.waitEnded(t)
	if !errors.Is(e.cause, tools.ErrDeadline) || e.at.Before(deadline) {
		t.Errorf("ended at %s with %v, want ErrDeadline at or after %s", e.at, e.cause, deadline)
	}
	wantError(t, answer(t, replies), "500", tools.ErrDeadline.Error())

	// A call already past its deadline does not start.
	reply := request(t, nc, withDeadline(toolRequest("slow", "r1", "c2", `{}`), time.Now().Add(-time.Second)))
	wantError(t, reply, "503", "did not start: "+tools.ErrDeadline.Error())
	select {
	case c := <-b.started:
		if c.CallID == "c2" {
			t.Error("a call past its deadline ran")
		}
	default:
	}
}

func TestProgressWhileTheHandlerRuns(t *testing.T) {
	t.Parallel()
	nc := runNATS(t)
	b := newBlocker()
	const beat = 20 * time.Millisecond
	s := serve(t, nc, "slow", b.handle, tools.WithHeartbeat(beat))
	replies := send(t, nc, toolRequest("slow", "r1", "c1", `{}`))
	b.waitStarted(t, 1)
	for i := range 3 {
		var m *nats.Msg
		select {
		case m = <-replies:
		case <-time.After(wait):
			t.Fatalf("progress message %d did not come", i)
		}
		if got := m.Header.Get(events.HeaderToolStatus); got != events.ToolStatusWorking || len(m.Data) != 0 {
			t.Fatalf("message %d: status %q body %q, want a progress message", i, got, m.Data)
		}
		instance := m.Header.Get(events.HeaderToolInstance)
		if want := s.Micro().Info().ID; i == 0 && instance != want {
			t.Errorf("first progress message names instance %q, want %q", instance, want)
		} else if i > 0 && instance != "" {
			t.Errorf("progress message %d names the instance again", i)
		}
	}
	close(b.releaser("r1/c1"))
	final := answer(t, replies)
	wantOutput(t, final, "released r1/c1")
	if final.Header.Get(events.HeaderToolStatus) != "" {
		t.Errorf("the answer carries %s %q", events.HeaderToolStatus, final.Header.Get(events.HeaderToolStatus))
	}
	// Nothing follows the answer (ten beats without a message).
	select {
	case m := <-replies:
		t.Errorf("a message after the answer: %v %q", m.Header, m.Data)
	case <-time.After(10 * beat):
	}
}

func TestStopCancelsRunningHandlersAndWaitsForThem(t *testing.T) {
	t.Parallel()
	srv, nc := natsembed.RunTest(t)
	svcConn, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer svcConn.Close()
	returned := make(chan struct{})
	release := make(chan struct{})
	causes := make(chan error, 1)
	s, err := tools.Serve(svcConn, "slow", func(ctx context.Context, _ tools.Call) (string, error) {
		defer close(returned)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		<-release // ignores the cancel for a while
		return "", context.Cause(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	replies := send(t, nc, toolRequest("slow", "r1", "c1", `{}`))
	testkit.Eventually(t, wait, "the call to run", func() bool { return s.Stats().InFlight == 1 })

	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop() }()
	if cause := <-causes; !errors.Is(cause, tools.ErrStopped) {
		t.Errorf("cause = %v, want ErrStopped", cause)
	}
	select {
	case <-stopped:
		t.Fatal("Stop returned while a handler still ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Errorf("Stop: %v", err)
	}
	select {
	case <-returned:
	default:
		t.Error("Stop returned before the handler")
	}
	wantError(t, answer(t, replies), "500", tools.ErrStopped.Error())
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if _, err := nc.RequestMsg(toolRequest("slow", "r1", "c2", `{}`), wait); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("request after Stop: %v, want no responders", err)
	}
}

func TestClosedConnectionEndsTheCalls(t *testing.T) {
	t.Parallel()
	srv, nc := natsembed.RunTest(t)
	svcConn, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	b := newBlocker()
	s, err := tools.Serve(svcConn, "slow", b.handle)
	if err != nil {
		t.Fatal(err)
	}
	send(t, nc, toolRequest("slow", "r1", "c1", `{}`))
	b.waitStarted(t, 1)
	svcConn.Close()
	if e := b.waitEnded(t); !errors.Is(e.cause, nats.ErrConnectionClosed) {
		t.Errorf("cause = %v, want nats.ErrConnectionClosed", e.cause)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("Stop after the connection closed: %v", err)
	}
}

func TestCallsRunConcurrentlyUpToTheBound(t *testing.T) {
	t.Parallel()
	nc := runNATS(t)
	b := newBlocker()
	s := serve(t, nc, "slow", b.handle, tools.WithMaxInFlight(2))
	replies := map[string]<-chan *nats.Msg{}
	for _, c := range []string{"c1", "c2", "c3", "c4"} {
		replies[c] = send(t, nc, toolRequest("slow", "r1", c, `{}`))
	}
	b.waitStarted(t, 2) // two run at once; the other two wait for a slot
	testkit.Eventually(t, wait, "two calls waiting", func() bool { return s.Stats().Waiting == 2 })
	if st := s.Stats(); st.InFlight != 2 {
		t.Errorf("stats %+v, want 2 in flight", st)
	}

	// A cancel reaches a call that waits for a slot: it is answered without
	// running.
	ran := b.startedKeys()
	var waiting []string
	for _, c := range []string{"c1", "c2", "c3", "c4"} {
		if !slices.Contains(ran, "r1/"+c) {
			waiting = append(waiting, c)
		}
	}
	last, other := waiting[1], waiting[0]
	publishCancel(t, nc, "r1", last)
	wantError(t, answer(t, replies[last]), "503", "did not start: "+tools.ErrCancelled.Error())

	for _, k := range ran {
		close(b.releaser(k))
	}
	if started := b.waitStarted(t, 1); started[0] != "r1/"+other {
		t.Errorf("started %s, want r1/%s", started[0], other)
	}
	close(b.releaser("r1/" + other))
	for c := range replies {
		if c != last {
			wantOutput(t, answer(t, replies[c]), "released r1/"+c)
		}
	}
	if most := b.most.Load(); most != 2 {
		t.Errorf("at most %d calls ran at once, want 2", most)
	}
	if b.ctxOf("r1/"+last) != nil {
		t.Errorf("the cancelled call %s ran", last)
	}
}

func TestTwoInstancesShareTheCalls(t *testing.T) {
	t.Parallel()
	srv, nc := natsembed.RunTest(t)
	var mu sync.Mutex
	took := map[string]int{}
	for _, instance := range []string{"a", "b"} {
		conn, err := srv.Connect()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		serve(t, conn, "get_weather", func(context.Context, tools.Call) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			took[instance]++
			return instance, nil
		})
	}
	const calls = 40
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			reply, err := nc.RequestMsg(toolRequest("get_weather", "r1", fmt.Sprint("c", i), `{}`), wait)
			if err != nil {
				t.Errorf("call %d: %v", i, err)
			} else if code, desc := serviceError(reply); code != "" {
				t.Errorf("call %d: error %s %s", i, code, desc)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if took["a"]+took["b"] != calls || took["a"] == 0 || took["b"] == 0 {
		t.Errorf("instances took %v of %d calls, want each call once and both instances some", took, calls)
	}
}

func TestMonitoringEndpoints(t *testing.T) {
	t.Parallel()
	nc := runNATS(t)
	s := serve(t, nc, "get_weather", func(_ context.Context, c tools.Call) (string, error) {
		if string(c.Arguments) == "teapot" {
			return "", tools.Error{Code: "418", Description: "a teapot"}
		}
		return "21", nil
	}, tools.WithVersion("2.1.0"), tools.WithDescription("the weather in a city"))
	wantOutput(t, request(t, nc, toolRequest("get_weather", "r1", "c1", `{}`)), "21")
	wantError(t, request(t, nc, toolRequest("get_weather", "r1", "c2", "teapot")), "418", "a teapot")

	id := s.Micro().Info().ID
	checkIdentity := func(subject string, got micro.ServiceIdentity) {
		t.Helper()
		if got.Name != "get_weather" || got.ID != id || got.Version != "2.1.0" || got.Metadata["foundryq_tool"] != "get_weather" {
			t.Errorf("%s: identity %+v", subject, got)
		}
	}
	for _, subject := range []string{"$SRV.PING", "$SRV.PING.get_weather", "$SRV.PING.get_weather." + id} {
		var ping micro.Ping
		monitor(t, nc, subject, &ping)
		checkIdentity(subject, ping.ServiceIdentity)
	}
	for _, subject := range []string{"$SRV.INFO", "$SRV.INFO.get_weather"} {
		var info micro.Info
		monitor(t, nc, subject, &info)
		checkIdentity(subject, info.ServiceIdentity)
		if info.Description != "the weather in a city" || len(info.Endpoints) != 1 ||
			info.Endpoints[0].Name != "get_weather" || info.Endpoints[0].Subject != "foundryq.tools.get_weather" || info.Endpoints[0].QueueGroup != "q" {
			t.Errorf("%s: info %+v", subject, info)
		}
	}
	// micro counts a request once handle returns, which may be after the
	// reply arrives.
	var stats micro.Stats
	testkit.Eventually(t, wait, "STATS to count both requests", func() bool {
		monitor(t, nc, "$SRV.STATS.get_weather", &stats)
		return len(stats.Endpoints) == 1 && stats.Endpoints[0].NumRequests == 2
	})
	checkIdentity("$SRV.STATS", stats.ServiceIdentity)
	if e := stats.Endpoints[0]; e.Subject != "foundryq.tools.get_weather" || e.QueueGroup != "q" {
		t.Errorf("stats endpoint %+v", *e)
	}
	var data tools.Stats
	if err := json.Unmarshal(stats.Endpoints[0].Data, &data); err != nil {
		t.Fatalf("stats data %s: %v", stats.Endpoints[0].Data, err)
	}
	if data != (tools.Stats{Errors: 1, LastError: "418: a teapot"}) {
		t.Errorf("stats data = %+v", data)
	}
}

// monitor sends a micro monitoring request and decodes the reply into v.
func monitor(t *testing.T, nc *nats.Conn, subject string, v any) {
	t.Helper()
	reply, err := nc.Request(subject, nil, wait)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	if err := json.Unmarshal(reply.Data, v); err != nil {
		t.Fatalf("%s: %v in %s", subject, err, reply.Data)
	}
}

func TestOutputLargerThanMaxPayload(t *testing.T) {
	t.Parallel()
	nc := runNATS(t)
	size := int(nc.MaxPayload()) + 1
	serve(t, nc, "big", func(context.Context, tools.Call) (string, error) {
		return strings.Repeat("x", size), nil
	})
	reply := request(t, nc, toolRequest("big", "r1", "c1", `{}`))
	wantError(t, reply, "413", fmt.Sprintf("the output (%d bytes) is larger than the server's max payload", size))
}

func TestHandlerContextCarriesTheTrace(t *testing.T) {
	t.Parallel()
	nc := runNATS(t)
	serve(t, nc, "traced", func(ctx context.Context, _ tools.Call) (string, error) {
		return trace.SpanContextFromContext(ctx).TraceID().String(), nil
	})
	m := toolRequest("traced", "r1", "c1", `{}`)
	m.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	wantOutput(t, request(t, nc, m), "4bf92f3577b34da6a3ce929d0e0e4736")
}

// A cancel that overtakes its call (the request and the cancel message are
// handled on different goroutines, and the worker may cancel at once) is
// remembered: the call, when it comes, is answered without running.
func TestCancelBeforeTheCallArrives(t *testing.T) {
	t.Parallel()
	nc := runNATS(t)
	b := newBlocker()
	svc := serve(t, nc, "slow", b.handle)
	publishCancel(t, nc, "r1", "c1")
	publishCancel(t, nc, "r1", "c0") // another call: r1/c2 below still runs
	testkit.Eventually(t, wait, "the service to note both cancels", func() bool { return svc.Stats().EarlyCancels == 2 })

	wantError(t, answer(t, send(t, nc, toolRequest("slow", "r1", "c1", `{}`))), "503", tools.ErrCancelled.Error())
	other := send(t, nc, toolRequest("slow", "r1", "c2", `{}`))
	b.waitStarted(t, 1)
	close(b.releaser("r1/c2"))
	wantOutput(t, answer(t, other), "released r1/c2")
	if slices.Contains(b.startedKeys(), "r1/c1") {
		t.Fatal("the handler ran for a call cancelled before it came")
	}
}
