package conformance

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// wrongService answers every route in a way the service does not: a
// stream numbered from 1 with a gap, an event name that is not its type,
// no response.queued, a foreground response, no request id, no
// obfuscation; a create that does not stream answers a response that both
// calls a function and asks for an MCP approval, and so does a follow-up,
// whatever it answered, with no text; GET says in_progress for any id,
// resume answers JSON, cancel says completed, and every create is
// accepted, bad or not (an agent run with instructions too). A response
// created with emu_get_404_ms answers its next GET 404 with an empty body,
// not the error object.
func wrongService() http.HandlerFunc {
	var hideNextGet atomic.Bool
	return func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if req.Method == http.MethodPost && bytes.Contains(body, []byte(`"emu_get_404_ms"`)) {
			hideNextGet.Store(true)
		}
		if req.Method == http.MethodGet && req.URL.RawQuery == "" && hideNextGet.CompareAndSwap(true, false) {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		wrongAnswer(w, req, body)
	}
}

func wrongAnswer(w http.ResponseWriter, req *http.Request, body []byte) {
	switch {
	case req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/responses") && !bytes.Contains(body, []byte(`"stream":true`)):
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"resp_wrong","object":"response","status":"completed","output":[`+
			`{"type":"function_call","id":"fc_wrong","call_id":"call_wrong","name":"get_word","arguments":"{}"},`+
			`{"type":"mcp_approval_request","id":"mcpr_wrong","server_label":"crm","name":"t","arguments":"{}"}]}`)
	case req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/responses"):
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":1,"+
			"\"response\":{\"id\":\"resp_wrong\",\"status\":\"in_progress\",\"background\":false}}\n\n")
		fmt.Fprint(w, "event: delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":3,\"delta\":\"Hi\"}\n\n")
		fmt.Fprint(w, "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":4,"+
			"\"response\":{\"id\":\"resp_wrong\",\"status\":\"completed\",\"output\":[]}}\n\n")
	case req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/cancel"):
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"resp_wrong","object":"response","status":"completed"}`)
	default:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"resp_wrong","object":"response","status":"in_progress"}`)
	}
}

// The cases can fail: against a service that gets every behaviour wrong,
// no case observes its Want (each differs or cannot observe anything).
// Every case is run, as on the emulator and as on an endpoint.
func TestCasesCatchAWrongService(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(wrongService())
	t.Cleanup(srv.Close)
	ctx := ctxT(t)
	checked := map[string]bool{}
	for _, asEmulator := range []bool{true, false} {
		e, err := New(Config{BaseURL: srv.URL + "/openai/v1", Model: "m", Agent: "a", APIKey: "k"})
		if err != nil {
			t.Fatal(err)
		}
		e.emulator = asEmulator
		e.advance = func(time.Duration) {}
		for _, c := range Cases {
			r := RunCase(ctx, e, c)
			if r.NotRun != "" {
				continue
			}
			checked[c.Name] = true
			t.Logf("%s (as emulator: %t): %s %v", c.Name, asEmulator, r.Observed, r.Err)
			if r.Err == nil && r.Observed == c.Want {
				t.Errorf("%s: the wrong service passes (%s)", c.Name, r.Observed)
			}
		}
		e.hc.CloseIdleConnections()
	}
	if len(checked) != len(Cases) {
		t.Errorf("%d of %d cases checked", len(checked), len(Cases))
	}
}
