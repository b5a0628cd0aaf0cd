package foundry_test

// Tests of the client against the emulator answering as the service does
// (issue 8): the behaviours of Azure AI Foundry that foundryq must handle,
// each with its source in foundry/doc.go.

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
)

// drainAll reads s to its end and returns every event's type and the last
// response snapshot.
func drainAll(s *foundry.Stream) (types []string, text string, last *foundry.Response) {
	var b strings.Builder
	for s.Next() {
		ev := s.Event()
		types = append(types, ev.Type)
		if ev.Type == foundry.EventOutputTextDelta {
			b.WriteString(ev.Delta)
		}
		if ev.Response != nil {
			last = ev.Response
		}
	}
	return types, b.String(), last
}

func apiError(t *testing.T, err error) *foundry.APIError {
	t.Helper()
	var e *foundry.APIError
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want an *APIError", err)
	}
	return e
}

// Item 1: an agent run refuses instructions, tools, text, reasoning (and
// temperature, top_p); the old "agent" field is deprecated.
func TestServiceAgentRefusals(t *testing.T) {
	t.Parallel()
	_, c := setup(t, foundrytest.Config{DefaultTokens: 2})
	ctx := ctxT(t)
	agent := func(mod func(*foundry.CreateRequest)) foundry.CreateRequest {
		r := req("agent-refused", nil)
		r.Model, r.Agent = "", &foundry.AgentRef{Name: "helper"}
		mod(&r)
		return r
	}
	for name, mod := range map[string]func(*foundry.CreateRequest){
		"tools": func(r *foundry.CreateRequest) {
			r.Tools = []json.RawMessage{json.RawMessage(`{"type":"function","name":"f"}`)}
		},
		"instructions": func(r *foundry.CreateRequest) { r.Instructions = "be brief" },
		"text":         func(r *foundry.CreateRequest) { r.Options = map[string]json.RawMessage{"text": json.RawMessage(`{}`)} },
		"reasoning": func(r *foundry.CreateRequest) {
			r.Options = map[string]json.RawMessage{"reasoning": json.RawMessage(`{}`)}
		},
	} {
		_, err := c.Create(ctx, agent(mod))
		e := apiError(t, err)
		if e.StatusCode != 400 || e.Code != "invalid_payload" || e.Param != name || e.Message != "Not allowed when agent is specified." {
			t.Errorf("%s: %+v", name, e)
		}
		if !strings.Contains(err.Error(), name+": Not allowed when agent is specified.") {
			t.Errorf("%s: the message does not name the field: %q", name, err)
		}
	}
	// Several fields: "Invalid payload" with one detail each, kept in the error.
	_, err := c.Create(ctx, agent(func(r *foundry.CreateRequest) {
		r.Options = map[string]json.RawMessage{"temperature": json.RawMessage(`0.2`), "top_p": json.RawMessage(`1`)}
	}))
	e := apiError(t, err)
	if e.Message != "Invalid payload" || len(e.Details) != 2 || e.Details[0].Param != "temperature" || e.Details[1].Param != "top_p" {
		t.Errorf("several fields: %+v", e)
	}
	if !strings.Contains(err.Error(), "temperature: Not allowed when agent is specified.; top_p: Not allowed") {
		t.Errorf("details not in the message: %q", err)
	}

	// The deprecated field name, as a client with AgentField "agent" sends it.
	_, old := setup(t, foundrytest.Config{}, func(cfg *foundry.Config) { cfg.AgentField = "agent" })
	_, err = old.Create(ctx, agent(func(*foundry.CreateRequest) {}))
	if e := apiError(t, err); e.StatusCode != 400 || e.Param != "agent" || !strings.Contains(e.Message, "deprecated") {
		t.Errorf("deprecated agent field: %+v", e)
	}
}

// Item 2: an MCP call needs approval unless require_approval is "never": the
// response completes with an mcp_approval_request and no call, no text.
func TestServiceMCPApproval(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, foundrytest.Config{DefaultTokens: 3})
	ctx := ctxT(t)
	for _, approval := range []string{``, `,"require_approval":"always"`, `,"require_approval":{"never":{"tool_names":["other"]}}`} {
		r := req("mcp-approval", map[string]string{"emu_tool_ms": "1"})
		r.Tools = []json.RawMessage{json.RawMessage(`{"type":"mcp","server_label":"crm","server_url":"https://crm.example/mcp","allowed_tools":["lookup"]` + approval + `}`)}
		s, err := c.Create(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		types, text, last := drainAll(s)
		if s.Err() != nil || last == nil || last.Status != foundry.StatusCompleted {
			t.Fatalf("%q: %v %+v", approval, s.Err(), last)
		}
		reqs := last.ApprovalRequests()
		if len(reqs) != 1 || reqs[0].ServerLabel != "crm" || reqs[0].Name != "lookup" || reqs[0].Arguments == "" || reqs[0].ID == "" {
			t.Errorf("%q: approval requests %+v", approval, reqs)
		}
		if text != "" || last.OutputText != "" || strings.Contains(strings.Join(types, " "), "mcp_call") {
			t.Errorf("%q: the call ran or text came: %v %q", approval, types, text)
		}
		if len(last.Output) != 2 || last.Output[0].Type != foundry.ItemMCPListTools || last.Output[0].Tools[0] != "lookup" {
			t.Errorf("%q: output %+v", approval, last.Output)
		}
	}
	if st := srv.Stats(); st.ToolCallsStarted != 0 {
		t.Errorf("a tool call started without approval: %+v", st)
	}

	// "never" runs the call; a function tool ends with a function_call.
	r := req("mcp-never", map[string]string{"emu_tool_ms": "1"})
	r.Tools = []json.RawMessage{json.RawMessage(`{"type":"mcp","server_label":"crm","server_url":"https://crm.example/mcp","require_approval":"never"}`)}
	s, err := c.Create(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	_, text, last := drainAll(s)
	if len(last.ApprovalRequests()) != 0 || text == "" || last.Output[1].Type != foundry.ItemMCPCall || last.Output[1].Status != "completed" {
		t.Errorf("never: %+v", last)
	}
	r = req("function", map[string]string{"emu_tool_ms": "1"})
	r.Tools = []json.RawMessage{json.RawMessage(`{"type":"function","name":"lookup_order","parameters":{"type":"object"}}`)}
	s, err = c.Create(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	_, text, last = drainAll(s)
	calls := last.FunctionCalls()
	if len(calls) != 1 || calls[0].Name != "lookup_order" || calls[0].CallID == "" || calls[0].Arguments == "" || text != "" ||
		last.Status != foundry.StatusCompleted {
		t.Errorf("function call: %+v", last)
	}
}

// Item 3: a hosted agent ignores background: response.created says
// background false, resume answers "Streaming is not enabled for this
// response", GET stays in_progress, cancel fails.
func TestServiceHostedAgent(t *testing.T) {
	t.Parallel()
	_, c := setup(t, foundrytest.Config{DefaultTokens: 4})
	ctx := ctxT(t)
	for _, how := range []struct {
		name string
		md   map[string]string
	}{{foundrytest.HostedAgentPrefix + "support", nil}, {"support", map[string]string{foundrytest.KeyHostedAgent: "1"}}} {
		r := req("hosted", how.md)
		r.Model, r.Agent = "", &foundry.AgentRef{Name: how.name}
		s, err := c.Create(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		var created *foundry.Response
		var types []string
		text := ""
		for s.Next() {
			ev := s.Event()
			types = append(types, ev.Type)
			text += ev.Delta
			if ev.Type == foundry.EventCreated {
				created = ev.Response
			}
		}
		if s.Err() != nil || created == nil || created.Background || !created.BackgroundKnown || text == "" {
			t.Fatalf("%s: created %+v, err %v", how.name, created, s.Err())
		}
		if strings.Contains(strings.Join(types, " "), foundry.EventQueued) {
			t.Errorf("%s: a foreground response was queued: %v", how.name, types)
		}
		id := s.ResponseID()
		if _, err := c.Resume(ctx, id, 0); !errors.Is(err, foundry.ErrStreamingNotEnabled) {
			t.Errorf("%s: resume: %v", how.name, err)
		}
		if got, err := c.Get(ctx, id); err != nil || got.Status != foundry.StatusInProgress || len(got.Output) != 0 {
			t.Errorf("%s: GET = %+v, %v; want in_progress with no output", how.name, got, err)
		}
		if _, err := c.Cancel(ctx, id); err == nil || apiError(t, err).StatusCode != 400 {
			t.Errorf("%s: cancel: %v", how.name, err)
		}
	}
}

// Item 4: cancel of a finished response is a 400 (only a cancelled one
// answers 200); Cancel falls back to GET and returns the final state.
func TestServiceCancelFinished(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, foundrytest.Config{DefaultTokens: 2})
	ctx := ctxT(t)
	s, err := c.Create(ctx, req("cancel-failed", map[string]string{"emu_fail_after": "4"}))
	if err != nil {
		t.Fatal(err)
	}
	drainAll(s)
	got, err := c.Cancel(ctx, s.ResponseID())
	if err != nil || got.Status != foundry.StatusFailed || got.Error == nil {
		t.Fatalf("cancel of a failed response = %+v, %v", got, err)
	}
	if st := srv.Stats(); st.CancelsReceived != 1 || st.ResponsesCancelled != 0 {
		t.Errorf("the cancel was not refused by the emulator: %+v", st)
	}
}

// Item 5: response.created can take minutes; the headers come at once, then
// keepalive events. Create returns at once; keepalives pass through and do
// not move the resume cursor.
func TestServiceKeepalivesBeforeCreated(t *testing.T) {
	t.Parallel()
	_, c := setup(t, foundrytest.Config{DefaultTokens: 3})
	ctx := ctxT(t)
	s, err := c.Create(ctx, req("keepalive", map[string]string{"emu_created_ms": "200", "emu_keepalive_ms": "20", "emu_drop_after": "12"}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Next() || s.Event().Type != foundry.EventKeepalive {
		t.Fatalf("first event %q, want a keepalive (the headers came before response.created)", s.Event().Type)
	}
	if _, ok := s.LastSeq(); ok || s.ResponseID() != "" {
		t.Fatalf("a keepalive moved the cursor or gave an id")
	}
	keepalives, createdSeq := 1, int64(-1)
	for s.Next() {
		switch ev := s.Event(); ev.Type {
		case foundry.EventKeepalive:
			keepalives++
		case foundry.EventCreated:
			createdSeq = ev.SequenceNumber
		}
	}
	if keepalives < 3 || createdSeq != int64(keepalives) {
		t.Fatalf("%d keepalives, response.created at %d", keepalives, createdSeq)
	}
	// The stream was cut (emu_drop_after): resuming from the cursor gives the rest.
	seq, _ := s.LastSeq()
	if !errors.Is(s.Err(), foundry.ErrStreamTruncated) || seq != 11 {
		t.Fatalf("err %v, LastSeq %d", s.Err(), seq)
	}
	r, err := c.Resume(ctx, s.ResponseID(), seq)
	if err != nil {
		t.Fatal(err)
	}
	_, _, last := drainAll(r)
	if r.Err() != nil || last.Status != foundry.StatusCompleted {
		t.Fatalf("resume: %v %+v", r.Err(), last)
	}
}

// clock is a settable clock for the emulator.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// Item 6: right after a streamed create, GET, resume and cancel can answer
// 404 for a while (emu_get_404_ms); NotYetVisible tells it from gone.
func TestServiceNotFoundRightAfterStream(t *testing.T) {
	t.Parallel()
	var clk clock
	_, c := setup(t, foundrytest.Config{DefaultTokens: 2, Clock: clk.now})
	ctx := ctxT(t)
	s, err := c.Create(ctx, req("late-404", map[string]string{"emu_get_404_ms": "30000"}))
	if err != nil {
		t.Fatal(err)
	}
	drainAll(s)
	seen := time.Now()
	id := s.ResponseID()
	_, gerr := c.Get(ctx, id)
	_, rerr := c.Resume(ctx, id, 0)
	_, cerr := c.Cancel(ctx, id)
	for name, err := range map[string]error{"get": gerr, "resume": rerr, "cancel": cerr} {
		if !errors.Is(err, foundry.ErrNotFound) || !foundry.NotYetVisible(err, time.Since(seen)) {
			t.Errorf("%s: %v, want a 404 that is 'not yet'", name, err)
		}
	}
	clk.advance(31 * time.Second)
	if got, err := c.Get(ctx, id); err != nil || got.Status != foundry.StatusCompleted {
		t.Fatalf("after the window: %+v, %v", got, err)
	}
}

// Item 7: an error event ends the stream but not the response: GET says
// whether it goes on; resume gives the rest. With emu_error_fail it failed.
func TestServiceErrorEventMidStream(t *testing.T) {
	t.Parallel()
	_, c := setup(t, foundrytest.Config{DefaultTokens: 20})
	ctx := ctxT(t)
	s, err := c.Create(ctx, req("error-event", map[string]string{"emu_error_after": "6", "emu_token_ms": "2"}))
	if err != nil {
		t.Fatal(err)
	}
	_, first, _ := drainAll(s)
	ev := s.Event()
	seq, _ := s.LastSeq()
	if s.Err() != nil || !s.Terminal() || ev.Type != foundry.EventError || ev.Code != "server_error" || seq != 5 {
		t.Fatalf("stream: err %v, terminal %v, last %+v, LastSeq %d", s.Err(), s.Terminal(), ev, seq)
	}
	got, err := c.Get(ctx, s.ResponseID())
	if err != nil || got.Terminal() {
		t.Fatalf("GET after the error event = %+v, %v; want it still running", got, err)
	}
	r, err := c.Resume(ctx, s.ResponseID(), seq)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, last := drainAll(r)
	if r.Err() != nil || last.Status != foundry.StatusCompleted || first+rest != last.OutputText {
		t.Fatalf("resumed: %v %+v, text %q + %q", r.Err(), last, first, rest)
	}

	f, err := c.Create(ctx, req("error-fail", map[string]string{"emu_error_after": "6", "emu_error_fail": "1", "emu_fail_code": "rate_limit_exceeded"}))
	if err != nil {
		t.Fatal(err)
	}
	drainAll(f)
	if f.Event().Type != foundry.EventError {
		t.Fatalf("last event %q", f.Event().Type)
	}
	got, err = c.Get(ctx, f.ResponseID())
	if err != nil || got.Status != foundry.StatusFailed || got.Error == nil || got.Error.Code != "rate_limit_exceeded" {
		t.Fatalf("GET after a failing error event = %+v, %v", got, err)
	}
}

// Item 8: transient failure codes are retryable, others not.
func TestServiceFailureCodes(t *testing.T) {
	t.Parallel()
	_, c := setup(t, foundrytest.Config{DefaultTokens: 5})
	ctx := ctxT(t)
	for code, retryable := range map[string]bool{"server_error": true, "rate_limit_exceeded": true, "invalid_prompt": false, "vector_store_timeout": false} {
		s, err := c.Create(ctx, req("fail-"+code, map[string]string{"emu_fail_after": "5", "emu_fail_code": code}))
		if err != nil {
			t.Fatal(err)
		}
		_, _, last := drainAll(s)
		if last == nil || last.Status != foundry.StatusFailed || last.Error.Code != code || last.Error.Retryable() != retryable {
			t.Errorf("%s: %+v", code, last)
		}
	}
}

// Item 9: while the deployment is throttled every create answers 429 with
// retry-after and retry-after-ms; the control endpoint starts and ends it.
func TestServiceThrottle(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, foundrytest.Config{DefaultTokens: 2})
	ctx := ctxT(t)
	srv.Throttle(time.Hour, 2500*time.Millisecond)
	var wg sync.WaitGroup
	var limited atomic.Int32
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Create(ctx, req("burst", nil))
			var e *foundry.APIError
			if errors.Is(err, foundry.ErrRateLimited) && errors.As(err, &e) && e.RetryAfter == 2500*time.Millisecond {
				limited.Add(1)
			} else {
				t.Errorf("throttled create: %v", err)
			}
		}()
	}
	wg.Wait()
	if st := srv.Stats(); limited.Load() != 20 || st.CreatesThrottled != 20 || st.ResponsesCreated != 0 || len(srv.CreateRequests("burst")) != 20 {
		t.Fatalf("limited %d, stats %+v", limited.Load(), st)
	}

	control := func(method, query string) map[string]any {
		r, err := http.NewRequestWithContext(ctx, method, srv.URL()+"/_emulator/throttle"+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var st map[string]any
		if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&st) != nil {
			t.Fatalf("%s %s: %d", method, query, res.StatusCode)
		}
		return st
	}
	if st := control("DELETE", ""); st["throttled"] != false {
		t.Fatalf("after DELETE: %v", st)
	}
	s, err := c.Create(ctx, req("after", nil))
	if err != nil {
		t.Fatal(err)
	}
	drainAll(s)
	if st := control("POST", "?for=1h&retry_after=3s"); st["throttled"] != true || st["retry_after_ms"] != float64(3000) {
		t.Fatalf("after POST: %v", st)
	}
	_, err = c.Create(ctx, req("again", nil))
	if e := apiError(t, err); e.StatusCode != 429 || e.RetryAfter != 3*time.Second {
		t.Fatalf("throttled by the endpoint: %+v", e)
	}
	control("POST", "?for=0s")
	if _, err := c.Create(ctx, req("free", nil)); err != nil {
		t.Fatal(err)
	}
}
