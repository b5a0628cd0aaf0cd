package consumer_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/testkit"
)

// publishBody publishes body on the run subject of runID with headers kv.
func (e *env) publishBody(runID, body string, kv ...string) {
	e.t.Helper()
	m := nats.NewMsg("foundryq.runs." + runID)
	m.Data = []byte(body)
	for i := 0; i < len(kv); i += 2 {
		m.Header.Set(kv[i], kv[i+1])
	}
	if _, err := e.js.PublishMsg(testCtx(e.t), m); err != nil {
		e.t.Fatal(err)
	}
}

// The worker records each run's effective fairness key and priority, from
// the body, the headers or the defaults.
func TestFairnessIsRecorded(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "fair"})

	withBoth := request("fair-client", nil)
	withBoth.FairnessKey, withBoth.Priority = "team-a", events.PriorityHigh
	e.submit(withBoth) // as headers
	e.submit(request("fair-plain", nil))
	e.publishBody("fair-raw", `{"run_id":"fair-raw","model":"gpt-test","input":"hi","priority":"low"}`, events.HeaderFairnessKey, "team-b")
	e.publishBody("fair-same", `{"run_id":"fair-same","model":"gpt-test","input":"hi","fairness_key":"team-c"}`, events.HeaderFairnessKey, "team-c")

	for id, want := range map[string][2]string{
		"fair-client": {"team-a", "high"},
		"fair-plain":  {events.DefaultFairnessKey, "normal"},
		"fair-raw":    {"team-b", "low"},
		"fair-same":   {"team-c", "normal"},
	} {
		if last := checkWellFormed(t, e.collect(id, 30*time.Second)); last.Type != events.TypeRunCompleted {
			t.Fatalf("%s ended %+v", id, last)
		}
		if st := e.state(id); st.FairnessKey != want[0] || string(st.Priority) != want[1] {
			t.Errorf("%s: recorded fairness key %q priority %q, want %q %q", id, st.FairnessKey, st.Priority, want[0], want[1])
		}
	}
}

// A body and a header that disagree, or a bad header, make the request
// invalid: it fails invalid_request and is dead-lettered, as any invalid
// request is, without reaching Foundry.
func TestBadFairnessIsInvalid(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "unfair"})
	for _, tc := range []struct {
		id, body, header, value, want string
	}{
		{"fair-conflict", `{"run_id":"fair-conflict","model":"m","input":"hi","fairness_key":"team-a"}`, events.HeaderFairnessKey, "team-b",
			`fairness_key: "team-a" in the body but "team-b" in header Foundryq-Fairness-Key`},
		{"fair-bad-header", `{"run_id":"fair-bad-header","model":"m","input":"hi"}`, events.HeaderPriority, "urgent",
			`header Foundryq-Priority: "urgent" is not one of`},
		{"fair-bad-body", `{"run_id":"fair-bad-body","model":"m","input":"hi","fairness_key":"a.b"}`, "", "",
			`fairness_key: "a.b" must match`},
	} {
		if tc.header == "" {
			e.publishBody(tc.id, tc.body)
		} else {
			e.publishBody(tc.id, tc.body, tc.header, tc.value)
		}
		last := checkWellFormed(t, e.collect(tc.id, 30*time.Second))
		if last.Type != events.TypeRunFailed || last.Error == nil || last.Error.Code != events.CodeInvalidRequest ||
			!strings.Contains(last.Error.Message, tc.want) {
			t.Fatalf("%s ended %+v, want run.failed invalid_request with %q", tc.id, last.Error, tc.want)
		}
		if code := e.deadLetter(tc.id).Header.Get(events.HeaderDeadCode); code != events.CodeInvalidRequest {
			t.Fatalf("%s: dead letter code %q", tc.id, code)
		}
	}
	if n := e.emu.Stats().ResponsesCreated; n != 0 {
		t.Fatalf("emulator saw %d creates, want none", n)
	}
}

// A request whose only fault is a field this worker does not know (a newer
// version's, during a rolling upgrade) is handed back, not failed: it is
// not claimed, not dead-lettered, and stays in the queue for a worker that
// knows the field.
func TestNewerFieldIsHandedBack(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := e.startWorker(consumer.Config{WorkerID: "old", NewerFieldsGrace: time.Hour, NewerFieldsRetry: 50 * time.Millisecond})
	const body = `{"run_id":"newer-1","model":"m","input":"hi","speed":"fast"}`
	e.publishBody("newer-1", body)

	ctx := testCtx(t)
	testkit.Eventually(t, 20*time.Second, "the job to be handed back three times", func() bool {
		// Handed back to its lane (docs/scheduling.md).
		jobs, err := e.js.Consumer(ctx, "FOUNDRYQ_QUEUE", "foundryq-lane-normal-default")
		if err != nil {
			return false
		}
		info, err := jobs.Info(ctx)
		return err == nil && info.NumRedelivered >= 1 && info.Delivered.Consumer >= 3
	})
	if _, _, err := e.client.State(ctx, "newer-1"); !errors.Is(err, events.ErrStateNotFound) {
		t.Fatalf("the handed-back run has a state record (err %v): it was claimed", err)
	}
	if dead, err := e.js.Stream(ctx, "FOUNDRYQ_DEAD"); err != nil {
		t.Fatal(err)
	} else if _, err := dead.GetLastMsgForSubject(ctx, "foundryq.dead.newer-1"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the request was dead-lettered (err %v)", err)
	}

	// A newer worker (here: the test) still gets the request, whole.
	w.shutdown(t)
	jobs, err := e.js.Consumer(ctx, "FOUNDRYQ_QUEUE", "foundryq-lane-normal-default")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := jobs.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatalf("the handed-back job is no longer in the queue: %v", err)
	}
	if msg.Subject() != "foundryq.queue.normal.default.newer-1" || string(msg.Data()) != body {
		t.Fatalf("job %s %s", msg.Subject(), msg.Data())
	}
	if err := msg.Ack(); err != nil {
		t.Fatal(err)
	}
}

// Past NewerFieldsGrace no newer worker is coming: the request fails
// invalid_request, with a message that names the field and the grace, and
// is dead-lettered.
func TestNewerFieldFailsAfterTheGrace(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "old", NewerFieldsGrace: time.Second, NewerFieldsRetry: 100 * time.Millisecond})
	start := time.Now()
	e.publishBody("newer-2", `{"run_id":"newer-2","model":"m","input":"hi","speed":"fast"}`)
	last := checkWellFormed(t, e.collect("newer-2", 30*time.Second))
	if last.Type != events.TypeRunFailed || last.Error == nil || last.Error.Code != events.CodeInvalidRequest ||
		!strings.Contains(last.Error.Message, `unknown field "speed"`) || !strings.Contains(last.Error.Message, "within 1s of its submit") {
		t.Fatalf("run ended %+v", last.Error)
	}
	if took := time.Since(start); took < time.Second {
		t.Fatalf("failed after %s, before the grace", took)
	}
	if code := e.deadLetter("newer-2").Header.Get(events.HeaderDeadCode); code != events.CodeInvalidRequest {
		t.Fatalf("dead letter code %q", code)
	}
}

// With a negative grace such a request fails at once, as before.
func TestNewerFieldWithoutGrace(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "strict", NewerFieldsGrace: -1})
	e.publishBody("newer-3", `{"run_id":"newer-3","model":"m","input":"hi","speed":"fast"}`)
	last := checkWellFormed(t, e.collect("newer-3", 30*time.Second))
	if last.Type != events.TypeRunFailed || last.Error == nil || last.Error.Code != events.CodeInvalidRequest ||
		strings.Contains(last.Error.Message, "within") {
		t.Fatalf("run ended %+v", last.Error)
	}
}
