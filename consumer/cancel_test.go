package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/testkit"
)

// twoWorkers starts two workers, so that the one answering a cancel is often
// not the run's owner.
func (e *env) twoWorkers(cfg consumer.Config) {
	e.t.Helper()
	a, b := cfg, cfg
	a.WorkerID, b.WorkerID = "wa", "wb"
	e.startWorker(a)
	e.startWorker(b)
}

func (e *env) cancel(runID string) events.CancelReply {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reply, err := e.client.Cancel(ctx, runID, "test")
	if err != nil {
		e.t.Fatalf("cancel %s: %v", runID, err)
	}
	if reply.Error != "" {
		e.t.Fatalf("cancel %s: reply error %s", runID, reply.Error)
	}
	return reply
}

// upstreamStatus is the emulator's status of the run's only response.
func (e *env) upstreamStatus(runID string) string {
	e.t.Helper()
	recs := e.emu.Records(runID)
	if len(recs) != 1 {
		e.t.Fatalf("emulator has %d responses for %s, want 1", len(recs), runID)
	}
	return recs[0].Status
}

func slow(runID string) events.RunRequest {
	return request(runID, map[string]string{"emu_tokens": "100000", "emu_token_ms": "10"})
}

func TestCancelWhileStreaming(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.twoWorkers(consumer.Config{})
	e.submit(slow("stream-1"))
	e.waitEvent("stream-1", events.TypeTextDelta, 10*time.Second)

	// The owner follows the stored cancel record, so it may have ended
	// the run before the request was answered: cancelling all the same
	// (the client's cancel id tells the worker it was this cancel), with
	// the outcome then.
	reply := e.cancel("stream-1")
	if reply.Result != events.CancelCancelling || (reply.Terminal != "" && reply.UpstreamStatus != "cancelled") {
		t.Fatalf("reply = %+v, want cancelling (recorded, Foundry's answer follows on the events)", reply)
	}
	evs := e.collect("stream-1", 15*time.Second)
	last := checkWellFormed(t, evs)
	if last.Type != events.TypeRunCancelled || last.Reason != events.ReasonRequested || last.UpstreamStatus != "cancelled" {
		t.Fatalf("last event %+v, want run.cancelled requested with upstream status cancelled", last)
	}
	if last.Usage == nil || last.Usage.OutputTokens == 0 || last.UsageUnknown {
		t.Fatalf("run.cancelled usage = %+v (unknown %v), want the tokens billed so far", last.Usage, last.UsageUnknown)
	}
	if got := e.upstreamStatus("stream-1"); got != "cancelled" {
		t.Fatalf("emulator status %s, want cancelled", got)
	}
	st := e.emu.Stats()
	if st.TokensAfterCancel != 0 {
		t.Fatalf("emulator generated %d tokens after the cancel", st.TokensAfterCancel)
	}
	// Everything relayed was generated before the cancel; nothing after.
	if rec := e.emu.Records("stream-1")[0]; text(evs) != rec.Text[:len(text(evs))] {
		t.Fatalf("relayed text is not a prefix of the generated text")
	}
}

func TestCancelDuringToolCall(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.twoWorkers(consumer.Config{})
	req := request("tool-c", map[string]string{"emu_tool_ms": "1500", "emu_tokens": "50"})
	req.Tools = []json.RawMessage{json.RawMessage(`{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp","require_approval":"never"}`)}
	e.submit(req)
	e.waitEvent("tool-c", events.TypeToolStarted, 10*time.Second)
	reply := e.cancel("tool-c")
	if reply.Result != events.CancelCancelling {
		t.Fatalf("reply = %+v", reply)
	}
	last := checkWellFormed(t, e.collect("tool-c", 15*time.Second))
	if last.Type != events.TypeRunCancelled || last.UpstreamStatus != "cancelled" {
		t.Fatalf("last event %+v", last)
	}
	time.Sleep(1600 * time.Millisecond) // past the tool's scheduled end
	st := e.emu.Stats()
	if st.ToolCallsAborted != 1 || st.ToolCallsCompletedAfterCancel != 0 || st.TokensAfterCancel != 0 {
		t.Fatalf("emulator: %d tool calls aborted, %d completed after the cancel, %d tokens after; want 1, 0, 0",
			st.ToolCallsAborted, st.ToolCallsCompletedAfterCancel, st.TokensAfterCancel)
	}
}

func TestCancelBeforeTheResponseIDIsKnown(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.twoWorkers(consumer.Config{})
	e.submit(request("early-1", map[string]string{"emu_created_ms": "800", "emu_tokens": "1000", "emu_token_ms": "10"}))
	// Wait until a worker owns the run and the create is in flight: the
	// emulator has it (the create mark alone is written before the create
	// is sent, and a cancel that comes in between ends the run without
	// calling Foundry, as it should).
	testkit.Eventually(t, 10*time.Second, "the create to be sent", func() bool {
		st, _, err := e.client.State(context.Background(), "early-1")
		return err == nil && st.CreateStartedAt != nil && e.emu.Stats().ResponsesByRun["early-1"] == 1
	})
	reply := e.cancel("early-1")
	if reply.Result != events.CancelCancelling || reply.UpstreamStatus != "" {
		t.Fatalf("reply = %+v, want cancelling without an upstream status (no response id yet)", reply)
	}
	evs := e.collect("early-1", 15*time.Second)
	last := checkWellFormed(t, evs)
	if last.Type != events.TypeRunCancelled || last.UpstreamStatus != "cancelled" {
		t.Fatalf("events %v, last %+v", types(evs), last)
	}
	if got := e.upstreamStatus("early-1"); got != "cancelled" {
		t.Fatalf("emulator status %s, want cancelled", got)
	}
	// Tokens generated before the cancel reached Foundry may be relayed;
	// none is generated after it.
	if rec := e.emu.Records("early-1")[0]; rec.TokensAfterCancel != 0 || !strings.HasPrefix(rec.Text, text(evs)) {
		t.Fatalf("emulator: %d tokens after the cancel; relayed %q, generated %q", rec.TokensAfterCancel, text(evs), rec.Text)
	}
}

func TestCancelWhileQueued(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.twoWorkers(consumer.Config{Concurrency: 1})
	e.submit(slow("busy-1"))
	e.submit(slow("busy-2"))
	e.waitEvent("busy-1", events.TypeRunStarted, 10*time.Second)
	e.waitEvent("busy-2", events.TypeRunStarted, 10*time.Second)
	e.submit(slow("queued-1")) // both workers are full

	start := time.Now()
	reply := e.cancel("queued-1")
	if reply.Result != events.CancelCancelled {
		t.Fatalf("reply = %+v, want cancelled", reply)
	}
	ev := e.waitEvent("queued-1", events.TypeRunCancelled, 5*time.Second)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("run.cancelled for a queued run took %s", took)
	}
	if ev.Seq != 1 || ev.UpstreamStatus != "" || ev.Usage == nil || ev.Usage.TotalTokens != 0 {
		t.Fatalf("run.cancelled = %+v, want seq 1, no upstream status, zero usage", ev)
	}
	// Cancelling again gives the same answer; a free worker never runs it.
	if again := e.cancel("queued-1"); again.Result != events.CancelCancelled {
		t.Fatalf("second cancel = %+v, want cancelled", again)
	}
	e.cancel("busy-1")
	e.cancel("busy-2")
	e.collect("busy-1", 10*time.Second)
	e.collect("busy-2", 10*time.Second)
	e.waitRunsEmpty()
	if n := len(e.emu.Records("queued-1")); n != 0 {
		t.Fatalf("a run cancelled while queued reached Foundry %d times", n)
	}
	if evs := e.collect("queued-1", 5*time.Second); len(evs) != 1 {
		t.Fatalf("queued run has events %v, want only run.cancelled", types(evs))
	}
}

func TestCancelWithNoWorkerRunning(t *testing.T) {
	t.Parallel()
	e := setup(t)
	if _, err := consumer.Provision(context.Background(), e.js, events.Names{Prefix: "foundryq"}, consumer.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	e.submit(slow("offline-1"))
	reply := e.cancel("offline-1") // nobody answers: the client records it
	if reply.Result != events.CancelCancelling {
		t.Fatalf("reply = %+v, want cancelling (recorded for the worker that takes the run)", reply)
	}
	e.twoWorkers(consumer.Config{})
	last := checkWellFormed(t, e.collect("offline-1", 10*time.Second))
	if last.Type != events.TypeRunCancelled || last.Reason != events.ReasonRequested {
		t.Fatalf("last event %+v", last)
	}
	if n := len(e.emu.Records("offline-1")); n != 0 {
		t.Fatalf("the run reached Foundry %d times", n)
	}
}

func TestCancelAfterCompletionAndUnknown(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.twoWorkers(consumer.Config{})
	e.submit(request("done-1", map[string]string{"emu_tokens": "5"}))
	before := e.collect("done-1", 10*time.Second)
	e.waitRunsEmpty()

	reply := e.cancel("done-1")
	if reply.Result != events.CancelAlreadyFinished || reply.Terminal != events.TypeRunCompleted {
		t.Fatalf("reply = %+v, want already_finished run.completed", reply)
	}
	if after := e.collect("done-1", 5*time.Second); len(after) != len(before) {
		t.Fatalf("cancel after completion added events: %v", types(after))
	}
	if n := e.emu.Stats().CancelsReceived; n != 0 {
		t.Fatalf("a finished run's cancel reached Foundry %d times", n)
	}
	if reply := e.cancel("never-was"); reply.Result != events.CancelNotFound {
		t.Fatalf("unknown run: reply = %+v, want not_found", reply)
	}
}

func TestCancelTwice(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.twoWorkers(consumer.Config{})
	e.submit(slow("twice-c"))
	e.waitEvent("twice-c", events.TypeTextDelta, 10*time.Second)
	var wg sync.WaitGroup
	replies := make([]events.CancelReply, 2)
	for i := range replies {
		wg.Add(1)
		go func() { defer wg.Done(); replies[i] = e.cancel("twice-c") }()
	}
	wg.Wait()
	for _, r := range replies {
		if r.Result != events.CancelCancelling && !(r.Result == events.CancelAlreadyFinished && r.Terminal == events.TypeRunCancelled) {
			t.Fatalf("replies %+v", replies)
		}
	}
	last := checkWellFormed(t, e.collect("twice-c", 10*time.Second))
	if last.Type != events.TypeRunCancelled {
		t.Fatalf("last event %+v", last)
	}
	if again := e.cancel("twice-c"); again.Result != events.CancelAlreadyFinished || again.Terminal != events.TypeRunCancelled {
		t.Fatalf("cancel after the end: %+v", again)
	}
}

func TestRunTimeout(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.twoWorkers(consumer.Config{DefaultTimeout: 700 * time.Millisecond})
	req := slow("timeout-1")
	req.TimeoutSeconds = 1
	e.submit(req)
	e.submit(slow("timeout-default"))
	for _, id := range []string{"timeout-1", "timeout-default"} {
		last := checkWellFormed(t, e.collect(id, 10*time.Second))
		if last.Type != events.TypeRunCancelled || last.Reason != events.ReasonTimeout || last.UpstreamStatus != "cancelled" {
			t.Fatalf("%s: last event %+v, want run.cancelled timeout, upstream cancelled", id, last)
		}
		if got := e.upstreamStatus(id); got != "cancelled" {
			t.Fatalf("%s: emulator status %s", id, got)
		}
	}
}

func TestCancelOnDisconnect(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.twoWorkers(consumer.Config{})
	abandoned := slow("alone-1")
	abandoned.CancelOnDisconnectSeconds = 1
	e.submit(abandoned)

	watched := request("watched-1", map[string]string{"emu_tokens": "150", "emu_token_ms": "15"}) // ~2.3s
	watched.CancelOnDisconnectSeconds = 1
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w := e.client.Watch(ctx, "watched-1", events.WatchOptions{HeartbeatInterval: 200 * time.Millisecond})
	defer w.Close()
	e.submit(watched)

	// The unwatched run is cancelled as abandoned (waitEvent sends no heartbeats).
	ev := e.waitEvent("alone-1", events.TypeRunCancelled, 10*time.Second)
	if ev.Reason != events.ReasonAbandoned || ev.UpstreamStatus != "cancelled" {
		t.Fatalf("run.cancelled = %+v, want abandoned, upstream cancelled", ev)
	}
	// The watched one outlives the 1s limit and completes.
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		if ev.Type.Terminal() {
			if ev.Type != events.TypeRunCompleted {
				t.Fatalf("watched run ended %+v", ev)
			}
			break
		}
	}
}

func TestCompletedDespiteCancelStaysCancelled(t *testing.T) {
	t.Parallel()
	e := setup(t)
	reg := prometheus.NewRegistry()
	// The audit reads the response back once, CancelAuditDelay after the
	// cancel; the emulator completes it about 0.6 s after the cancel (60
	// tokens, 10 ms apart), so the delay leaves a wide margin on a loaded
	// machine, and the test checks that the margin held.
	const auditDelay = 5 * time.Second
	e.startWorker(consumer.Config{WorkerID: "despite", Registerer: reg, CancelAuditDelay: auditDelay})
	e.submit(request("despite-1", map[string]string{"emu_tokens": "60", "emu_token_ms": "10", "emu_complete_despite_cancel": "1"}))
	e.waitEvent("despite-1", events.TypeTextDelta, 10*time.Second)
	e.cancel("despite-1")
	last := checkWellFormed(t, e.collect("despite-1", 15*time.Second))
	if last.Type != events.TypeRunCancelled || last.UpstreamStatus != "cancelled" {
		t.Fatalf("last event %+v, want run.cancelled with upstream status cancelled", last)
	}
	// Foundry finishes the response anyway; the audit notices.
	cancelled := time.Now()
	testkit.Eventually(t, auditDelay, "the emulator to complete the response despite the cancel", func() bool {
		return e.upstreamStatus("despite-1") == "completed"
	})
	if waited := time.Since(cancelled); waited > auditDelay*3/4 {
		t.Logf("the emulator took %s to complete the response; the audit (after %s) may read it too early", waited, auditDelay)
	}
	testkit.Eventually(t, 3*auditDelay, "the audit to record the completion", func() bool {
		return counter(t, reg, "foundryq_completed_after_cancel_total", "") == 1
	})
	st, _, err := e.client.State(context.Background(), "despite-1")
	if err != nil || st.Status != events.StatusCancelled || st.UpstreamStatus != "completed" {
		t.Fatalf("state %+v (%v), want cancelled with upstream completed", st, err)
	}
	if got := e.upstreamStatus("despite-1"); got != "completed" {
		t.Fatalf("emulator status %s, want completed (the scenario)", got)
	}
}

// Hundreds of runs, cancelled at random moments (before pickup, during the
// create, mid-tool, mid-text, after the end), with two workers: every run
// ends with exactly one terminal event, and every cancelled run is cancelled
// upstream or never reached Foundry.
func TestCancelRace(t *testing.T) {
	t.Parallel()
	const runs = 200
	e := setup(t)
	e.twoWorkers(consumer.Config{Concurrency: 100})
	rng := rand.New(rand.NewPCG(1, 2))
	type plan struct {
		id    string
		delay time.Duration
	}
	plans := make([]plan, runs)
	for i := range plans {
		plans[i] = plan{id: fmt.Sprintf("race-%d", i), delay: time.Duration(rng.IntN(1500)) * time.Millisecond}
	}
	var wg sync.WaitGroup
	for i, p := range plans {
		md := map[string]string{"emu_tokens": fmt.Sprint(20 + i%80), "emu_token_ms": "10"}
		switch i % 4 {
		case 1:
			md["emu_created_ms"] = "200"
		case 2:
			md["emu_tool_ms"] = "300"
		}
		req := request(p.id, md)
		if i%4 == 2 {
			req.Tools = []json.RawMessage{json.RawMessage(`{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp","require_approval":"never"}`)}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.submit(req)
			time.Sleep(p.delay)
			e.cancel(p.id)
		}()
	}
	wg.Wait()
	for _, p := range plans {
		evs, err := collectErr(e.client, p.id, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		last := checkWellFormed(t, evs)
		recs := e.emu.Records(p.id)
		if len(recs) > 1 {
			t.Fatalf("%s: %d responses upstream", p.id, len(recs))
		}
		switch last.Type {
		case events.TypeRunCancelled:
			if len(recs) == 1 && recs[0].Status != "cancelled" {
				t.Fatalf("%s: run.cancelled but upstream status %s", p.id, recs[0].Status)
			}
		case events.TypeRunCompleted:
			if len(recs) != 1 || recs[0].Status != "completed" || text(evs) != recs[0].Text {
				t.Fatalf("%s: run.completed but upstream %+v", p.id, recs)
			}
		default:
			t.Fatalf("%s: ended %+v", p.id, last)
		}
	}
	if st := e.emu.Stats(); st.TokensAfterCancel != 0 || st.ToolCallsCompletedAfterCancel != 0 {
		t.Fatalf("emulator: %d tokens and %d tool calls after a cancel", st.TokensAfterCancel, st.ToolCallsCompletedAfterCancel)
	}
}

// A response cancelled at Foundry directly (not through foundryq) ends its
// stream without a terminal event; the run ends as run.cancelled instead of
// re-attaching forever.
func TestCancelledUpstreamByOthers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "others"})
	e.submit(slow("others-1"))
	started := e.waitEvent("others-1", events.TypeRunStarted, 10*time.Second)
	e.waitEvent("others-1", events.TypeTextDelta, 10*time.Second)
	if _, err := e.up.Cancel(context.Background(), started.ResponseID); err != nil {
		t.Fatal(err)
	}
	last := checkWellFormed(t, e.collect("others-1", 15*time.Second))
	if last.Type != events.TypeRunCancelled || last.UpstreamStatus != "cancelled" || last.Usage == nil {
		t.Fatalf("last event %+v, want run.cancelled with upstream status cancelled and usage", last)
	}
}

// A malformed or oversized cancel body gets an error reply and cancels
// nothing, the owner's own subscription included (it once stored a
// 5,000-character reason, and cancelled the run after replying an error to
// {"reason":5}).
func TestMalformedCancelCancelsNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.twoWorkers(consumer.Config{})
	e.submit(request("bad-c", map[string]string{"emu_tokens": "60", "emu_token_ms": "25"}))
	e.waitEvent("bad-c", events.TypeTextDelta, 10*time.Second)
	for _, body := range []string{`{"reason":5}`, fmt.Sprintf(`{"reason":%q}`, strings.Repeat("x", 5000)), `{"why":"x"}`, `not json`} {
		msg, err := e.nc.Request("foundryq.cancel.bad-c", []byte(body), 30*time.Second)
		if err != nil {
			t.Fatalf("%.20s: %v", body, err)
		}
		reply, err := events.DecodeCancelReply(msg.Data)
		if err != nil || reply.Error == "" || reply.Result != "" {
			t.Fatalf("%.20s: reply %+v, %v; want an error and no result", body, reply, err)
		}
	}
	evs := e.collect("bad-c", 20*time.Second)
	if last := checkWellFormed(t, evs); last.Type != events.TypeRunCompleted {
		t.Fatalf("run ended %s after malformed cancels", last.Type)
	}
	if st := e.state("bad-c"); st.Cancel != nil {
		t.Fatalf("a malformed cancel was recorded: %+v", st.Cancel)
	}
	if n := e.emu.Stats().CancelsReceived; n != 0 {
		t.Fatalf("Foundry got %d cancels", n)
	}
}

// A client that sends what looks like a worker's cancel notice (the cancel
// subject with the header Foundryq-Cancel-Notice, as workers sent them
// before notices moved to <prefix>.notice.<run_id>) cancels nothing: only
// workers may publish notices, on their own subject, and a run is
// cancelled by a cancel on record or a request a worker answered.
func TestForgedCancelNoticeCancelsNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.twoWorkers(consumer.Config{})
	e.submit(request("forged-n", map[string]string{"emu_tokens": "60", "emu_token_ms": "25"}))
	e.waitEvent("forged-n", events.TypeTextDelta, 10*time.Second)
	for _, withReply := range []bool{false, true} {
		m := nats.NewMsg("foundryq.cancel.forged-n")
		m.Data = []byte(`{"reason":"forged"}`)
		m.Header.Set(events.HeaderCancelNotice, "wa")
		if withReply {
			if _, err := e.nc.RequestMsg(m, 2*time.Second); err == nil {
				t.Fatal("a worker answered a forged notice")
			}
			continue
		}
		if err := e.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	evs := e.collect("forged-n", 20*time.Second)
	if last := checkWellFormed(t, evs); last.Type != events.TypeRunCompleted {
		t.Fatalf("run ended %s after forged notices", last.Type)
	}
	if st := e.state("forged-n"); st.Cancel != nil {
		t.Fatalf("a forged notice was recorded: %+v", st.Cancel)
	}
	if n := e.emu.Stats().CancelsReceived; n != 0 {
		t.Fatalf("Foundry got %d cancels", n)
	}
}
