package foundry

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// fake is a small Responses API server for protocol edge cases. Each test sets
// handle; every request is recorded first.
type fake struct {
	t      *testing.T
	srv    *httptest.Server
	prefix string // path prefix before /responses, e.g. /openai/v1

	mu     sync.Mutex
	reqs   []recorded
	handle func(w http.ResponseWriter, r *http.Request, body []byte)
}

type recorded struct {
	Method string
	Path   string
	Query  string
	Header http.Header
	Body   []byte
}

func newFake(t *testing.T, prefix string, handle func(w http.ResponseWriter, r *http.Request, body []byte)) *fake {
	t.Helper()
	f := &fake{t: t, prefix: prefix, handle: handle}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, recorded{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
		h := f.handle
		f.mu.Unlock()
		h(w, r, body)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) baseURL() string { return f.srv.URL + f.prefix + "/" }

func (f *fake) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

// client returns a Client with an API key for the fake.
func (f *fake) client(t *testing.T, mod ...func(*Config)) *Client {
	t.Helper()
	cfg := Config{BaseURL: f.baseURL(), APIKey: "test-key"}
	for _, m := range mod {
		m(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// sse writes SSE frames and flushes after each.
type sseWriter struct {
	w http.ResponseWriter
}

func startSSE(w http.ResponseWriter) sseWriter {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	return sseWriter{w}
}

// event writes one frame whose event name is the JSON type.
func (s sseWriter) event(v map[string]any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(s.w, "event: %v\ndata: %s\n\n", v["type"], b)
	s.w.(http.Flusher).Flush()
}

func (s sseWriter) raw(text string) {
	io.WriteString(s.w, text)
	s.w.(http.Flusher).Flush()
}

func respObj(id, status string, extra map[string]any) map[string]any {
	m := map[string]any{"id": id, "object": "response", "status": status, "background": true}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// writeRun writes a complete stream: created, n deltas "tok<i> ", completed.
func writeRun(s sseWriter, id string, n int) {
	seq := 0
	next := func() int { seq++; return seq - 1 }
	s.event(map[string]any{"type": "response.created", "sequence_number": next(), "response": respObj(id, "queued", nil)})
	s.event(map[string]any{"type": "response.in_progress", "sequence_number": next(), "response": respObj(id, "in_progress", nil)})
	var text strings.Builder
	for i := 0; i < n; i++ {
		d := fmt.Sprintf("tok%d ", i)
		text.WriteString(d)
		s.event(map[string]any{"type": "response.output_text.delta", "sequence_number": next(), "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": d})
	}
	s.event(map[string]any{"type": "response.completed", "sequence_number": next(), "response": respObj(id, "completed", map[string]any{
		"usage":  map[string]any{"input_tokens": 3, "output_tokens": n, "total_tokens": 3 + n},
		"output": []any{map[string]any{"id": "msg_1", "type": "message", "status": "completed", "content": []any{map[string]any{"type": "output_text", "text": text.String()}}}},
	})})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeAPIError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": msg, "type": "invalid_request_error", "param": nil}})
}

// drain reads a stream to its end and returns the concatenated deltas and event types.
func drain(s *Stream) (text string, types []string) {
	var b strings.Builder
	for s.Next() {
		ev := s.Event()
		types = append(types, ev.Type)
		b.WriteString(ev.Delta)
	}
	return b.String(), types
}

// fakeCred is an azcore.TokenCredential that counts calls and records scopes.
type fakeCred struct {
	mu     sync.Mutex
	calls  int
	scopes [][]string
	ttl    time.Duration
	err    error
	now    func() time.Time
}

func (c *fakeCred) GetToken(ctx context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	c.scopes = append(c.scopes, opts.Scopes)
	if c.err != nil {
		return azcore.AccessToken{}, c.err
	}
	now := time.Now
	if c.now != nil {
		now = c.now
	}
	ttl := c.ttl
	if ttl == 0 {
		ttl = time.Hour
	}
	return azcore.AccessToken{Token: fmt.Sprintf("tok-%d", c.calls), ExpiresOn: now().Add(ttl)}, nil
}

func (c *fakeCred) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}
