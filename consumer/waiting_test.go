package consumer_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

// A waiting run's record is not written again until it is answered, so a
// worker started after the one that paused it never hears its deadlines
// written: it reads the records at start. input_timeout_seconds and
// timeout_seconds both end such runs, from a worker started after the
// pause.
func TestWaitingDeadlinesAfterARestart(t *testing.T) {
	e := setup(t)
	first := e.startWorker(consumer.Config{WorkerID: "first"})
	quiet := askingRequest("ask-restart-input")
	quiet.InputTimeoutSeconds = 3
	timed := askingRequest("ask-restart-timeout")
	timed.TimeoutSeconds = 4
	e.submit(quiet)
	e.submit(timed)
	e.waitEvent(quiet.RunID, events.TypeInputRequired, 20*time.Second)
	e.waitEvent(timed.RunID, events.TypeInputRequired, 20*time.Second)
	first.shutdown(t)
	for _, id := range []string{quiet.RunID, timed.RunID} {
		if st := e.state(id); st.Status != events.StatusWaiting {
			t.Fatalf("%s is %s once the first worker stopped: it ended the run itself (a slow machine?), the test shows nothing", id, st.Status)
		}
	}
	e.startWorker(consumer.Config{WorkerID: "second"})

	end := checkWellFormed(t, e.collect(quiet.RunID, 30*time.Second))
	if end.Type != events.TypeRunFailed || end.Error == nil || end.Error.Code != events.CodeInputTimeout {
		t.Fatalf("%s ended %+v, want run.failed input_timeout", quiet.RunID, end)
	}
	end = checkWellFormed(t, e.collect(timed.RunID, 30*time.Second))
	if end.Type != events.TypeRunCancelled || end.Reason != events.ReasonTimeout || end.UpstreamStatus != "completed" {
		t.Fatalf("%s ended %+v, want run.cancelled timeout", timed.RunID, end)
	}
	for _, id := range []string{quiet.RunID, timed.RunID} {
		if n := len(e.emu.Records(id)); n != 1 {
			t.Fatalf("%s: %d upstream responses, want 1", id, n)
		}
	}
}

// A worker cut off from NATS while a run paused hears nothing of it: once
// it is back, it reads the records again and enforces the run's input
// deadline, the worker that paused it having stopped meanwhile.
func TestWaitingDeadlinesAfterAReconnect(t *testing.T) {
	e := setup(t, withNATS(natsembed.Config{}))
	cut := &dropper{}
	cutOff, err := e.stack.StartWorker(consumer.Config{WorkerID: "cut-off"}, nats.SetCustomDialer(cut))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the worker to be ready", func() bool { return cutOff.Ready(testCtx(t)) == nil })
	cut.set(true)
	testkit.Eventually(t, 10*time.Second, "the worker to be cut off", func() bool {
		return !cutOff.Jobs.IsConnected() && !cutOff.Events.IsConnected()
	})

	pauser := e.startWorker(consumer.Config{WorkerID: "pauser"})
	req := askingRequest("ask-reconnect")
	req.InputTimeoutSeconds = 3
	e.submit(req)
	e.waitEvent(req.RunID, events.TypeInputRequired, 20*time.Second)
	pauser.shutdown(t)
	if st := e.state(req.RunID); st.Status != events.StatusWaiting {
		t.Fatalf("%s is %s once the worker that paused it stopped (a slow machine?): the test shows nothing", req.RunID, st.Status)
	}
	cut.set(false)

	end := checkWellFormed(t, e.collect(req.RunID, 30*time.Second))
	if end.Type != events.TypeRunFailed || end.Error == nil || end.Error.Code != events.CodeInputTimeout {
		t.Fatalf("%s ended %+v, want run.failed input_timeout", req.RunID, end)
	}
}

// A waiting run whose deadline passed is ended by a worker that records
// the end, then stores the terminal event: when the event is refused after
// the record was written, it is stored once the stream takes it again.
// On main before this change it was never stored (the record says the run
// ended, so nothing tried again): a client following the run waited for
// ever. enderStops: the worker that ended the run shuts down (a rolling
// restart) before the stream takes events again, and another takes over;
// until the next change only the ender's own retry would have stored the
// event, so it was lost the same way.
func TestWaitingRunsEndStoredOnceTheStreamTakesIt(t *testing.T) {
	t.Parallel()
	for _, enderStops := range []bool{false, true} {
		t.Run(fmt.Sprintf("enderStops=%v", enderStops), func(t *testing.T) {
			t.Parallel()
			waitingEndStoredOnceTheStreamTakesIt(t, enderStops)
		})
	}
}

func waitingEndStoredOnceTheStreamTakesIt(t *testing.T, enderStops bool) {
	e := setup(t)
	reg := prometheus.NewRegistry()
	lg := zerolog.New(zerolog.NewTestWriter(t))
	ender := e.startWorker(consumer.Config{WorkerID: "ender", Registerer: reg, Logger: &lg})
	req := askingRequest("ask-end-refused")
	req.InputTimeoutSeconds = 3
	e.submit(req)
	e.waitEvent(req.RunID, events.TypeInputRequired, 20*time.Second)
	ctx := testCtx(t)
	stream, err := e.js.Stream(ctx, e.client.Names().EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(e.client.Names().EventSubject(req.RunID)))
	if err != nil {
		t.Fatal(err)
	}
	// The run's subject takes no more events, the state bucket still does.
	open := info.Config
	full := open
	full.MaxMsgsPerSubject = int64(info.State.Subjects[e.client.Names().EventSubject(req.RunID)])
	full.Discard, full.DiscardNewPerSubject = jetstream.DiscardNew, true
	if _, err := e.js.UpdateStream(ctx, full); err != nil {
		t.Fatal(err)
	}
	// Counted once the worker gave up storing the event (10s).
	testkit.Eventually(t, 60*time.Second, "the run's end to be recorded and counted", func() bool {
		v, _ := metricValue(t, reg, "foundryq_runs_finished_total", "type", string(events.TypeRunFailed))
		return v == 1
	})
	if st := e.state(req.RunID); !st.Finished() {
		t.Fatalf("record %+v: want the run's end recorded", st)
	}
	if enderStops {
		ender.shutdown(t)
		ctx = testCtx(t)
	}
	if _, err := e.js.UpdateStream(ctx, open); err != nil {
		t.Fatal(err)
	}
	if enderStops {
		e.startWorker(consumer.Config{WorkerID: "next", Logger: &lg})
	}
	end := checkWellFormed(t, e.collect(req.RunID, 90*time.Second))
	if end.Type != events.TypeRunFailed || end.Error == nil || end.Error.Code != events.CodeInputTimeout {
		t.Fatalf("%s ended %+v, want run.failed input_timeout", req.RunID, end)
	}
}

// A cancel during a later step stops that step's response server-side
// (Foundry's record says cancelled), and run.cancelled carries the usage
// of both steps, the cancelled one's as Foundry billed it.
func TestCancelDuringALaterStepsStream(t *testing.T) {
	e := setup(t)
	e.startWorker(consumer.Config{})
	req := request("ask-cancel-step", map[string]string{foundrytest.KeyToolMS: "10", foundrytest.KeyTokens: "100000", foundrytest.KeyTokenMS: "20"})
	req.Tools = []json.RawMessage{json.RawMessage(askingTool)}
	e.submit(req)
	asked := e.waitEvent(req.RunID, events.TypeInputRequired, 20*time.Second)
	if r, err := e.client.Approve(testCtx(t), req.RunID, asked.Items[0].ID, true, ""); err != nil || r.Result != events.InputAccepted {
		t.Fatalf("approve: %+v %v", r, err)
	}
	e.waitEvent(req.RunID, events.TypeTextDelta, 30*time.Second) // step 2 streams (step 1 stopped at the approval)
	if reply := e.cancel(req.RunID); reply.Result != events.CancelCancelling {
		t.Fatalf("cancel: %+v", reply)
	}
	evs := e.collect(req.RunID, 30*time.Second)
	end := checkWellFormed(t, evs)
	recs := e.emu.Records(req.RunID)
	if len(recs) != 2 {
		t.Fatalf("%d upstream responses, want one per step (2)", len(recs))
	}
	if recs[1].Status != "cancelled" || recs[1].CancelledAt.IsZero() || recs[0].Status != "completed" {
		t.Fatalf("upstream: step 1 %s, step 2 %s (cancelled at %v); want completed, then cancelled by the cancel call",
			recs[0].Status, recs[1].Status, recs[1].CancelledAt)
	}
	if end.Type != events.TypeRunCancelled || end.ResponseID != recs[1].ID || end.UpstreamStatus != "cancelled" {
		t.Fatalf("end %+v, want run.cancelled naming step 2's response %s", end, recs[1].ID)
	}
	st := e.state(req.RunID)
	if len(st.Steps) != 1 || st.Steps[0].Usage == nil {
		t.Fatalf("steps on record: %+v", st.Steps)
	}
	first := *st.Steps[0].Usage
	second, err := e.up.Get(testCtx(t), recs[1].ID)
	if err != nil || second.Usage == nil {
		t.Fatalf("step 2's response: %+v, %v", second, err)
	}
	want := events.Usage{InputTokens: first.InputTokens + second.Usage.InputTokens, OutputTokens: first.OutputTokens + second.Usage.OutputTokens,
		TotalTokens: first.TotalTokens + second.Usage.TotalTokens}
	if end.Usage == nil || *end.Usage != want || first.InputTokens == 0 || second.Usage.OutputTokens != int64(recs[1].Tokens) {
		t.Fatalf("usage %+v, want both steps' %+v (step 1 %+v, step 2 as Foundry billed it %+v)", end.Usage, want, first, *second.Usage)
	}
	if text(evs) == "" || !strings.HasPrefix(recs[1].Text, text(evs)) {
		t.Fatalf("text %q is not the start of step 2's %q", text(evs), recs[1].Text)
	}
}

// An owner killed between the answer and its next step's create (it took
// the step's job and claimed the step, then died before the create was
// marked: here it waits for its create gate, closed by a 429 to another
// run): the next owner creates the step, exactly once, and the run
// completes.
func TestOwnerKilledBetweenTheAnswerAndTheNextCreate(t *testing.T) {
	e := setup(t, withProvision(consumer.ProvisionConfig{AckWait: 2 * time.Second}))
	const decoy = "ask-gate-decoy"
	refused := make(chan struct{})
	var refuseOnce sync.Once
	target, err := url.Parse(e.emu.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/responses") {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			var create struct {
				Metadata map[string]string `json:"metadata"`
			}
			if json.Unmarshal(body, &create) == nil && create.Metadata["run_id"] == decoy {
				// The worker's create gate for the model stays closed for a minute.
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Retry-After", "60")
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = w.Write([]byte(`{"error":{"message":"Rate limit is exceeded.","type":"rate_limit_exceeded","code":"rate_limit_exceeded"}}`))
				refuseOnce.Do(func() { close(refused) })
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	up, err := foundry.New(foundry.Config{BaseURL: front.URL + target.Path, APIKey: "test-key"})
	if err != nil {
		t.Fatal(err)
	}
	direct := e.up
	e.up = up
	first := e.startWorker(consumer.Config{WorkerID: "first"})
	req := askingRequest("ask-gated")
	e.submit(req)
	asked := e.waitEvent(req.RunID, events.TypeInputRequired, 20*time.Second)
	e.submit(request(decoy, map[string]string{foundrytest.KeyTokens: "2"}))
	select {
	case <-refused:
	case <-time.After(20 * time.Second):
		t.Fatal("the decoy's create never came")
	}
	// The gate closes as the create returns, before the decoy is given
	// back for later (no owner; not a failed attempt).
	testkit.Eventually(t, 20*time.Second, "the decoy to be put off", func() bool {
		st := e.state(decoy)
		return st.Owner == "" && st.CreateStartedAt == nil && st.Failures == 0
	})
	if r, err := e.client.Approve(testCtx(t), req.RunID, asked.Items[0].ID, true, ""); err != nil || r.Result != events.InputAccepted {
		t.Fatalf("approve: %+v %v", r, err)
	}
	testkit.Eventually(t, 20*time.Second, "the first worker to claim step 2", func() bool {
		st := e.state(req.RunID)
		return st.Status == events.StatusRunning && st.Step == 2 && st.Owner == "first"
	})
	if st := e.state(req.RunID); st.CreateStartedAt != nil || st.ResponseID != "" || len(e.emu.CreateRequests(req.RunID)) != 1 {
		t.Fatalf("step 2 reached its create before the kill: %+v, %d creates", st, len(e.emu.CreateRequests(req.RunID)))
	}
	first.crash()
	e.up = direct
	e.startWorker(consumer.Config{WorkerID: "second"})

	evs := e.collect(req.RunID, 60*time.Second)
	if end := checkWellFormed(t, evs); end.Type != events.TypeRunCompleted {
		t.Fatalf("ended %+v: %v", end, types(evs))
	}
	creates := e.emu.CreateRequests(req.RunID)
	recs := e.emu.Records(req.RunID)
	if len(creates) != 2 || len(recs) != 2 || recs[1].PreviousResponseID != recs[0].ID {
		t.Fatalf("%d creates, %d responses (want one per step, 2, the second continuing the first): %+v", len(creates), len(recs), recs)
	}
	if got, want := text(evs), recs[1].Text; got != want {
		t.Fatalf("text %q, want the second step's %q", got, want)
	}
	st := e.state(req.RunID)
	if len(st.Steps) != 1 || st.Steps[0].ResponseID != recs[0].ID || st.ResponseID != recs[1].ID || st.Step != 2 {
		t.Fatalf("state %+v", st)
	}
}

// Raw answers on foundryq.input.<run_id> that are not JSON, cut short, or
// larger than an answer may be get the documented invalid reply, and
// nothing is stored on FOUNDRYQ_INPUTS: the item is still open after them.
func TestMalformedAndOversizedAnswersAreRefused(t *testing.T) {
	e := setup(t)
	e.startWorker(consumer.Config{})
	req := request("ask-raw", map[string]string{foundrytest.KeyToolMS: "5", foundrytest.KeyTokens: "2"})
	req.Tools = []json.RawMessage{json.RawMessage(`{"type":"function","name":"get_weather"}`)}
	e.submit(req)
	asked := e.waitEvent(req.RunID, events.TypeInputRequired, 20*time.Second)
	call := asked.Items[0].ID
	inputs, err := e.js.Stream(testCtx(t), "FOUNDRYQ_INPUTS")
	if err != nil {
		t.Fatal(err)
	}
	before, err := inputs.Info(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	big := `{"id":"` + call + `","output":"` + strings.Repeat("x", events.MaxInputOutputLen+8<<10) + `"}`
	for name, body := range map[string]string{
		"not JSON":          `approve it please`,
		"cut short":         `{"id":"` + call + `","output":"{\"temp\":`,
		"two objects":       `{"id":"` + call + `","output":"a"}{"id":"` + call + `","output":"b"}`,
		"oversized":         big,
		"output over limit": `{"id":"` + call + `","output":"` + strings.Repeat("x", events.MaxInputOutputLen+1) + `"}`,
	} {
		msg, err := e.nc.Request("foundryq.input."+req.RunID, []byte(body), 20*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var reply events.InputReply
		if err := json.Unmarshal(msg.Data, &reply); err != nil || reply.Result != events.InputInvalid || reply.Error == "" {
			t.Fatalf("%s: reply %s, want result invalid with an error", name, msg.Data)
		}
	}
	after, err := inputs.Info(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if after.State.LastSeq != before.State.LastSeq || after.State.Msgs != before.State.Msgs {
		t.Fatalf("FOUNDRYQ_INPUTS went from %d messages (last %d) to %d (last %d)", before.State.Msgs, before.State.LastSeq,
			after.State.Msgs, after.State.LastSeq)
	}
	if st := e.state(req.RunID); st.Status != events.StatusWaiting {
		t.Fatalf("the run is %s after refused answers", st.Status)
	}
	if r, err := e.client.SendOutput(testCtx(t), req.RunID, call, `{"temp":21}`); err != nil || r.Result != events.InputAccepted {
		t.Fatalf("a sound answer after them: %+v %v", r, err)
	}
	if end := checkWellFormed(t, e.collect(req.RunID, 30*time.Second)); end.Type != events.TypeRunCompleted {
		t.Fatalf("ended %+v", end)
	}
}

// A full inputs stream (its byte or its message limit) refuses an answer:
// the caller is told so at once (store_full, with JetStream's words),
// nothing changes, and the same item answered once there is room is
// accepted.
func TestFullInputsStreamRefusesAnswers(t *testing.T) {
	for _, c := range []struct {
		name  string
		prov  consumer.ProvisionConfig
		words string
	}{
		// The run's kept request and the first answer fit, a 32 KiB
		// output does not; a small one does.
		{"bytes", consumer.ProvisionConfig{InputsMaxBytes: 16 << 10}, "maximum bytes exceeded"},
		// The run's kept request and the first answer, no more.
		{"messages", consumer.ProvisionConfig{InputsMaxMsgs: 2}, "maximum messages exceeded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := setup(t, withProvision(c.prov))
			e.startWorker(consumer.Config{})
			req := request("ask-full", map[string]string{foundrytest.KeyToolMS: "5", foundrytest.KeyTokens: "2", foundrytest.KeyFunctionCalls: "2"})
			req.Tools = []json.RawMessage{json.RawMessage(`{"type":"function","name":"get_weather"}`)}
			e.submit(req)
			asked := e.waitEvent(req.RunID, events.TypeInputRequired, 20*time.Second)
			if len(asked.Items) != 2 {
				t.Fatalf("asked %+v", asked.Items)
			}
			if r, err := e.client.SendOutput(testCtx(t), req.RunID, asked.Items[0].ID, `{"temp":21}`); err != nil || r.Result != events.InputAccepted {
				t.Fatalf("first output: %+v %v", r, err)
			}
			big, _ := json.Marshal(events.InputAnswer{ID: asked.Items[1].ID, Output: ptr(strings.Repeat("x", 32<<10))})
			msg, err := e.nc.Request("foundryq.input."+req.RunID, big, 10*time.Second)
			if err != nil {
				t.Fatalf("an answer past the inputs stream's limit got no reply: %v", err)
			}
			var reply events.InputReply
			if err := json.Unmarshal(msg.Data, &reply); err != nil || reply.Result != events.InputStoreFull || !strings.Contains(reply.Error, c.words) {
				t.Fatalf("reply %s, want store_full naming the stream's limit (%s)", msg.Data, c.words)
			}
			r, err := e.client.SendOutput(testCtx(t), req.RunID, asked.Items[1].ID, strings.Repeat("y", 32<<10))
			if !errors.Is(err, events.ErrInputsFull) || r.Result != events.InputStoreFull || !strings.Contains(err.Error(), "FOUNDRYQ_INPUTS is full") {
				t.Fatalf("Client.SendOutput past the limit: %+v, %v; want ErrInputsFull", r, err)
			}
			if st := e.state(req.RunID); st.Status != events.StatusWaiting {
				t.Fatalf("the run is %s after a refused answer", st.Status)
			}
			if c.prov.InputsMaxMsgs > 0 {
				return // no room for another answer
			}
			if r, err := e.client.SendOutput(testCtx(t), req.RunID, asked.Items[1].ID, `{"temp":22}`); err != nil || r.Result != events.InputAccepted {
				t.Fatalf("the same item answered within the limit: %+v %v", r, err)
			}
			if end := checkWellFormed(t, e.collect(req.RunID, 30*time.Second)); end.Type != events.TypeRunCompleted {
				t.Fatalf("ended %+v", end)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
