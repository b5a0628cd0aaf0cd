package foundrytest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"
)

var respIDPattern = regexp.MustCompile(`resp_[0-9a-f]{48}`)

// FuzzHandler throws arbitrary methods, paths, queries, headers and bodies at
// the emulator. It must never panic and never answer 5xx unless the request
// asked for it with emu_create_status, and every error must have the real
// error shape. "{id}" in the target stands for the last response created, so
// the fuzzer also reaches get, resume, cancel and delete of real responses.
//
//	go test -run '^$' -fuzz FuzzHandler -fuzztime 60s ./foundry/foundrytest/
func FuzzHandler(f *testing.F) {
	seeds := []struct {
		method, target, body string
		bearer               bool
	}{
		{"POST", "/openai/v1/responses", `{"model":"m","input":"hi","stream":true,"background":true,"metadata":{"emu_tokens":"3","emu_tool_ms":"1"}}`, true},
		{"POST", "/openai/v1/responses", `{"model":"m","stream":true,"metadata":{"emu_fail_after":"4","emu_tool_fail":"1"}}`, false},
		{"POST", "/openai/v1/responses", `{"model":"m","background":true,"metadata":{"emu_created_ms":"5","emu_complete_despite_cancel":"1"}}`, true},
		{"POST", "/openai/v1/responses", `{"agent_reference":{"type":"agent_reference","name":"a"},"stream":true,"background":true,"metadata":{"emu_drop_after":"3"}}`, true},
		{"POST", "/openai/v1/responses", `{"model":"m","metadata":{"emu_create_status":"503"}}`, true},
		{"POST", "/openai/v1/responses", `{"model":"m","max_output_tokens":16,"metadata":{"emu_tokens":"40"}}`, true},
		{"POST", "/openai/v1/responses", `{"model":"m","tools":[{"type":"mcp"}],"metadata":{"a":1}}`, true},
		{"POST", "/openai/v1/responses", `{"model":[],"background":"x","store":false}`, true},
		{"POST", "/openai/v1/responses", `{"model":"m","max_output_tokens":1e309}`, true},
		{"POST", "/openai/v1/responses", `{`, true},
		{"POST", "/openai/v1/responses", "\x00\xff", true},
		{"GET", "/openai/v1/responses/{id}", ``, true},
		{"GET", "/openai/v1/responses/{id}?stream=true&starting_after=2", ``, true},
		{"GET", "/openai/v1/responses/{id}?stream=true&starting_after=-5", ``, true},
		{"GET", "/openai/v1/responses/{id}?stream=1&starting_after=99999999999", ``, true},
		{"POST", "/openai/v1/responses/{id}/cancel", ``, true},
		{"DELETE", "/openai/v1/responses/{id}", ``, true},
		{"GET", "/openai/v1/responses/%2e%2e/cancel", ``, true},
		{"PATCH", "/openai/v1/responses//cancel", `x`, true},
		{"GET", "/_emulator/stats", ``, false},
		{"GET", "/openai/v1/responses/resp_x?stream=true&stream=false", ``, true},
		{"OPTIONS", "*", ``, true},
		{"POST", "/api/projects/p/openai/v1/responses", `{"model":"m","stream":true,"background":true,"tools":[{"type":"mcp","server_label":"s","allowed_tools":["a","b"]},{"type":"function","name":"f"}],"metadata":{"emu_tool_ms":"1","emu_error_after":"3","emu_error_fail":"1","emu_fail_code":"rate_limit_exceeded"}}`, true},
		{"POST", "/openai/v1/responses", `{"agent_reference":{"name":"hosted-a"},"stream":true,"background":true,"metadata":{"emu_created_ms":"20","emu_keepalive_ms":"1","emu_get_404_ms":"10"}}`, true},
		{"POST", "/openai/v1/responses", `{"agent":{"name":"a"},"instructions":"x","temperature":1,"top_p":1}`, true},
		{"POST", "/_emulator/throttle?for=1ms&retry_after=1ms", ``, false},
		{"GET", "/api/projects/p/openai/v1/responses/{id}?stream=true", ``, true},
	}
	for _, s := range seeds {
		f.Add(s.method, s.target, []byte(s.body), s.bearer)
	}
	h := NewHandler(Config{APIKey: testKey, MaxTokens: 2000, MaxBodyBytes: 64 << 10})
	f.Cleanup(h.Close)
	lastID := "resp_none"

	f.Fuzz(func(t *testing.T, method, target string, body []byte, bearer bool) {
		target = strings.ReplaceAll(target, "{id}", lastID)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
		if err != nil || req.URL.Path == "" {
			return
		}
		if bearer {
			req.Header.Set("Authorization", "Bearer "+testKey)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		out := rec.Body.Bytes()
		if id := respIDPattern.Find(out); id != nil {
			lastID = string(id)
		}
		if rec.Code >= 500 && !bytes.Contains(body, []byte(KeyCreateStatus)) {
			t.Fatalf("%s %s answered %d: %s", method, target, rec.Code, out)
		}
		if rec.Code >= 400 && rec.Header().Get("Content-Type") == "application/json" {
			var e errorBody
			if err := json.Unmarshal(out, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("%s %s: %d with a malformed error body %q", method, target, rec.Code, out)
			}
		}
		if rec.Code == http.StatusOK && strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
			s := newSSEReader(bytes.NewReader(out))
			for seq := -1; ; {
				ev, err := s.next()
				if err != nil {
					break // a stream cut by the request deadline may end anywhere
				}
				if seq >= 0 && *ev.SequenceNumber != seq+1 {
					t.Fatalf("sequence %d after %d", *ev.SequenceNumber, seq)
				}
				seq = *ev.SequenceNumber
			}
		}
	})
}
