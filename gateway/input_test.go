package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/gateway"
	"github.com/foundryq/foundryq/internal/testkit"
)

// A run that asks, answered over HTTP: POST /v1/runs/{id}/input takes the
// answer, the run goes on to its end; the answer's mistakes get the
// gateway's error objects.
func TestAnswerOverHTTP(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	g := e.gateway(gateway.Config{})
	req := runRequest(map[string]string{"emu_tool_ms": "5", "emu_tokens": "3"})
	req["tools"] = []any{map[string]any{"type": "function", "name": "get_weather"}}
	cr := g.create(t, req)
	var asked events.InputItem
	testkit.Eventually(t, 30*time.Second, "the run to wait for an answer", func() bool {
		st, _, err := e.client.State(t.Context(), cr.RunID)
		if err != nil || st.Status != events.StatusWaiting {
			return false
		}
		asked = st.Asked[0]
		return true
	})
	path := "/v1/runs/" + cr.RunID + "/input"
	for _, tc := range []struct {
		name   string
		body   any
		status int
		code   string
	}{
		{"malformed", map[string]any{"id": asked.ID}, http.StatusBadRequest, gateway.CodeInvalidRequest},
		{"wrong kind", map[string]any{"id": asked.ID, "approve": true}, http.StatusBadRequest, gateway.CodeInvalidRequest},
		{"an id not asked", map[string]any{"id": "call_other", "output": "x"}, http.StatusNotFound, gateway.CodeNotFound},
	} {
		r := g.do(t, "POST", path, tc.body, "Content-Type", "application/json")
		ae := r.apiError(t)
		if r.status != tc.status || ae.Code != tc.code || ae.RunID != cr.RunID {
			t.Errorf("%s: %d %s", tc.name, r.status, r.body)
		}
	}
	if r := g.do(t, "POST", "/v1/runs/no-such-run/input", map[string]any{"id": "call_1", "output": "x"}, "Content-Type", "application/json"); r.status != http.StatusNotFound {
		t.Errorf("unknown run: %d %s", r.status, r.body)
	}
	r := g.do(t, "POST", path, map[string]any{"id": asked.ID, "output": `{"temp":21}`}, "Content-Type", "application/json")
	var reply struct {
		RunID  string `json:"run_id"`
		Result string `json:"result"`
	}
	r.decode(t, &reply)
	if r.status != http.StatusOK || reply.Result != events.InputAccepted || reply.RunID != cr.RunID {
		t.Fatalf("answer: %d %s", r.status, r.body)
	}
	evs := e.watchAll(cr.RunID)
	if last := evs[len(evs)-1]; last.Type != events.TypeRunCompleted {
		t.Fatalf("run ended %s", last.Type)
	}
	r = g.do(t, "POST", path, map[string]any{"id": asked.ID, "output": "again"}, "Content-Type", "application/json")
	ae := r.apiError(t)
	if r.status != http.StatusConflict || ae.Code != gateway.CodeRunFinished {
		t.Fatalf("answer after the end: %d %s", r.status, r.body)
	}
}

// A full run queue is a 503 with Retry-After, not an internal error.
func TestCreateWhenTheQueueIsFull(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := consumer.Provision(ctx, mustJS(t, e.nc), events.Names{}, consumer.ProvisionConfig{RunsMaxMsgs: 2}); err != nil {
		t.Fatal(err)
	}
	g := e.gateway(gateway.Config{})
	g.create(t, runRequest(nil))
	g.create(t, runRequest(nil))
	r := g.do(t, "POST", "/v1/runs", runRequest(nil), "Content-Type", "application/json")
	if ae := r.apiError(t); r.status != http.StatusServiceUnavailable || ae.Code != gateway.CodeUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("create past a full queue: %d %s", r.status, r.body)
	}
}

// An answer the workers cannot store, the inputs stream full, is a 503
// with Retry-After saying so, not an internal error or a timeout.
func TestAnswerWhenTheInputsStreamIsFull(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	// Room for the waiting run's kept request only (the worker provisions
	// the stream so as it starts).
	e.startWorker(consumer.Config{Provision: consumer.ProvisionConfig{InputsMaxMsgs: 1}})
	g := e.gateway(gateway.Config{})
	req := runRequest(map[string]string{"emu_tool_ms": "5", "emu_tokens": "3"})
	req["tools"] = []any{map[string]any{"type": "function", "name": "get_weather"}}
	cr := g.create(t, req)
	var asked events.InputItem
	testkit.Eventually(t, 30*time.Second, "the run to wait for an answer", func() bool {
		st, _, err := e.client.State(t.Context(), cr.RunID)
		if err != nil || st.Status != events.StatusWaiting {
			return false
		}
		asked = st.Asked[0]
		return true
	})
	r := g.do(t, "POST", "/v1/runs/"+cr.RunID+"/input", map[string]any{"id": asked.ID, "output": `{"temp":21}`}, "Content-Type", "application/json")
	ae := r.apiError(t)
	if r.status != http.StatusServiceUnavailable || ae.Code != gateway.CodeUnavailable || r.header.Get("Retry-After") == "" ||
		!strings.Contains(ae.Message, "maximum messages exceeded") {
		t.Fatalf("answer to a full inputs stream: %d %s (Retry-After %q)", r.status, r.body, r.header.Get("Retry-After"))
	}
}
