package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
)

func TestRunEndToEnd(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := e.startWorker(consumer.Config{WorkerID: "w1"})
	e.submit(request("e2e-1", map[string]string{"emu_tokens": "25"}))

	evs := e.collect("e2e-1", 20*time.Second)
	last := checkWellFormed(t, evs)
	if evs[0].Type != events.TypeRunStarted || evs[0].ResponseID == "" || evs[0].Attempt != 1 || evs[0].Worker != w.ID() {
		t.Fatalf("first event = %+v, want run.started with response id, attempt 1, worker w1", evs[0])
	}
	if last.Type != events.TypeRunCompleted || last.Status != "completed" || last.Usage == nil || last.Usage.OutputTokens != 25 {
		t.Fatalf("last event = %+v, want run.completed with usage of 25 output tokens", last)
	}
	if got, want := text(evs), e.emulatorText("e2e-1"); got != want || got == "" {
		t.Fatalf("relayed text %q, emulator stored %q", got, want)
	}

	// The job is acked (the work queue is empty) and the state says completed.
	e.waitRunsEmpty()
	st, _, err := e.client.State(context.Background(), "e2e-1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != events.StatusCompleted || st.Terminal != events.TypeRunCompleted || st.ResponseID != evs[0].ResponseID || st.Owner != "w1" {
		t.Fatalf("state = %+v", st)
	}
}

func TestManyConcurrentRuns(t *testing.T) {
	t.Parallel()
	const runs = 200
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "many-1", Concurrency: 64})
	e.startWorker(consumer.Config{WorkerID: "many-2", Concurrency: 64})

	var g sync.WaitGroup
	for i := range runs {
		g.Add(1)
		go func() {
			defer g.Done()
			e.submit(request(fmt.Sprintf("many-%d", i), map[string]string{"emu_tokens": fmt.Sprint(10 + i%30), "emu_token_ms": "2"}))
		}()
	}
	g.Wait()
	errs := make(chan error, runs)
	for i := range runs {
		g.Add(1)
		go func() {
			defer g.Done()
			id := fmt.Sprintf("many-%d", i)
			evs, err := collectErr(e.client, id, 90*time.Second)
			if err != nil {
				errs <- err
				return
			}
			if last := evs[len(evs)-1]; last.Type != events.TypeRunCompleted {
				errs <- fmt.Errorf("run %s ended %s", id, last.Type)
				return
			}
			for j, ev := range evs {
				if ev.Seq != uint64(j+1) {
					errs <- fmt.Errorf("run %s: event %d has seq %d", id, j, ev.Seq)
					return
				}
			}
			recs := e.emu.Records(id)
			if len(recs) != 1 {
				errs <- fmt.Errorf("run %s: %d responses upstream, want 1", id, len(recs))
				return
			}
			if got := text(evs); got != recs[0].Text {
				errs <- fmt.Errorf("run %s: text %q, emulator %q", id, got, recs[0].Text)
			}
		}()
	}
	g.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestLateWatcherSeesTheSameEvents(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "late"})
	e.submit(request("late-1", map[string]string{"emu_tokens": "30", "emu_token_ms": "5", "emu_tool_ms": "50"}))
	live := e.collect("late-1", 20*time.Second)
	late := e.collect("late-1", 20*time.Second)
	if len(live) != len(late) {
		t.Fatalf("live watcher saw %d events, late watcher %d", len(live), len(late))
	}
	for i := range live {
		a, _ := json.Marshal(live[i])
		b, _ := json.Marshal(late[i])
		if string(a) != string(b) {
			t.Fatalf("event %d differs:\nlive %s\nlate %s", i, a, b)
		}
	}
	checkWellFormed(t, live)
}

func TestToolEvents(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "tools"})
	req := request("tool-1", map[string]string{"emu_tool_ms": "30", "emu_tokens": "5"})
	req.Tools = []json.RawMessage{json.RawMessage(`{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp","require_approval":"never"}`)}
	e.submit(req)
	fail := request("tool-2", map[string]string{"emu_tool_ms": "30", "emu_tokens": "5", "emu_tool_fail": "1"})
	fail.Tools = req.Tools
	e.submit(fail)

	evs := e.collect("tool-1", 20*time.Second)
	checkWellFormed(t, evs)
	got := types(evs)
	if got[1] != events.TypeToolStarted || got[2] != events.TypeToolCompleted {
		t.Fatalf("events %v, want run.started, tool.started, tool.completed, ...", got)
	}
	if tool := evs[1].Tool; tool == nil || tool.Type != "mcp" || tool.ServerLabel != "crm" || tool.CallID == "" || tool.Name == "" {
		t.Fatalf("tool.started tool = %+v", evs[1].Tool)
	}
	if evs[1].Tool.CallID != evs[2].Tool.CallID {
		t.Fatalf("tool call ids differ: %q vs %q", evs[1].Tool.CallID, evs[2].Tool.CallID)
	}

	evs = e.collect("tool-2", 20*time.Second)
	checkWellFormed(t, evs)
	if evs[2].Type != events.TypeToolFailed || evs[2].Error == nil || evs[2].Error.Message == "" {
		t.Fatalf("events %v, third = %+v, want tool.failed with an error", types(evs), evs[2])
	}
	if last := evs[len(evs)-1]; last.Type != events.TypeRunCompleted {
		t.Fatalf("run ended %s after a failed tool, want run.completed", last.Type)
	}
}

func TestSubmitTwice(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	// No worker yet: the first submit stays queued.
	if _, err := consumer.Provision(ctx, e.js, events.Names{Prefix: "foundryq"}, consumer.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	e.submit(request("twice-1", map[string]string{"emu_tokens": "5"}))
	_, err := e.client.Submit(ctx, request("twice-1", map[string]string{"emu_tokens": "5"}))
	if !errors.Is(err, events.ErrAlreadyQueued) {
		t.Fatalf("second submit of a queued run: err = %v, want ErrAlreadyQueued", err)
	}

	e.startWorker(consumer.Config{WorkerID: "twice"})
	first := e.collect("twice-1", 20*time.Second)
	checkWellFormed(t, first)

	// A resubmit of the finished id that reaches the queue (published past
	// the dedupe window, here without a message id) is acked and ignored.
	e.waitRunsEmpty()
	data, _ := json.Marshal(request("twice-1", map[string]string{"emu_tokens": "5"}))
	if _, err := e.js.Publish(ctx, "foundryq.runs.twice-1", data); err != nil {
		t.Fatal(err)
	}
	e.waitRunsEmpty()
	again := e.collect("twice-1", 5*time.Second)
	if len(again) != len(first) {
		t.Fatalf("finished run got %d events after the resubmit, had %d", len(again), len(first))
	}
	if n := e.emu.Stats().ResponsesByRun["twice-1"]; n != 1 {
		t.Fatalf("emulator created %d responses for the run, want 1", n)
	}
}

func TestInvalidRequestIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "bad"})
	ctx := context.Background()
	for _, tc := range []struct{ id, body, field string }{
		{"bad-json", `{"run_id":`, ""},
		// A known field in capitals is no newer version's field: it fails at
		// once (an unknown field alone is handed back: fairness_test.go).
		{"bad-field", `{"run_id":"bad-field","model":"m","input":"x","Model":"n"}`, "Model"},
		{"bad-field-and-more", `{"run_id":"bad-field-and-more","model":"m","input":"x","colour":"red","max_output_tokens":3}`, ""},
		{"bad-both", `{"run_id":"bad-both","model":"m","agent":{"name":"a"},"input":"x"}`, "model"},
		{"bad-id", `{"run_id":"other","model":"m","input":"x"}`, "run_id"},
	} {
		if _, err := e.js.Publish(ctx, "foundryq.runs."+tc.id, []byte(tc.body)); err != nil {
			t.Fatal(err)
		}
		evs := e.collect(tc.id, 20*time.Second)
		last := checkWellFormed(t, evs)
		if last.Type != events.TypeRunFailed || last.Error == nil || last.Error.Code != "invalid_request" {
			t.Fatalf("%s: last event %+v, want run.failed invalid_request", tc.id, last)
		}
		if tc.field != "" && !contains(last.Error.Message, tc.field) {
			t.Errorf("%s: message %q does not name the field %q", tc.id, last.Error.Message, tc.field)
		}
		dead, err := e.js.Stream(ctx, "FOUNDRYQ_DEAD")
		if err != nil {
			t.Fatal(err)
		}
		m, err := dead.GetLastMsgForSubject(ctx, "foundryq.dead."+tc.id)
		if err != nil {
			t.Fatalf("%s: no dead letter: %v", tc.id, err)
		}
		if string(m.Data) != tc.body || m.Header.Get(events.HeaderDeadCode) != "invalid_request" || m.Header.Get(events.HeaderDeadReason) == "" {
			t.Fatalf("%s: dead letter %q headers %v", tc.id, m.Data, m.Header)
		}
	}
	// The worker goes on.
	e.submit(request("bad-after", nil))
	if last := checkWellFormed(t, e.collect("bad-after", 20*time.Second)); last.Type != events.TypeRunCompleted {
		t.Fatalf("run after bad requests ended %s", last.Type)
	}
	if n := e.emu.Stats().ResponsesCreated; n != 1 {
		t.Fatalf("emulator saw %d creates, want 1 (bad requests must not reach Foundry)", n)
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || len(s) >= len(sub) && (s == sub || indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func TestRequestShapeReachesFoundry(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "shape"})

	model := request("shape-model", map[string]string{"team": "blue"})
	model.Instructions = "be brief"
	model.MaxOutputTokens = 64
	model.Options = map[string]json.RawMessage{"temperature": json.RawMessage(`0.2`)}
	model.Tools = []json.RawMessage{json.RawMessage(`{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp","require_approval":"never"}`)}
	e.submit(model)
	agent := events.RunRequest{RunID: "shape-agent", Agent: &events.AgentRef{Name: "support", Version: "3"},
		Input: json.RawMessage(`[{"role":"user","content":"hi"}]`)}
	e.submit(agent)
	checkWellFormed(t, e.collect("shape-model", 20*time.Second))
	checkWellFormed(t, e.collect("shape-agent", 20*time.Second))

	body := func(runID string) map[string]any {
		reqs := e.emu.CreateRequests(runID)
		if len(reqs) != 1 {
			t.Fatalf("%s: emulator received %d creates, want 1", runID, len(reqs))
		}
		var m map[string]any
		if err := json.Unmarshal(reqs[0], &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := body("shape-model")
	for k, want := range map[string]any{"model": "gpt-test", "background": true, "stream": true, "store": true,
		"instructions": "be brief", "max_output_tokens": float64(64), "temperature": 0.2, "input": "hello there"} {
		if m[k] != want {
			t.Errorf("model request %s = %#v, want %#v", k, m[k], want)
		}
	}
	md, _ := m["metadata"].(map[string]any)
	if md["run_id"] != "shape-model" || md["team"] != "blue" {
		t.Errorf("metadata = %v, want run_id and team", md)
	}
	if tools, _ := m["tools"].([]any); len(tools) != 1 || tools[0].(map[string]any)["server_label"] != "crm" {
		t.Errorf("tools = %v", m["tools"])
	}

	a := body("shape-agent")
	if _, ok := a["model"]; ok {
		t.Errorf("agent request has a model: %v", a["model"])
	}
	ref, _ := a["agent_reference"].(map[string]any)
	if ref["type"] != "agent_reference" || ref["name"] != "support" || ref["version"] != "3" {
		t.Errorf("agent_reference = %v", a["agent_reference"])
	}
	if items, _ := a["input"].([]any); len(items) != 1 {
		t.Errorf("input = %v, want the item array", a["input"])
	}
}

func TestUpstreamFailures(t *testing.T) {
	t.Parallel()
	e := setup(t, withProvision(consumer.ProvisionConfig{MaxDeliver: 2}))
	e.startWorker(consumer.Config{WorkerID: "fail", RetryDelay: 50 * time.Millisecond})

	e.submit(request("fail-stream", map[string]string{"emu_fail_after": "4", "emu_tokens": "20"}))
	last := checkWellFormed(t, e.collect("fail-stream", 20*time.Second))
	if last.Type != events.TypeRunFailed || last.Error == nil || last.Error.Code == "" || last.Error.Message == "" {
		t.Fatalf("emu_fail_after: last event %+v, want run.failed with code and message", last)
	}

	e.submit(request("fail-400", map[string]string{"emu_create_status": "400"}))
	last = checkWellFormed(t, e.collect("fail-400", 20*time.Second))
	if last.Type != events.TypeRunFailed || last.Error.Code != "upstream_error" || !contains(last.Error.Message, "400") {
		t.Fatalf("create 400: last event %+v", last)
	}
	if n := len(e.emu.CreateRequests("fail-400")); n != 1 {
		t.Fatalf("a 400 create was sent %d times, want 1", n)
	}

	// A 500 is retried by redelivery (never by the SDK) until MaxDeliver.
	e.submit(request("fail-500", map[string]string{"emu_create_status": "500"}))
	last = checkWellFormed(t, e.collect("fail-500", 20*time.Second))
	if last.Type != events.TypeRunFailed || !contains(last.Error.Message, "500") {
		t.Fatalf("create 500: last event %+v", last)
	}
	if n := len(e.emu.CreateRequests("fail-500")); n != 2 {
		t.Fatalf("a 500 create was sent %d times, want 2 (MaxDeliver)", n)
	}
	ctx := context.Background()
	dead, err := e.js.Stream(ctx, "FOUNDRYQ_DEAD")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"fail-400", "fail-500"} {
		if _, err := dead.GetLastMsgForSubject(ctx, "foundryq.dead."+id); err != nil {
			t.Errorf("%s: no dead letter: %v", id, err)
		}
	}
	if _, err := dead.GetLastMsgForSubject(ctx, "foundryq.dead.fail-stream"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("fail-stream ran upstream and failed there; it is not a dead letter (err=%v)", err)
	}
}

func TestStreamDropIsResumed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "drop"})
	e.submit(request("drop-1", map[string]string{"emu_tokens": "60", "emu_token_ms": "3", "emu_drop_after": "12"}))
	evs := e.collect("drop-1", 20*time.Second)
	last := checkWellFormed(t, evs)
	if last.Type != events.TypeRunCompleted {
		t.Fatalf("run ended %s", last.Type)
	}
	if got, want := text(evs), e.emulatorText("drop-1"); got != want {
		t.Fatalf("text after a dropped stream:\n got %q\nwant %q", got, want)
	}
	// Re-attached in process: one attempt, one run.started.
	if got := types(evs); got[0] != events.TypeRunStarted || count(got, events.TypeRunStarted) != 1 {
		t.Fatalf("events %v: want exactly one run.started (the same attempt re-attaches)", got)
	}
}

func count(ts []events.EventType, t events.EventType) int {
	n := 0
	for _, x := range ts {
		if x == t {
			n++
		}
	}
	return n
}

// EventInterval merges the text of a fast stream into fewer events without
// losing or reordering any of it.
func TestEventIntervalMergesDeltas(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "paced", EventInterval: 200 * time.Millisecond})
	e.submit(request("paced-1", map[string]string{"emu_tokens": "100", "emu_token_ms": "10"})) // ~1s of text
	evs := e.collect("paced-1", 20*time.Second)
	checkWellFormed(t, evs)
	if got, want := text(evs), e.emulatorText("paced-1"); got != want {
		t.Fatalf("text %q, want %q", got, want)
	}
	// At most one text.delta per 200ms (plus the first), however long the
	// text took: a handful, never near 100.
	var first, last time.Time
	for _, ev := range evs {
		if ev.Type == events.TypeTextDelta {
			if first.IsZero() {
				first = ev.Time
			}
			last = ev.Time
		}
	}
	n := count(types(evs), events.TypeTextDelta)
	if allowed := int(last.Sub(first)/(200*time.Millisecond)) + 2; n > allowed || n > 50 {
		t.Fatalf("%d text.delta events for 100 tokens over %s with a 200ms interval (at most %d)", n, last.Sub(first), allowed)
	}
}
