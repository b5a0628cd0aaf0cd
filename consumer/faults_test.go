package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

// Regression tests for the faults a run must survive: each reproduces a way
// the promises once broke (a second billed response, a job stranded in the
// queue, a reused run id answered with the old run, a cancel lost during a
// slow create, ...).

// deadLetter returns the dead letter stored for runID.
func (e *env) deadLetter(runID string) *jetstream.RawStreamMsg {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var m *jetstream.RawStreamMsg
	testkit.Eventually(e.t, 10*time.Second, "the dead letter of "+runID, func() bool {
		s, err := e.js.Stream(ctx, "FOUNDRYQ_DEAD")
		if err != nil {
			return false
		}
		m, err = s.GetLastMsgForSubject(ctx, "foundryq.dead."+runID)
		return err == nil
	})
	return m
}

// waitCreate waits until the emulator has received a create for runID.
func (e *env) waitCreate(runID string) {
	e.t.Helper()
	testkit.Eventually(e.t, 10*time.Second, "the create of "+runID, func() bool { return len(e.emu.CreateRequests(runID)) > 0 })
}

func (e *env) state(runID string) events.RunState {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, _, err := e.client.State(ctx, runID)
	if err != nil {
		e.t.Fatalf("state of %s: %v", runID, err)
	}
	return st
}

func (e *env) responses(runID string) int64 { return e.emu.Stats().ResponsesByRun[runID] }

// A stream cut before response.created leaves a response whose id nobody
// knows. It must never be created again (that was 10 billed responses for
// one run): the run ends run.failed upstream_lost, naming metadata.run_id.
func TestStreamCutBeforeTheIDIsNotCreatedAgain(t *testing.T) {
	t.Parallel()
	e := setup(t, withProvision(consumer.ProvisionConfig{MaxDeliver: 5}))
	e.startWorker(consumer.Config{WorkerID: "cut", RetryDelay: 50 * time.Millisecond})
	e.submit(request("cut-1", map[string]string{"emu_drop_after": "0"}))
	last := checkWellFormed(t, e.collect("cut-1", 20*time.Second))
	if last.Type != events.TypeRunFailed || last.Error.Code != "upstream_lost" || !strings.Contains(last.Error.Message, "metadata.run_id=cut-1") {
		t.Fatalf("run ended %s %+v, want run.failed upstream_lost naming metadata.run_id", last.Type, last.Error)
	}
	if n := e.responses("cut-1"); n != 1 {
		t.Fatalf("emulator created %d responses for the run, want 1", n)
	}
	if code := e.deadLetter("cut-1").Header.Get(events.HeaderDeadCode); code != "upstream_lost" {
		t.Fatalf("dead letter code %q", code)
	}
	e.waitRunsEmpty()
}

// A worker that vanishes (SIGKILL) while a slow create is in flight: the
// next owner finds "create started" without a response id and must not
// create a second response.
func TestVanishedDuringSlowCreateCreatesOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, withProvision(consumer.ProvisionConfig{AckWait: time.Second}))
	// a outlives the slow create: it reads the response id it can no longer
	// save, until its shutdown timeout.
	a := e.startWorker(consumer.Config{WorkerID: "slow-a", ShutdownTimeout: 8 * time.Second})
	// 4,000 tokens at 50 ms: the response streams on for minutes, so the
	// cancel at a's shutdown can never lose a race with its completion,
	// however slowly a loaded machine brings b in.
	e.submit(request("slow-1", map[string]string{"emu_created_ms": "2000", "emu_tokens": "4000", "emu_token_ms": "50"}))
	e.waitCreate("slow-1")
	a.crash()
	e.startWorker(consumer.Config{WorkerID: "slow-b"})
	last := checkWellFormed(t, e.collect("slow-1", 30*time.Second))
	if last.Type != events.TypeRunFailed || last.Error.Code != "upstream_lost" {
		t.Fatalf("run ended %s %+v, want run.failed upstream_lost", last.Type, last.Error)
	}
	if n := e.responses("slow-1"); n != 1 {
		t.Fatalf("emulator created %d responses for the run, want 1", n)
	}
	// The vanished worker (here: still running, its NATS connection gone)
	// could never save the response id; when its shutdown times out it
	// cancels the response nobody can reach.
	a.shutdown(t)
	var recs []foundrytest.ResponseRecord
	defer func() {
		if t.Failed() {
			t.Logf("emulator records: %+v", recs)
		}
	}()
	testkit.Eventually(t, 20*time.Second, "the unreachable response to be cancelled", func() bool {
		recs = e.emu.Records("slow-1")
		return len(recs) == 1 && recs[0].Status == "cancelled"
	})
}

// A NATS outage while the create is in flight, longer than the job's lease,
// with a second worker ready to take the job over: whatever happens, the run
// has one upstream response and one terminal event.
func TestOutageDuringCreateCreatesOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, withNATS(natsembed.Config{}), withProvision(consumer.ProvisionConfig{AckWait: 2 * time.Second}))
	e.startWorker(consumer.Config{WorkerID: "out-a"})
	e.startWorker(consumer.Config{WorkerID: "out-b"})
	for i := range 3 {
		id := fmt.Sprintf("out-%d", i)
		e.submit(request(id, map[string]string{"emu_created_ms": "1500", "emu_tokens": "30", "emu_token_ms": "20"}))
		e.waitCreate(id)
		e.ns.Stop()
		time.Sleep(3 * time.Second) // the outage: longer than the lease, covering response.created
		if err := e.ns.Restart(); err != nil {
			t.Fatal(err)
		}
		checkWellFormed(t, e.collect(id, 60*time.Second))
		if n := e.responses(id); n != 1 {
			t.Fatalf("%s: emulator created %d responses, want 1", id, n)
		}
	}
}

// A cancel that arrives while the create is slow (Foundry can take minutes
// to send response.created under load) waits for the response id, however
// long it takes, and cancels that response: the run never ends "cancelled"
// while its response runs on, billed.
func TestCancelWhileTheCreateIsSlow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "sc", CancelConfirmTimeout: 500 * time.Millisecond})
	e.submit(request("sc-1", map[string]string{"emu_created_ms": "3000", "emu_tokens": "200", "emu_token_ms": "20"}))
	e.waitCreate("sc-1")
	if reply := e.cancel("sc-1"); reply.Result != events.CancelCancelling {
		t.Fatalf("reply %+v", reply)
	}
	last := checkWellFormed(t, e.collect("sc-1", 30*time.Second))
	if last.Type != events.TypeRunCancelled || last.UpstreamStatus != "cancelled" {
		t.Fatalf("run ended %s with upstream status %q, want run.cancelled / cancelled", last.Type, last.UpstreamStatus)
	}
	recs := e.emu.Records("sc-1")
	if len(recs) != 1 || recs[0].Status != "cancelled" || recs[0].TokensAfterCancel != 0 {
		t.Fatalf("emulator: %+v, want one response, cancelled", recs)
	}
}

// cancel_on_disconnect_seconds counts silence from watchers, not the
// worker's own outage: a NATS restart longer than the limit does not
// abandon a watched run.
func TestHeartbeatDeadlinePausesDuringOutage(t *testing.T) {
	t.Parallel()
	e := setup(t, withNATS(natsembed.Config{}))
	e.startWorker(consumer.Config{WorkerID: "hb"})
	req := request("hb-1", map[string]string{"emu_tokens": "160", "emu_token_ms": "50"})
	req.CancelOnDisconnectSeconds = 2
	e.submit(req)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := e.client.Watch(ctx, "hb-1", events.WatchOptions{HeartbeatInterval: 200 * time.Millisecond})
	defer w.Close()
	if _, err := w.Next(ctx); err != nil {
		t.Fatal(err)
	}
	e.ns.Stop()
	time.Sleep(4 * time.Second) // twice cancel_on_disconnect_seconds
	if err := e.ns.Restart(); err != nil {
		t.Fatal(err)
	}
	var last events.RunEvent
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		if ev.Type.Terminal() {
			last = ev
			break
		}
	}
	if last.Type != events.TypeRunCompleted {
		t.Fatalf("watched run ended %s (%s) after a NATS restart, want run.completed", last.Type, last.Reason)
	}
}

// With a small max payload, text merged while a publish waits must still
// fit: events are split instead of retried forever (a 1.4 MB delta once
// wedged a run after an outage).
func TestLargeMergedTextIsSplit(t *testing.T) {
	t.Parallel()
	e := setup(t, withNATS(natsembed.Config{MaxPayload: 16 << 10}))
	e.startWorker(consumer.Config{WorkerID: "big", EventInterval: 200 * time.Millisecond})
	e.submit(request("big-1", map[string]string{"emu_tokens": "20000"}))
	evs := e.collect("big-1", 60*time.Second)
	if last := checkWellFormed(t, evs); last.Type != events.TypeRunCompleted {
		t.Fatalf("run ended %s", last.Type)
	}
	if got, want := text(evs), e.emulatorText("big-1"); got != want {
		t.Fatalf("text differs: got %d bytes, want %d", len(got), len(want))
	}
}

// A dead letter larger than the max payload is kept, truncated, with a
// header that says so (it was lost, after "dead-lettered" was logged).
func TestOversizedDeadLetterIsTruncated(t *testing.T) {
	t.Parallel()
	e := setup(t, withNATS(natsembed.Config{MaxPayload: 16 << 10}))
	e.startWorker(consumer.Config{WorkerID: "dl"})
	// The request fits the max payload; with the dead letter's headers it does not.
	body := fmt.Sprintf(`{"run_id":"dl-1","model":"bad model","input":"hi","bogus":%q}`, strings.Repeat("x", 16<<10-300))
	if _, err := e.js.Publish(context.Background(), "foundryq.runs.dl-1", []byte(body)); err != nil {
		t.Fatal(err)
	}
	m := e.deadLetter("dl-1")
	if m.Header.Get(events.HeaderDeadTruncated) != fmt.Sprint(len(body)) || len(m.Data) >= len(body) || !strings.HasPrefix(body, string(m.Data)) {
		t.Fatalf("dead letter: %d bytes, truncated header %q", len(m.Data), m.Header.Get(events.HeaderDeadTruncated))
	}
	if last := checkWellFormed(t, e.collect("dl-1", 10*time.Second)); last.Error == nil || last.Error.Code != events.CodeInvalidRequest {
		t.Fatalf("run ended %+v", last)
	}
}

// The state record shows how a run ended no later than its terminal event
// is visible (a user who saw run.completed and then read the state could
// read "running").
func TestStateEndsNoLaterThanTheTerminalEvent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.twoWorkers(consumer.Config{})
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		id := fmt.Sprintf("order-%d", i)
		md := map[string]string{"emu_tokens": "5"}
		if i%3 == 0 {
			md["emu_fail_after"] = "3"
		}
		e.submit(request(id, md))
		wg.Add(1)
		go func() {
			defer wg.Done()
			evs, err := collectErr(e.client, id, 30*time.Second)
			if err != nil {
				errs <- err
				return
			}
			st, _, err := e.client.State(context.Background(), id)
			last := evs[len(evs)-1]
			switch {
			case err != nil:
				errs <- err
			case !st.Finished() || st.Terminal != last.Type:
				errs <- fmt.Errorf("%s: state %s/%s right after %s was visible", id, st.Status, st.Terminal, last.Type)
			case st.End == nil || st.End.Seq != last.Seq || st.End.Type != last.Type:
				errs <- fmt.Errorf("%s: state's end %+v is not the terminal event %+v", id, st.End, last)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A record that says the run ended, with its terminal event never stored
// (the worker failed between the two writes): the worker that sees the job
// publishes the event from the record instead of acking a run without end.
func TestMissingTerminalEventIsRepaired(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	res, err := consumer.Provision(ctx, e.js, events.Names{}, consumer.ProvisionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	req := request("rep-1", nil)
	e.submit(req)
	now := time.Now().UTC().Truncate(time.Millisecond)
	end := events.RunEvent{RunID: "rep-1", Seq: 1, Type: events.TypeRunCancelled, Time: now, Reason: events.ReasonRequested, Usage: &events.Usage{}}
	st := events.RunState{RunID: "rep-1", Schema: 1, Status: events.StatusCancelled, Digest: req.Digest(), Terminal: end.Type, End: &end, FinishedAt: &now}
	data, _ := json.Marshal(st)
	if _, err := res.State.Create(ctx, "rep-1", data); err != nil {
		t.Fatal(err)
	}
	e.startWorker(consumer.Config{WorkerID: "rep"})
	evs := e.collect("rep-1", 10*time.Second)
	if len(evs) != 1 || evs[0].Type != events.TypeRunCancelled || !evs[0].Time.Equal(now) {
		t.Fatalf("events %+v, want the record's run.cancelled", evs)
	}
	e.waitRunsEmpty()
	if n := e.responses("rep-1"); n != 0 {
		t.Fatalf("a cancelled run reached Foundry: %d responses", n)
	}
}

// A state record that cannot be decoded ends the run with a terminal event
// and a dead letter (the job stayed in the queue for ever).
func TestUnreadableStateEndsTheRun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	res, err := consumer.Provision(ctx, e.js, events.Names{}, consumer.ProvisionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	e.tap.IgnoreRun("bad-1") // its record is garbage on purpose
	if _, err := res.State.Put(ctx, "bad-1", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	e.startWorker(consumer.Config{WorkerID: "bad"})
	e.submit(request("bad-1", nil))
	last := checkWellFormed(t, e.collect("bad-1", 20*time.Second))
	if last.Type != events.TypeRunFailed || last.Error.Code != "state_unreadable" {
		t.Fatalf("run ended %s %+v", last.Type, last.Error)
	}
	if code := e.deadLetter("bad-1").Header.Get(events.HeaderDeadCode); code != "state_unreadable" {
		t.Fatalf("dead letter code %q", code)
	}
	e.waitRunsEmpty()
	if st := e.state("bad-1"); st.Status != events.StatusFailed {
		t.Fatalf("state %+v", st)
	}
}

// Hand-offs at shutdown do not use up the failure budget: with a budget of
// one failed attempt, a run handed off twice still completes (it stayed in
// the queue with no terminal event).
func TestHandOffsDoNotUseTheBudget(t *testing.T) {
	t.Parallel()
	e := setup(t, withProvision(consumer.ProvisionConfig{MaxDeliver: 1}))
	if _, err := consumer.Provision(context.Background(), e.js, events.Names{}, e.prov); err != nil {
		t.Fatal(err)
	}
	e.submit(request("ho-1", map[string]string{"emu_tokens": "120", "emu_token_ms": "25"}))
	for _, id := range []string{"ho-a", "ho-b"} {
		w := e.startWorker(consumer.Config{WorkerID: id})
		testkit.Eventually(t, 10*time.Second, id+" to relay text", func() bool {
			evs, _ := collectPrefix(e.client, "ho-1")
			return count(types(evs), events.TypeTextDelta) > 0 && lastStarted(evs) == id
		})
		w.shutdown(t)
	}
	e.startWorker(consumer.Config{WorkerID: "ho-c"})
	evs := e.collect("ho-1", 30*time.Second)
	if last := checkWellFormed(t, evs); last.Type != events.TypeRunCompleted {
		t.Fatalf("run ended %s %+v", last.Type, last.Error)
	}
	if got, want := text(evs), e.emulatorText("ho-1"); got != want {
		t.Fatal("text across two hand-offs differs from the emulator's")
	}
	if st := e.state("ho-1"); st.Failures != 0 {
		t.Fatalf("hand-offs counted as %d failures", st.Failures)
	}
}

// The last permitted attempt ends the run with a terminal event and a dead
// letter, and the job leaves the queue.
func TestLastAttemptEndsTheRun(t *testing.T) {
	t.Parallel()
	e := setup(t, withProvision(consumer.ProvisionConfig{MaxDeliver: 3}))
	e.startWorker(consumer.Config{WorkerID: "last", RetryDelay: 50 * time.Millisecond})
	e.submit(request("last-1", map[string]string{"emu_create_status": "500"}))
	last := checkWellFormed(t, e.collect("last-1", 30*time.Second))
	if last.Type != events.TypeRunFailed || last.Error.Code != "attempts_exhausted" || !strings.Contains(last.Error.Message, "500") {
		t.Fatalf("run ended %s %+v", last.Type, last.Error)
	}
	if got := len(e.emu.CreateRequests("last-1")); got != 3 {
		t.Fatalf("%d creates, want 3 (one per permitted attempt)", got)
	}
	if code := e.deadLetter("last-1").Header.Get(events.HeaderDeadCode); code != "attempts_exhausted" {
		t.Fatalf("dead letter code %q", code)
	}
	e.waitRunsEmpty()
}

// Streams, consumer and bucket deleted under a running worker are
// recreated, and runs go on (a missing events stream once stranded jobs).
func TestDeletedResourcesAreRecreated(t *testing.T) {
	t.Parallel()
	for name, del := range map[string]func(e *env) error{
		"events stream": func(e *env) error { return e.js.DeleteStream(context.Background(), "FOUNDRYQ_EVENTS") },
		"state bucket":  func(e *env) error { return e.js.DeleteKeyValue(context.Background(), "foundryq-runs") },
		"runs stream":   func(e *env) error { return e.js.DeleteStream(context.Background(), "FOUNDRYQ_RUNS") },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			e.startWorker(consumer.Config{WorkerID: "re"})
			ctx := context.Background()
			if err := del(e); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 30*time.Second, "a submit to be accepted", func() bool {
				sctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				_, err := e.client.Submit(sctx, request("re-1", nil))
				return err == nil
			})
			testkit.Eventually(t, 30*time.Second, "the events stream", func() bool {
				_, err := e.js.Stream(ctx, "FOUNDRYQ_EVENTS")
				return err == nil
			})
			if last := checkWellFormed(t, e.collect("re-1", 30*time.Second)); last.Type != events.TypeRunCompleted {
				t.Fatalf("run ended %s", last.Type)
			}
		})
	}
}

// A request under a finished run's id: the same request is a retry (the
// existing run, nothing appended); a different one is refused, dead-lettered
// as duplicate_run_id, and never appended to the old run's subject.
func TestReusedRunIDIsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "reuse"})
	req := request("reuse-1", map[string]string{"emu_tokens": "5"})
	e.submit(req)
	first := e.collect("reuse-1", 20*time.Second)
	e.waitRunsEmpty()
	ctx := context.Background()

	res, err := e.client.Submit(ctx, req)
	if err != nil || !res.Existing || res.Status != events.StatusCompleted {
		t.Fatalf("resubmit of the same request: %+v %v", res, err)
	}
	other := req
	other.Input = json.RawMessage(`"a different question"`)
	if _, err := e.client.Submit(ctx, other); !errors.Is(err, events.ErrRunIDUsed) {
		t.Fatalf("different request: %v, want ErrRunIDUsed", err)
	}
	// A raw publish (past the dedupe window: no message id) reaches a worker.
	data, _ := json.Marshal(other)
	if _, err := e.js.Publish(ctx, "foundryq.runs.reuse-1", data); err != nil {
		t.Fatal(err)
	}
	if code := e.deadLetter("reuse-1").Header.Get(events.HeaderDeadCode); code != "duplicate_run_id" {
		t.Fatalf("dead letter code %q", code)
	}
	e.waitRunsEmpty()
	if again := e.collect("reuse-1", 10*time.Second); len(again) != len(first) {
		t.Fatalf("the old run has %d events, had %d", len(again), len(first))
	}
	if n := e.responses("reuse-1"); n != 1 {
		t.Fatalf("%d responses", n)
	}
}

// A worker whose NATS connection is closed for good returns an error
// instead of spinning until its context ends.
func TestClosedConnectionStopsTheWorker(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := e.startWorker(consumer.Config{WorkerID: "closed"})
	w.Jobs.Close()
	select {
	case <-w.Done():
		if err := w.Err(); !errors.Is(err, nats.ErrConnectionClosed) {
			t.Fatalf("Run: %v, want ErrConnectionClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its connection was closed")
	}
}

// A worker started while NATS is down waits for it (it exited after 5s).
func TestWorkerWaitsForNATS(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	opts := append([]nats.Option{nats.RetryOnFailedConnect(true)}, reconnecting...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	pub, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	e := setup(t)
	w, err := consumer.New(nc, e.up, consumer.Config{WorkerID: "late", PublishConn: pub})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("worker did not stop")
		}
	}()
	select {
	case err := <-done:
		t.Fatalf("worker gave up while NATS was down: %v", err)
	case <-time.After(7 * time.Second):
	}
	ns := natsembed.StartT(t, natsembed.Config{Port: port, StoreDir: t.TempDir()})
	cnc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer cnc.Close()
	c, err := events.NewClient(cnc, events.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "a submit to be accepted", func() bool {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := c.Submit(sctx, request("late-1", nil))
		return err == nil
	})
	evs, err := collectErr(c, "late-1", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if last := checkWellFormed(t, evs); last.Type != events.TypeRunCompleted {
		t.Fatalf("run ended %s", last.Type)
	}
}

// A job fetched in the last poll before shutdown is handed back at once,
// not left to its ack wait.
func TestJobArrivingDuringShutdownIsHandedBack(t *testing.T) {
	t.Parallel()
	e := setup(t) // ack wait 30s
	a := e.startWorker(consumer.Config{WorkerID: "late-a", PollWait: 3 * time.Second, ShutdownTimeout: time.Second})
	testkit.Eventually(t, 10*time.Second, "a's pull request to wait at the server", func() bool {
		c, err := e.js.Consumer(context.Background(), "FOUNDRYQ_RUNS", "foundryq-workers")
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumWaiting > 0
	})
	a.BeginStop() // shutdown starts while the pull waits
	e.submit(request("lp-1", map[string]string{"emu_tokens": "100", "emu_token_ms": "50"}))
	if err := a.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.startWorker(consumer.Config{WorkerID: "late-b"})
	e.waitEvent("lp-1", events.TypeRunStarted, 20*time.Second)
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("the job waited %s for its ack wait", took)
	}
}

// collectPrefix reads the events stored for a run so far.
func collectPrefix(c *events.Client, runID string) ([]events.RunEvent, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	w := c.Watch(ctx, runID, events.WatchOptions{NoHeartbeat: true})
	defer w.Close()
	var evs []events.RunEvent
	for {
		nctx, ncancel := context.WithTimeout(ctx, 200*time.Millisecond)
		ev, err := w.Next(nctx)
		ncancel()
		if err != nil {
			return evs, nil
		}
		evs = append(evs, ev)
	}
}

// lastStarted is the worker of the last run.started event.
func lastStarted(evs []events.RunEvent) string {
	w := ""
	for _, ev := range evs {
		if ev.Type == events.TypeRunStarted {
			w = ev.Worker
		}
	}
	return w
}
