package conformance

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestResponseErrorCode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ raw, want string }{
		{"", "error absent"},
		{"null", "error null"},
		{` null `, "error null"},
		{`{"code":"insufficient_quota","message":"m"}`, "error insufficient_quota"},
		{`{"code":null,"message":"m"}`, "error without a code"},
		{`"a string"`, "error not an object"},
	} {
		r := responseObject{Error: []byte(tt.raw)}
		if got := r.errorCode(); got != tt.want {
			t.Errorf("errorCode(%q) = %q, want %q", tt.raw, got, tt.want)
		}
	}
}

// endpointFor is an endpoint served by h, for tests of one reply.
func endpointFor(t *testing.T, h http.HandlerFunc) *Endpoint {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	e, err := New(Config{BaseURL: srv.URL + "/openai/v1", Model: "m", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.hc.CloseIdleConnections)
	return e
}

// The follow-up's error observation keeps the message the sources quote,
// without the ids the service puts in it; it waits out "not found" for a
// response created a moment ago, and observes any other reply at once.
func TestFollowUpObservation(t *testing.T) {
	t.Parallel()
	const (
		missing  = `{"error":{"message":"No tool output found for function call call_Ab12Cd34.","type":"invalid_request_error","param":"input","code":null}}`
		notFound = `{"error":{"message":"Previous response with id 'resp_0a1b' not found.","type":"invalid_request_error","param":"previous_response_id","code":"previous_response_not_found"}}`
		answer   = `{"id":"resp_1","object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"OK"}]}]}`
	)
	for _, tt := range []struct {
		name    string
		replies []string // the i-th call's body; a 400 when it starts with {"error"
		want    string
		calls   int32
	}{
		{"no output for a call", []string{missing}, `follow-up 400 invalid_request_error param=input "No tool output found for function call …"`, 1},
		{"not found, then found", []string{notFound, answer}, "follow-up 200 completed, text", 2},
		{"not JSON", []string{"<html>"}, "follow-up 200 (not a response object)", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			e := endpointFor(t, func(w http.ResponseWriter, _ *http.Request) {
				body := tt.replies[min(int(calls.Add(1)), len(tt.replies))-1]
				if strings.HasPrefix(body, `{"error"`) {
					w.WriteHeader(http.StatusBadRequest)
				}
				fmt.Fprint(w, body)
			})
			r, obs, err := e.followUp(ctxT(t), map[string]any{})
			if err != nil {
				t.Fatal(err)
			}
			if got := answered(r, obs); got != tt.want || calls.Load() != tt.calls {
				t.Errorf("%q after %d calls, want %q after %d", got, calls.Load(), tt.want, tt.calls)
			}
		})
	}
}
