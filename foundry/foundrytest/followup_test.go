package foundrytest

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// firstStep creates a background streamed response with tool and emu_tool_ms
// and returns its id and the item it stopped on.
func firstStep(t *testing.T, srv *Server, c *http.Client, runID string, tool map[string]any) (string, wireEvent) {
	t.Helper()
	body := createBody(runID, true, true, map[string]string{KeyTokens: "3", KeyToolMS: "5"})
	body["tools"] = []any{tool}
	evs, err := createStream(t, srv, c, body)
	if err != nil {
		t.Fatalf("first step: %v", err)
	}
	if last := evs[len(evs)-1]; last.Type != evCompleted || deltas(evs) != "" {
		t.Fatalf("first step ended %s with text %q", last.Type, deltas(evs))
	}
	done := evs[len(evs)-2]
	if done.Type != evItemDone || done.Item == nil {
		t.Fatalf("first step's last item: %s", done.Raw)
	}
	return evs[0].Response.ID, done
}

// nextStep is the follow-up create body answering prev with items.
func nextStep(runID, prev string, tool map[string]any, items ...map[string]any) map[string]any {
	body := createBody(runID, true, true, map[string]string{KeyTokens: "3", KeyToolMS: "5"})
	body["tools"] = []any{tool}
	body["previous_response_id"] = prev
	input := []any{}
	for _, it := range items {
		input = append(input, it)
	}
	body["input"] = input
	return body
}

var mcpTool = map[string]any{"type": "mcp", "server_label": "crm", "server_url": "https://crm.example/mcp", "allowed_tools": []string{"lookup"}}

// An approved MCP call runs in the follow-up, which then answers with text;
// the tools are not listed again and nothing asks again.
func TestFollowUpRunsTheApprovedCall(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	prev, req := firstStep(t, srv, c, "fu-approve", mcpTool)
	if req.Item.Type != "mcp_approval_request" || req.Item.Name != "lookup" {
		t.Fatalf("first step stopped on %s", req.Raw)
	}
	evs, err := createStream(t, srv, c, nextStep("fu-approve", prev, mcpTool,
		map[string]any{"type": "mcp_approval_response", "approval_request_id": req.Item.ID, "approve": true}))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{evCreated, evQueued, evInProgress,
		evItemAdded, evMCPInProgress, evMCPArgsDelta, evMCPArgsDone, evMCPCompleted, evItemDone,
		evItemAdded, evPartAdded, evTextDelta, evTextDelta, evTextDelta, evTextDone, evPartDone, evItemDone, evCompleted}
	if got := types(evs); !slices.Equal(got, want) {
		t.Fatalf("events:\n got %v\nwant %v", got, want)
	}
	if call := evs[8]; call.Item.Type != "mcp_call" || call.Item.Name != "lookup" ||
		!strings.Contains(string(call.Raw), `"approval_request_id":"`+req.Item.ID+`"`) {
		t.Fatalf("the approved call: %s", call.Raw)
	}
	if srv.Stats().ToolCallsStarted != 1 {
		t.Fatalf("tool calls started: %d", srv.Stats().ToolCallsStarted)
	}
	if rec := record(t, srv, evs[0].Response.ID); rec.PreviousResponseID != prev {
		t.Fatalf("record of the follow-up: previous %q, want %q", rec.PreviousResponseID, prev)
	}
}

// A denied call does not run; the model answers without it.
func TestFollowUpSkipsADeniedCall(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	prev, req := firstStep(t, srv, c, "fu-deny", mcpTool)
	evs, err := createStream(t, srv, c, nextStep("fu-deny", prev, mcpTool,
		map[string]any{"type": "mcp_approval_response", "approval_request_id": req.Item.ID, "approve": false, "reason": "not now"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := types(evs); slices.Contains(got, evMCPInProgress) || got[len(got)-1] != evCompleted || deltas(evs) == "" {
		t.Fatalf("events after a denial: %v", got)
	}
	if srv.Stats().ToolCallsStarted != 0 {
		t.Fatalf("a denied call ran")
	}
}

// A function call's output continues the run with text.
func TestFollowUpWithAFunctionOutput(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	fn := map[string]any{"type": "function", "name": "get_weather"}
	prev, call := firstStep(t, srv, c, "fu-fn", fn)
	var item struct {
		CallID string `json:"call_id"`
	}
	if call.Item.Type != "function_call" || !strings.Contains(string(call.Raw), `"call_id":"call_`) {
		t.Fatalf("first step stopped on %s", call.Raw)
	}
	item.CallID = between(string(call.Raw), `"call_id":"`, `"`)
	evs, err := createStream(t, srv, c, nextStep("fu-fn", prev, fn,
		map[string]any{"type": "function_call_output", "call_id": item.CallID, "output": `{"temp":21}`}))
	if err != nil {
		t.Fatal(err)
	}
	if got := types(evs); got[len(got)-1] != evCompleted || deltas(evs) == "" || slices.Contains(got, evFuncArgsDelta) {
		t.Fatalf("events after the output: %v", got)
	}
}

func between(s, from, to string) string {
	_, rest, _ := strings.Cut(s, from)
	v, _, _ := strings.Cut(rest, to)
	return v
}

// Follow-ups the service refuses, with its answers.
func TestFollowUpErrors(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	fn := map[string]any{"type": "function", "name": "f"}
	prevFn, call := firstStep(t, srv, c, "fu-err-fn", fn)
	callID := between(string(call.Raw), `"call_id":"`, `"`)
	prevMCP, _ := firstStep(t, srv, c, "fu-err-mcp", mcpTool)
	unstored := createBody("fu-unstored", false, false, nil)
	unstored["store"] = false
	var obj wireResponse
	readJSON(t, do(t, testCtx(t), c, "POST", srv.BaseURL()+"responses", unstored), http.StatusOK, &obj)

	for _, tc := range []struct {
		name        string
		body        map[string]any
		param, code string
		message     string
	}{
		{"unknown previous response", nextStep("e", "resp_nope", fn), "previous_response_id", "previous_response_not_found",
			"Previous response with id 'resp_nope' not found."},
		{"unstored previous response", nextStep("e", obj.ID, fn), "previous_response_id", "previous_response_not_found",
			"Previous response with id '" + obj.ID + "' not found."},
		{"output for a call not made", nextStep("e", prevFn, fn,
			map[string]any{"type": "function_call_output", "call_id": "call_other", "output": "x"}), "input", "",
			"No tool call found for function call output with call_id call_other."},
		{"a call left without output", nextStep("e", prevFn, fn), "input", "",
			"No tool output found for function call " + callID + "."},
		{"approval for a request not made", nextStep("e", prevMCP, mcpTool,
			map[string]any{"type": "mcp_approval_response", "approval_request_id": "mcpr_other", "approve": true}), "input", "",
			"No approval request found for mcp approval response with approval_request_id mcpr_other."},
		{"output without call_id", nextStep("e", prevFn, fn,
			map[string]any{"type": "function_call_output", "output": "x"}), "input[0].call_id", "missing_required_parameter",
			"Missing required parameter: 'input[0].call_id'."},
		{"approval without approve", nextStep("e", prevMCP, mcpTool,
			map[string]any{"type": "mcp_approval_response", "approval_request_id": "mcpr_x"}), "input[0].approve", "missing_required_parameter",
			"Missing required parameter: 'input[0].approve'."},
		{"approve not a boolean", nextStep("e", prevMCP, mcpTool,
			map[string]any{"type": "mcp_approval_response", "approval_request_id": "mcpr_x", "approve": "yes"}), "input[0].approve", "invalid_type",
			"Invalid type for 'input[0].approve': expected a boolean, but got a string instead."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := apiErr(t, do(t, testCtx(t), c, "POST", srv.BaseURL()+"responses", tc.body), http.StatusBadRequest)
			code := ""
			if e.Code != nil {
				code = *e.Code
			}
			param := ""
			if e.Param != nil {
				param = *e.Param
			}
			if e.Message != tc.message || param != tc.param || code != tc.code || e.Type != "invalid_request_error" {
				t.Fatalf("got %+v (param %q code %q)", e, param, code)
			}
		})
	}
}

// Parallel function calls call the request's function tools in turn, so
// that one response can ask for several functions.
func TestParallelCallsTakeTheFunctionsInTurn(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	body := createBody("fu-turns", true, true, map[string]string{KeyTokens: "3", KeyToolMS: "5", KeyFunctionCalls: "3"})
	body["tools"] = []any{map[string]any{"type": "function", "name": "get_weather"}, map[string]any{"type": "function", "name": "get_time"}}
	evs, err := createStream(t, srv, c, body)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ev := range evs {
		if ev.Type == evItemDone && ev.Item != nil && ev.Item.Type == "function_call" {
			names = append(names, ev.Item.Name)
		}
	}
	if want := []string{"get_weather", "get_time", "get_weather"}; !slices.Equal(names, want) {
		t.Fatalf("function calls to %v, want %v", names, want)
	}
}
