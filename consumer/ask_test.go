package consumer_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/testkit"
)

const askingTool = `{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp","allowed_tools":["lookup"]}`

// askingRequest is a run whose response stops on an approval request (an
// MCP tool with require_approval left at its default, "always").
func askingRequest(runID string) events.RunRequest {
	req := request(runID, map[string]string{foundrytest.KeyToolMS: "20", foundrytest.KeyTokens: "4"})
	req.Tools = []json.RawMessage{json.RawMessage(askingTool)}
	return req
}

// A run that asks for approval waits for it, holding no job; once
// approved, its next step runs the call and the run completes, one run id
// and one event subject for both responses.
func TestApprovedRunCompletes(t *testing.T) {
	e := setup(t)
	e.startWorker(consumer.Config{})
	e.submit(askingRequest("ask-1"))
	asked := e.waitEvent("ask-1", events.TypeInputRequired, 20*time.Second)
	if len(asked.Items) != 1 || asked.Items[0].Kind != events.InputApproval || asked.Items[0].Name != "lookup" ||
		asked.Items[0].ServerLabel != "crm" || asked.Items[0].ID == "" {
		t.Fatalf("input.required: %+v", asked)
	}
	e.waitRunsEmpty() // a waiting run holds no job
	st, _, err := e.client.State(testCtx(t), "ask-1")
	if err != nil || st.Status != events.StatusWaiting || len(st.Asked) != 1 || len(st.Steps) != 1 || st.Owner != "" {
		t.Fatalf("state of a waiting run: %+v, %v", st, err)
	}

	reply, err := e.client.Approve(testCtx(t), "ask-1", asked.Items[0].ID, true, "looked it up myself")
	if err != nil || reply.Result != events.InputAccepted {
		t.Fatalf("approve: %+v, %v", reply, err)
	}
	evs := e.collect("ask-1", 30*time.Second)
	end := checkWellFormed(t, evs)
	if end.Type != events.TypeRunCompleted || text(evs) == "" {
		t.Fatalf("run ended %s with text %q: %v", end.Type, text(evs), types(evs))
	}
	want := []events.EventType{events.TypeRunStarted, events.TypeInputRequired, events.TypeInputReceived, events.TypeStepStarted,
		events.TypeToolStarted, events.TypeToolCompleted}
	var got []events.EventType
	for _, typ := range types(evs) {
		if typ != events.TypeTextDelta && typ != events.TypeRunCompleted {
			got = append(got, typ)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v then text and run.completed", types(evs), want)
	}
	recs := e.emu.Records("ask-1")
	if len(recs) != 2 {
		t.Fatalf("%d upstream responses, want one per step (2)", len(recs))
	}
	if e.emu.Stats().ToolCallsStarted != 1 {
		t.Fatalf("tool calls: %d", e.emu.Stats().ToolCallsStarted)
	}
	if end.Usage == nil || end.Usage.OutputTokens != int64(recs[0].Tokens+recs[1].Tokens) {
		t.Fatalf("usage %+v, want the sum of both steps (%d + %d output tokens)", end.Usage, recs[0].Tokens, recs[1].Tokens)
	}
	// Answers after the end change nothing.
	if reply, err := e.client.Approve(testCtx(t), "ask-1", asked.Items[0].ID, true, ""); err != nil || reply.Result != events.InputRunFinished {
		t.Fatalf("approve after the end: %+v, %v", reply, err)
	}
}

// A function call waits for its output; the first answer wins, a second
// one gets already_answered, an answer of the wrong kind or for an id not
// asked changes nothing.
func TestFunctionOutputContinuesTheRun(t *testing.T) {
	e := setup(t)
	e.startWorker(consumer.Config{})
	req := request("ask-fn", map[string]string{foundrytest.KeyToolMS: "10", foundrytest.KeyTokens: "3"})
	req.Tools = []json.RawMessage{json.RawMessage(`{"type":"function","name":"get_weather"}`)}
	e.submit(req)
	asked := e.waitEvent("ask-fn", events.TypeInputRequired, 20*time.Second)
	call := asked.Items[0]
	if call.Kind != events.InputFunctionCall || call.Name != "get_weather" || call.Arguments == "" {
		t.Fatalf("asked %+v", call)
	}
	ctx := testCtx(t)
	if _, err := e.client.Approve(ctx, "ask-fn", call.ID, true, ""); err == nil {
		t.Fatal("an approval for a function call was accepted")
	}
	if r, err := e.client.SendOutput(ctx, "ask-fn", "call_other", "x"); err != nil || r.Result != events.InputUnknownID {
		t.Fatalf("output for an id not asked: %+v %v", r, err)
	}
	if r, err := e.client.SendOutput(ctx, "ask-fn", call.ID, `{"temp":21}`); err != nil || r.Result != events.InputAccepted {
		t.Fatalf("output: %+v %v", r, err)
	}
	// already_answered, or run_finished if the run has ended meanwhile (a
	// record, once finished, stays so): never run_finished while it goes on.
	r, err := e.client.SendOutput(ctx, "ask-fn", call.ID, `{"temp":99}`)
	if err != nil || (r.Result != events.InputAlreadyAnswered && r.Result != events.InputRunFinished) {
		t.Fatalf("second output: %+v %v", r, err)
	}
	if st := e.state("ask-fn"); r.Result == events.InputRunFinished && !st.Finished() {
		t.Fatalf("second output: run_finished for a run that is %s", st.Status)
	}
	evs := e.collect("ask-fn", 30*time.Second)
	if end := checkWellFormed(t, evs); end.Type != events.TypeRunCompleted {
		t.Fatalf("ended %s", end.Type)
	}
	reqs := e.emu.CreateRequests("ask-fn")
	if len(reqs) != 2 || !json.Valid(reqs[1]) {
		t.Fatalf("%d creates", len(reqs))
	}
	var second struct {
		Previous string `json:"previous_response_id"`
		Input    []struct {
			Type, CallID, Output string
		} `json:"input"`
	}
	_ = json.Unmarshal(reqs[1], &second)
	if second.Previous != asked.ResponseID || len(second.Input) != 1 || second.Input[0].Output != `{"temp":21}` {
		t.Fatalf("second step's create: %s", reqs[1])
	}
}

// A cancel while the run waits ends it at once, with no upstream call (the
// last response has ended); answers after it get run_finished.
func TestCancelWhileWaiting(t *testing.T) {
	e := setup(t)
	e.startWorker(consumer.Config{})
	e.submit(askingRequest("ask-cancel"))
	asked := e.waitEvent("ask-cancel", events.TypeInputRequired, 20*time.Second)
	reply, err := e.client.Cancel(testCtx(t), "ask-cancel", "changed my mind")
	if err != nil || reply.Result != events.CancelCancelled {
		t.Fatalf("cancel: %+v %v", reply, err)
	}
	evs := e.collect("ask-cancel", 20*time.Second)
	end := checkWellFormed(t, evs)
	if end.Type != events.TypeRunCancelled || end.UpstreamStatus != "completed" || end.Usage == nil || end.Usage.InputTokens == 0 {
		t.Fatalf("end %+v", end)
	}
	if r, err := e.client.Approve(testCtx(t), "ask-cancel", asked.Items[0].ID, true, ""); err != nil || r.Result != events.InputRunFinished {
		t.Fatalf("approve after cancel: %+v %v", r, err)
	}
	if n := len(e.emu.Records("ask-cancel")); n != 1 {
		t.Fatalf("%d upstream responses after a cancel while waiting", n)
	}
}

// input_timeout_seconds ends a run that waits too long.
func TestInputTimeout(t *testing.T) {
	e := setup(t)
	e.startWorker(consumer.Config{})
	req := askingRequest("ask-timeout")
	req.InputTimeoutSeconds = 1
	e.submit(req)
	evs := e.collect("ask-timeout", 30*time.Second)
	end := checkWellFormed(t, evs)
	if end.Type != events.TypeRunFailed || end.Error == nil || end.Error.Code != events.CodeInputTimeout ||
		end.Error.Retryable == nil || *end.Error.Retryable {
		t.Fatalf("end %+v", end)
	}
	testkit.Eventually(t, 10*time.Second, "the run's record to say failed", func() bool {
		st, _, err := e.client.State(testCtx(t), "ask-timeout")
		return err == nil && st.Status == events.StatusFailed
	})
	// Nothing was denied or answered on the caller's behalf: no next step.
	if n := len(e.emu.CreateRequests("ask-timeout")); n != 1 {
		t.Fatalf("%d upstream creates, want the first step's only", n)
	}
}

// An owner killed during a later step: the next worker re-attaches to that
// step's response, never creating it again (one upstream response per
// step), and the run completes with every event once.
func TestOwnerKilledDuringALaterStep(t *testing.T) {
	e := setup(t)
	first := e.startWorker(consumer.Config{WorkerID: "first", Provision: consumer.ProvisionConfig{AckWait: 2 * time.Second}})
	req := request("ask-kill", map[string]string{foundrytest.KeyToolMS: "10", foundrytest.KeyTokens: "150", foundrytest.KeyTokenMS: "20"})
	req.Tools = []json.RawMessage{json.RawMessage(askingTool)}
	e.submit(req)
	asked := e.waitEvent("ask-kill", events.TypeInputRequired, 20*time.Second)
	if r, err := e.client.Approve(testCtx(t), "ask-kill", asked.Items[0].ID, true, ""); err != nil || r.Result != events.InputAccepted {
		t.Fatalf("approve: %+v %v", r, err)
	}
	e.waitEvent("ask-kill", events.TypeStepStarted, 20*time.Second)
	first.crash()
	e.startWorker(consumer.Config{WorkerID: "second"})
	evs := e.collect("ask-kill", 60*time.Second)
	end := checkWellFormed(t, evs)
	if end.Type != events.TypeRunCompleted {
		t.Fatalf("ended %s: %v", end.Type, types(evs))
	}
	recs := e.emu.Records("ask-kill")
	if len(recs) != 2 {
		t.Fatalf("%d upstream responses, want 2 (one per step)", len(recs))
	}
	if got, want := text(evs), recs[1].Text; got != want {
		t.Fatalf("text %q, want the second step's %q", got, want)
	}
	st, _, err := e.client.State(testCtx(t), "ask-kill")
	if err != nil || len(st.Steps) != 1 || st.Steps[0].ResponseID != recs[0].ID || st.ResponseID != recs[1].ID || st.Step != 2 {
		t.Fatalf("state %+v, %v", st, err)
	}
}

// The worker's default timeout does not count time spent waiting for a
// person; timeout_seconds does, and ends a run that waits past it.
func TestDeadlinesWhileWaiting(t *testing.T) {
	e := setup(t)
	e.startWorker(consumer.Config{DefaultTimeout: 3 * time.Second})
	e.submit(askingRequest("ask-default"))
	timed := askingRequest("ask-timed")
	timed.TimeoutSeconds = 2
	e.submit(timed)
	asked := e.waitEvent("ask-default", events.TypeInputRequired, 20*time.Second)
	st, _, err := e.client.State(testCtx(t), "ask-default")
	if err != nil || st.Deadline != nil || st.DeadlineLeftMS <= 0 {
		t.Fatalf("a waiting run's default deadline: %+v %v", st, err)
	}
	// Past the default deadline, counted from the start.
	testkit.Eventually(t, 10*time.Second, "the default timeout to pass", func() bool { return time.Since(*st.StartedAt) > 4*time.Second })
	if r, err := e.client.Approve(testCtx(t), "ask-default", asked.Items[0].ID, true, ""); err != nil || r.Result != events.InputAccepted {
		t.Fatalf("approve: %+v %v", r, err)
	}
	if end := checkWellFormed(t, e.collect("ask-default", 30*time.Second)); end.Type != events.TypeRunCompleted {
		t.Fatalf("a run that waited past the default timeout ended %s %+v", end.Type, end)
	}
	end := checkWellFormed(t, e.collect("ask-timed", 30*time.Second))
	if end.Type != events.TypeRunCancelled || end.Reason != events.ReasonTimeout || end.UpstreamStatus != "completed" {
		t.Fatalf("a run that waited past timeout_seconds ended %+v", end)
	}
}

// A cancel that reached a run's record just as it paused (a race between
// the cancel's answer and the pause): the run's next job ends it
// cancelled with its last response's status and usage, not "never reached
// Foundry", and no step is created.
func TestCancelOnRecordOfAWaitingRun(t *testing.T) {
	e := setup(t)
	e.startWorker(consumer.Config{})
	e.submit(askingRequest("ask-race"))
	asked := e.waitEvent("ask-race", events.TypeInputRequired, 20*time.Second)
	kv, err := e.js.KeyValue(testCtx(t), "foundryq-runs")
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(testCtx(t), "ask-race")
	if err != nil {
		t.Fatal(err)
	}
	var st events.RunState
	if err := json.Unmarshal(entry.Value(), &st); err != nil || st.Status != events.StatusWaiting {
		t.Fatalf("state %+v %v", st, err)
	}
	st.Cancel = &events.CancelRecord{Reason: events.ReasonRequested, At: time.Now().UTC()}
	data, _ := json.Marshal(st)
	if _, err := kv.Update(testCtx(t), "ask-race", data, entry.Revision()); err != nil {
		t.Fatal(err)
	}
	if r, err := e.client.Approve(testCtx(t), "ask-race", asked.Items[0].ID, true, ""); err != nil || r.Result != events.InputAccepted {
		t.Fatalf("approve: %+v %v", r, err)
	}
	end := checkWellFormed(t, e.collect("ask-race", 30*time.Second))
	if end.Type != events.TypeRunCancelled || end.UpstreamStatus != "completed" || end.ResponseID != asked.ResponseID ||
		end.Usage == nil || end.Usage.InputTokens == 0 {
		t.Fatalf("end %+v", end)
	}
	if n := len(e.emu.Records("ask-race")); n != 1 {
		t.Fatalf("%d upstream responses", n)
	}
}

// Parallel function calls: the run waits for every output; the first ones
// do not start the next step, the last one does, with all of them.
func TestParallelFunctionCallsAreGathered(t *testing.T) {
	e := setup(t)
	e.startWorker(consumer.Config{})
	req := request("ask-par", map[string]string{foundrytest.KeyToolMS: "5", foundrytest.KeyTokens: "3", foundrytest.KeyFunctionCalls: "3"})
	req.Tools = []json.RawMessage{json.RawMessage(`{"type":"function","name":"get_weather"}`)}
	e.submit(req)
	asked := e.waitEvent("ask-par", events.TypeInputRequired, 20*time.Second)
	if len(asked.Items) != 3 {
		t.Fatalf("asked %+v", asked.Items)
	}
	for i, it := range asked.Items[:2] {
		if r, err := e.client.SendOutput(testCtx(t), "ask-par", it.ID, fmt.Sprintf(`{"n":%d}`, i)); err != nil || r.Result != events.InputAccepted {
			t.Fatalf("output %d: %+v %v", i, r, err)
		}
	}
	// Two of three answered: still waiting, one response upstream.
	st, _, err := e.client.State(testCtx(t), "ask-par")
	if err != nil || st.Status != events.StatusWaiting || len(e.emu.Records("ask-par")) != 1 {
		t.Fatalf("after two answers: %+v %v, %d responses", st.Status, err, len(e.emu.Records("ask-par")))
	}
	if r, err := e.client.SendOutput(testCtx(t), "ask-par", asked.Items[2].ID, `{"n":2}`); err != nil || r.Result != events.InputAccepted {
		t.Fatalf("last output: %+v %v", r, err)
	}
	evs := e.collect("ask-par", 30*time.Second)
	if end := checkWellFormed(t, evs); end.Type != events.TypeRunCompleted {
		t.Fatalf("ended %s", end.Type)
	}
	received := 0
	for _, ev := range evs {
		if ev.Type == events.TypeInputReceived {
			received++
		}
	}
	reqs := e.emu.CreateRequests("ask-par")
	var second struct {
		Input []struct {
			CallID string `json:"call_id"`
		} `json:"input"`
	}
	if err := json.Unmarshal(reqs[len(reqs)-1], &second); err != nil || len(reqs) != 2 || len(second.Input) != 3 || received != 3 {
		t.Fatalf("%d creates, the second with %d outputs; %d input.received", len(reqs), len(second.Input), received)
	}
}

// An owner killed during a later step's create (Foundry holds
// response.created back): the step may exist upstream with an id nobody
// saved, so no worker creates it again; the run ends upstream_lost, with
// one upstream response per step.
func TestOwnerKilledDuringALaterStepsCreate(t *testing.T) {
	e := setup(t)
	first := e.startWorker(consumer.Config{WorkerID: "first"})
	req := request("ask-lost", map[string]string{foundrytest.KeyToolMS: "5", foundrytest.KeyTokens: "3", foundrytest.KeyCreatedMS: "3000"})
	req.Tools = []json.RawMessage{json.RawMessage(askingTool)}
	e.submit(req)
	asked := e.waitEvent("ask-lost", events.TypeInputRequired, 30*time.Second)
	if r, err := e.client.Approve(testCtx(t), "ask-lost", asked.Items[0].ID, true, ""); err != nil || r.Result != events.InputAccepted {
		t.Fatalf("approve: %+v %v", r, err)
	}
	e.waitEvent("ask-lost", events.TypeInputReceived, 20*time.Second)
	testkit.Eventually(t, 20*time.Second, "the second step's create to be sent", func() bool { return len(e.emu.Records("ask-lost")) == 2 })
	first.crash()
	e.startWorker(consumer.Config{WorkerID: "second"})
	end := checkWellFormed(t, e.collect("ask-lost", 90*time.Second))
	if end.Type != events.TypeRunFailed || end.Error == nil || end.Error.Code != events.CodeUpstreamLost {
		t.Fatalf("ended %+v", end)
	}
	if n := len(e.emu.Records("ask-lost")); n != 2 {
		t.Fatalf("%d upstream responses, want 2 (the lost step is not created again)", n)
	}
}

// A cancel that meets a later step's create which Foundry then refuses
// (a 500: no response for that step) ends the run with what ran upstream:
// the last step's response and its final status, not an empty
// upstream_status, which would say the run never reached Foundry.
func TestCancelDuringALaterStepsRefusedCreate(t *testing.T) {
	e := setup(t)
	var hold atomic.Bool
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseCreates := func() { releaseOnce.Do(func() { close(release) }) }
	target, err := url.Parse(e.emu.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hold.Load() && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/responses") {
			select {
			case held <- struct{}{}:
			default:
			}
			select { // the create is held until the cancel is on record, then refused
			case <-release:
			case <-r.Context().Done():
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"error":{"message":"The server had an error while processing your request.","type":"server_error","code":"server_error"}}`))
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	t.Cleanup(releaseCreates) // runs first: front.Close waits for held handlers
	up, err := foundry.New(foundry.Config{BaseURL: front.URL + target.Path, APIKey: "test-key"})
	if err != nil {
		t.Fatal(err)
	}
	e.up = up
	e.startWorker(consumer.Config{WorkerID: "refused"})
	e.submit(askingRequest("ask-refused"))
	asked := e.waitEvent("ask-refused", events.TypeInputRequired, 20*time.Second)
	hold.Store(true)
	if r, err := e.client.Approve(testCtx(t), "ask-refused", asked.Items[0].ID, true, ""); err != nil || r.Result != events.InputAccepted {
		t.Fatalf("approve: %+v %v", r, err)
	}
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the second step's create never came")
	}
	if reply := e.cancel("ask-refused"); reply.Result != events.CancelCancelling {
		t.Fatalf("cancel: %+v", reply)
	}
	testkit.Eventually(t, 20*time.Second, "the cancel on record", func() bool {
		st := e.state("ask-refused")
		return st.Cancel != nil
	})
	releaseCreates()
	end := checkWellFormed(t, e.collect("ask-refused", 30*time.Second))
	recs := e.emu.Records("ask-refused")
	if len(recs) != 1 {
		t.Fatalf("%d upstream responses, want the first step's only", len(recs))
	}
	if end.Type != events.TypeRunCancelled || end.ResponseID != recs[0].ID || end.UpstreamStatus != recs[0].Status {
		t.Fatalf("ended %s with response %q, upstream_status %q; want run.cancelled naming the first step's response %s (%s)",
			end.Type, end.ResponseID, end.UpstreamStatus, recs[0].ID, recs[0].Status)
	}
}

// A run's next step is queued once (Nats-Msg-Id <run_id>.step.<n>: a second
// wake within the dedupe window is dropped). A worker that takes the wake
// and reads fewer answers than the waker saw (a replica that lags, a read
// that fails) must look again, not drop the wake: nothing would queue the
// step again, and the run would wait until its input deadline, or for ever
// without one. Here the wake arrives before the answer is stored, as the
// lagging read sees it, and the answer is stored once the worker has read
// the wake. On main before this change the worker acked it as
// "still waiting" and the answer's own wake was dropped as a duplicate: the
// run never went on.
func TestWakeReadBeforeItsAnswersIsNotLost(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var logs logBuffer
	lg := zerolog.New(&logs)
	e.startWorker(consumer.Config{Logger: &lg})
	const id = "ask-early-wake"
	e.submit(askingRequest(id))
	asked := e.waitEvent(id, events.TypeInputRequired, 20*time.Second)

	ctx := testCtx(t)
	names := e.client.Names()
	inputs, err := e.js.Stream(ctx, names.InputsStream())
	if err != nil {
		t.Fatal(err)
	}
	kept, err := inputs.GetLastMsgForSubject(ctx, names.ParkedRequestSubject(id))
	if err != nil {
		t.Fatal(err)
	}
	next := strconv.Itoa(e.state(id).Step + 1)
	wake := nats.NewMsg(names.RunSubject(id))
	wake.Data = kept.Data
	maps.Copy(wake.Header, kept.Header)
	wake.Header.Set("Foundryq-Step", next)
	wake.Header.Set(jetstream.MsgIDHeader, id+".step."+next)
	if _, err := e.js.PublishMsg(ctx, wake, jetstream.WithExpectStream(names.RunsStream())); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "the worker to take the wake", func() bool {
		for _, l := range logs.lines(t, id) {
			switch l["message"] {
			case "the run waits for answers; its job is done until they are in", "the run's answers are not all readable yet; its wake looks again":
				return true
			}
		}
		return false
	})

	if r, err := e.client.Approve(ctx, id, asked.Items[0].ID, true, ""); err != nil || r.Result != events.InputAccepted {
		t.Fatalf("approve: %+v %v", r, err)
	}
	evs, err := collectErr(e.client, id, 30*time.Second)
	if err != nil {
		t.Fatalf("%v; worker log:\n%s", err, logs.String())
	}
	if last := checkWellFormed(t, evs); last.Type != events.TypeRunCompleted {
		t.Fatalf("run ended %+v, want run.completed; worker log:\n%s", last, logs.String())
	}
}
