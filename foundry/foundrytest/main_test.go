package foundrytest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/foundryq/foundryq/internal/testkit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testKey = "test-key"

// setup starts an emulator with cfg (APIKey defaults to testKey) and an HTTP
// client with its own transport; both are closed when the test ends.
func setup(t testing.TB, cfg Config) (*Server, *http.Client) {
	t.Helper()
	if cfg.APIKey == "" {
		cfg.APIKey = testKey
	}
	srv := NewServer(cfg)
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	return srv, &http.Client{Transport: tr}
}

// testCtx is a context bounded by the test's deadline (or 30s).
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// do sends a request with the test key and returns the response.
func do(t *testing.T, ctx context.Context, c *http.Client, method, url string, body any) *http.Response {
	t.Helper()
	return testkit.Do(t, ctx, c, method, url, body, "api-key", testKey, "Content-Type", "application/json")
}

// readJSON reads resp's body into v and checks the status.
func readJSON(t *testing.T, resp *http.Response, status int, v any) {
	t.Helper()
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, data)
	}
	if v != nil {
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatalf("decode %s: %v", data, err)
		}
	}
}

// apiErr reads an error reply, checking the real error shape.
func apiErr(t *testing.T, resp *http.Response, status int) errorObject {
	t.Helper()
	var raw map[string]map[string]json.RawMessage
	readJSON(t, resp, status, &raw)
	obj, ok := raw["error"]
	if !ok {
		t.Fatalf("no error object in %v", raw)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := obj[k]; !ok {
			t.Fatalf("error object lacks %q: %v", k, raw)
		}
	}
	var e errorObject
	data, _ := json.Marshal(obj)
	_ = json.Unmarshal(data, &e)
	if e.Message == "" {
		t.Fatalf("empty error message")
	}
	return e
}

// wireEvent is a decoded stream event as the tests look at it.
type wireEvent struct {
	Name           string          `json:"-"` // the SSE event: line
	Type           string          `json:"type"`
	SequenceNumber *int            `json:"sequence_number"`
	ItemID         string          `json:"item_id"`
	OutputIndex    int             `json:"output_index"`
	Delta          string          `json:"delta"`
	Text           string          `json:"text"`
	Arguments      string          `json:"arguments"`
	Response       *wireResponse   `json:"response"`
	Item           *wireItem       `json:"item"`
	Raw            json.RawMessage `json:"-"`
}

type wireResponse struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Status            string             `json:"status"`
	Background        bool               `json:"background"`
	Model             string             `json:"model"`
	AgentReference    json.RawMessage    `json:"agent_reference"`
	Metadata          map[string]string  `json:"metadata"`
	Output            []wireItem         `json:"output"`
	Usage             *wireUsage         `json:"usage"`
	Error             *errorDetail       `json:"error"`
	IncompleteDetails *incompleteDetails `json:"incomplete_details"`
	CreatedAt         int64              `json:"created_at"`
}

type wireUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails *struct {
		ReasoningTokens *int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// itemError is an item's error: an mcp_call's object, or an
// mcp_list_tools' string (kept in Message).
type itemError struct{ mcpError }

func (e *itemError) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		return json.Unmarshal(data, &e.Message)
	}
	return json.Unmarshal(data, &e.mcpError)
}

type wireItem struct {
	ID          string       `json:"id"`
	Type        string       `json:"type"`
	Status      string       `json:"status"`
	Name        string       `json:"name"`
	ServerLabel string       `json:"server_label"`
	Arguments   string       `json:"arguments"`
	Output      *string      `json:"output"`
	Error       *itemError   `json:"error"`
	Content     []outputText `json:"content"`
}

// text is the concatenated output_text of a response's message items.
func (r *wireResponse) text() string {
	var b strings.Builder
	for _, it := range r.Output {
		for _, c := range it.Content {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// checkUsage fails unless u has every usage field and adds up.
func checkUsage(t *testing.T, u *wireUsage, outputTokens int) {
	t.Helper()
	switch {
	case u == nil:
		t.Fatal("no usage")
	case u.InputTokensDetails == nil || u.InputTokensDetails.CachedTokens == nil:
		t.Fatal("usage lacks input_tokens_details.cached_tokens")
	case u.OutputTokensDetails == nil || u.OutputTokensDetails.ReasoningTokens == nil:
		t.Fatal("usage lacks output_tokens_details.reasoning_tokens")
	case u.InputTokens <= 0:
		t.Fatalf("input_tokens = %d", u.InputTokens)
	case u.OutputTokens != outputTokens:
		t.Fatalf("output_tokens = %d, want %d", u.OutputTokens, outputTokens)
	case u.TotalTokens != u.InputTokens+u.OutputTokens:
		t.Fatalf("total_tokens = %d, want %d", u.TotalTokens, u.InputTokens+u.OutputTokens)
	}
}

// sseReader is a small, strict SSE reader for the tests.
type sseReader struct {
	br *bufio.Reader
}

func newSSEReader(r io.Reader) *sseReader { return &sseReader{br: bufio.NewReader(r)} }

// next returns the next event; io.EOF at a clean end of stream, any other
// error (io.ErrUnexpectedEOF for a cut connection) otherwise.
func (s *sseReader) next() (wireEvent, error) {
	var name string
	var data []byte
	started := false
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			if err == io.EOF && (started || line != "") {
				return wireEvent{}, io.ErrUnexpectedEOF
			}
			return wireEvent{}, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if !started {
				continue
			}
			var ev wireEvent
			if err := json.Unmarshal(data, &ev); err != nil {
				return wireEvent{}, fmt.Errorf("event %q: bad data %s: %w", name, data, err)
			}
			ev.Name, ev.Raw = name, data
			if ev.Name != ev.Type {
				return wireEvent{}, fmt.Errorf("event line %q but type %q", ev.Name, ev.Type)
			}
			if ev.SequenceNumber == nil {
				return wireEvent{}, fmt.Errorf("event %q has no sequence_number", name)
			}
			return ev, nil
		case strings.HasPrefix(line, "event: "):
			started, name = true, line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			started = true
			if data != nil {
				return wireEvent{}, errors.New("several data lines in one event")
			}
			data = []byte(line[len("data: "):])
		default:
			return wireEvent{}, fmt.Errorf("unexpected line %q", line)
		}
	}
}

// readAll reads events until the stream ends; it returns them and the
// error that ended the stream (nil for a clean end).
func readAll(t *testing.T, body io.ReadCloser) ([]wireEvent, error) {
	t.Helper()
	defer body.Close()
	return newSSEReader(body).rest()
}

// rest reads the remaining events of s (see readAll).
func (s *sseReader) rest() ([]wireEvent, error) {
	var evs []wireEvent
	for {
		ev, err := s.next()
		if err == io.EOF {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

// types lists the event types.
func types(evs []wireEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

// deltas concatenates the output_text deltas.
func deltas(evs []wireEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type == evTextDelta {
			b.WriteString(ev.Delta)
		}
	}
	return b.String()
}

// checkSeq fails unless the events are numbered first, first+1, ...
func checkSeq(t *testing.T, evs []wireEvent, first int) {
	t.Helper()
	for i, ev := range evs {
		if *ev.SequenceNumber != first+i {
			t.Fatalf("event %d (%s) has sequence_number %d, want %d", i, ev.Type, *ev.SequenceNumber, first+i)
		}
	}
}

// createBody is a create request body for the tests.
func createBody(runID string, background, stream bool, md map[string]string) map[string]any {
	meta := map[string]string{"run_id": runID}
	for k, v := range md {
		meta[k] = v
	}
	return map[string]any{
		"model":      "gpt-test",
		"input":      "Say something about " + runID,
		"background": background,
		"store":      true,
		"stream":     stream,
		"metadata":   meta,
	}
}

// getResponse fetches the stored response object.
func getResponse(t *testing.T, ctx context.Context, c *http.Client, srv *Server, id string) wireResponse {
	t.Helper()
	var r wireResponse
	readJSON(t, do(t, ctx, c, "GET", srv.BaseURL()+"responses/"+id, nil), http.StatusOK, &r)
	return r
}

// record returns the emulator's record, failing if it is unknown.
func record(t *testing.T, srv *Server, id string) ResponseRecord {
	t.Helper()
	rec, ok := srv.Record(id)
	if !ok {
		t.Fatalf("no record of %s", id)
	}
	return rec
}
