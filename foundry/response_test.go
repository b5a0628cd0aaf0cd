package foundry

import (
	"errors"
	"net/http"
	"reflect"
	"testing"
)

const storedResponse = `{
  "id": "resp_g", "object": "response", "status": "completed", "background": true,
  "error": null, "incomplete_details": null,
  "metadata": {"run_id": "r1"},
  "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 4},
            "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 5}, "total_tokens": 30},
  "output": [
    {"id": "mcpl_1", "type": "mcp_list_tools", "server_label": "files", "error": null,
     "tools": [{"name": "read", "input_schema": {}}, {"name": "write", "input_schema": {}, "annotations": null}]},
    {"id": "mcp_1", "type": "mcp_call", "name": "read", "server_label": "files", "arguments": "{\"path\":\"a\"}",
     "status": "completed", "output": "contents", "error": null},
    {"id": "mcp_2", "type": "mcp_call", "name": "write", "server_label": "files", "arguments": "{}",
     "status": "failed", "output": null, "error": "permission denied"},
    {"id": "rs_1", "type": "reasoning", "summary": []},
    {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": "Hello, ", "annotations": []}, {"type": "refusal", "refusal": "no"},
                 {"type": "output_text", "text": "world", "annotations": []}]},
    {"id": "msg_2", "type": "message", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": "!", "annotations": []}]},
    {"id": "mcpr_1", "type": "mcp_approval_request", "server_label": "files", "name": "delete", "arguments": "{\"path\":\"b\"}"},
    {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}", "status": "completed"},
    {"id": "mcp_3", "type": "mcp_call", "name": "delete", "server_label": "files", "arguments": "{}",
     "status": "completed", "output": "ok", "approval_request_id": "mcpr_0"}
  ]
}`

func TestGetDecodesResponse(t *testing.T) {
	t.Parallel()
	f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(storedResponse))
	})
	got, err := f.client(t).Get(ctxT(t), "resp_g")
	if err != nil {
		t.Fatal(err)
	}
	want := &Response{
		ID: "resp_g", Status: "completed", Background: true, BackgroundKnown: true,
		Usage:      &Usage{InputTokens: 10, OutputTokens: 20, TotalTokens: 30, CachedTokens: 4, ReasoningTokens: 5},
		OutputText: "Hello, world!",
		Refusal:    "no",
		Metadata:   map[string]string{"run_id": "r1"},
		Output: []OutputItem{
			{ID: "mcpl_1", Type: "mcp_list_tools", ServerLabel: "files", Tools: []string{"read", "write"}},
			{ID: "mcp_1", Type: "mcp_call", Name: "read", ServerLabel: "files", Arguments: `{"path":"a"}`, Status: "completed", Output: "contents"},
			{ID: "mcp_2", Type: "mcp_call", Name: "write", ServerLabel: "files", Arguments: "{}", Status: "failed", Error: "permission denied"},
			{ID: "rs_1", Type: "reasoning"},
			{ID: "msg_1", Type: "message", Status: "completed", Text: "Hello, world", Refusal: "no"},
			{ID: "msg_2", Type: "message", Status: "completed", Text: "!"},
			{ID: "mcpr_1", Type: ItemMCPApprovalRequest, ServerLabel: "files", Name: "delete", Arguments: `{"path":"b"}`},
			{ID: "fc_1", Type: ItemFunctionCall, CallID: "call_1", Name: "lookup", Arguments: "{}", Status: "completed"},
			{ID: "mcp_3", Type: "mcp_call", Name: "delete", ServerLabel: "files", Arguments: "{}", Status: "completed", Output: "ok", ApprovalRequestID: "mcpr_0"},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Get =\n%+v\nwant\n%+v", got, want)
	}
	if !got.Terminal() {
		t.Error("completed response not terminal")
	}
	if a := got.ApprovalRequests(); len(a) != 1 || a[0].ID != "mcpr_1" {
		t.Errorf("ApprovalRequests = %+v", a)
	}
	if f := got.FunctionCalls(); len(f) != 1 || f[0].CallID != "call_1" {
		t.Errorf("FunctionCalls = %+v", f)
	}
	var none *Response
	if none.ApprovalRequests() != nil || (&Response{}).FunctionCalls() != nil {
		t.Error("empty responses have pending items")
	}
	r := f.requests()[0]
	if r.Method != http.MethodGet || r.Path != "/openai/v1/responses/resp_g" || r.Query != "" {
		t.Errorf("request = %s %s?%s", r.Method, r.Path, r.Query)
	}
}

func TestResponseIDIsEscaped(t *testing.T) {
	t.Parallel()
	f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
		writeAPIError(w, 404, "not_found", "no such response")
	})
	c := f.client(t)
	for _, id := range []string{"../../admin", "..", "a/b?c"} {
		_, err := c.Get(ctxT(t), id)
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%q) = %v", id, err)
		}
	}
	for i, want := range []string{"/openai/v1/responses/..%2F..%2Fadmin", "/openai/v1/responses/%2E%2E", "/openai/v1/responses/a%2Fb%3Fc"} {
		if got := f.requests()[i].Path; got != want {
			t.Errorf("path = %q, want %q", got, want)
		}
	}
	if _, err := c.Get(ctxT(t), ""); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("Get(\"\") = %v", err)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		handle     func(w http.ResponseWriter, r *http.Request)
		wantStatus string
		wantErr    error
		wantCalls  []string
	}{
		{
			name: "running response is cancelled",
			handle: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, 200, respObj("resp_c", "cancelled", nil))
			},
			wantStatus: StatusCancelled, wantCalls: []string{"POST /openai/v1/responses/resp_c/cancel"},
		},
		{
			name: "finished response returns its final state",
			handle: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, 200, respObj("resp_c", "completed", map[string]any{"usage": map[string]any{"input_tokens": 1, "output_tokens": 2, "total_tokens": 3}}))
			},
			wantStatus: StatusCompleted, wantCalls: []string{"POST /openai/v1/responses/resp_c/cancel"},
		},
		{
			name: "refused for a finished response: falls back to get",
			handle: func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					writeAPIError(w, 400, "", "Cannot cancel a response with status 'completed'.")
					return
				}
				writeJSON(w, 200, respObj("resp_c", "completed", nil))
			},
			wantStatus: StatusCompleted,
			wantCalls:  []string{"POST /openai/v1/responses/resp_c/cancel", "GET /openai/v1/responses/resp_c"},
		},
		{
			name: "refused for a not-background response that is still running",
			handle: func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					writeAPIError(w, 400, "", "Only background responses can be cancelled.")
					return
				}
				writeJSON(w, 200, respObj("resp_c", "in_progress", nil))
			},
			wantErr:   &APIError{},
			wantCalls: []string{"POST /openai/v1/responses/resp_c/cancel", "GET /openai/v1/responses/resp_c"},
		},
		{
			name: "unknown id",
			handle: func(w http.ResponseWriter, r *http.Request) {
				writeAPIError(w, 404, "not_found", "Response with id 'resp_c' not found.")
			},
			wantErr: ErrNotFound, wantCalls: []string{"POST /openai/v1/responses/resp_c/cancel"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) { tt.handle(w, r) })
			got, err := f.client(t).Cancel(ctxT(t), "resp_c")
			switch want := tt.wantErr.(type) {
			case nil:
				if err != nil || got.Status != tt.wantStatus {
					t.Fatalf("Cancel = %+v, %v; want status %s", got, err, tt.wantStatus)
				}
			case *APIError:
				var apiErr *APIError
				if !errors.As(err, &apiErr) || apiErr.Op != "cancel" {
					t.Fatalf("err = %v, want an *APIError from cancel", err)
				}
			default:
				if !errors.Is(err, want) {
					t.Fatalf("err = %v, want %v", err, want)
				}
			}
			var calls []string
			for _, r := range f.requests() {
				calls = append(calls, r.Method+" "+r.Path)
			}
			if !reflect.DeepEqual(calls, tt.wantCalls) {
				t.Errorf("calls = %v, want %v", calls, tt.wantCalls)
			}
		})
	}
}
