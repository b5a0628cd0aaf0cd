package foundry_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
)

const emuKey = "emu-key"

// setup starts an emulator and a client for it with an API key.
func setup(t *testing.T, cfg foundrytest.Config, mod ...func(*foundry.Config)) (*foundrytest.Server, *foundry.Client) {
	t.Helper()
	if cfg.APIKey == "" {
		cfg.APIKey = emuKey
	}
	srv := foundrytest.NewServer(cfg)
	t.Cleanup(srv.Close)
	fc := foundry.Config{BaseURL: srv.BaseURL(), APIKey: emuKey}
	for _, m := range mod {
		m(&fc)
	}
	c, err := foundry.New(fc)
	if err != nil {
		t.Fatal(err)
	}
	return srv, c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func req(runID string, meta map[string]string) foundry.CreateRequest {
	m := map[string]string{"run_id": runID}
	for k, v := range meta {
		m[k] = v
	}
	return foundry.CreateRequest{Model: "gpt-test", Input: json.RawMessage(`"tell me a story"`), Metadata: m}
}

// read drains s and returns the deltas, the sequence numbers and the last response snapshot.
func read(t *testing.T, s *foundry.Stream) (text string, seqs []int64, last *foundry.Response) {
	t.Helper()
	var b strings.Builder
	for s.Next() {
		ev := s.Event()
		if !ev.HasSeq {
			t.Errorf("emulator event %s without sequence_number", ev.Type)
		}
		seqs = append(seqs, ev.SequenceNumber)
		b.WriteString(ev.Delta)
		if ev.Response != nil {
			last = ev.Response
		}
	}
	return b.String(), seqs, last
}

func TestEmulatorRunToCompletion(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, foundrytest.Config{})
	s, err := c.Create(ctxT(t), req("run-complete", map[string]string{"emu_tokens": "25"}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	text, seqs, last := read(t, s)
	if err := s.Err(); err != nil || !s.Terminal() {
		t.Fatalf("Err = %v, Terminal = %v", err, s.Terminal())
	}
	for i, seq := range seqs {
		if seq != int64(i) {
			t.Fatalf("sequence numbers not contiguous from 0: %v", seqs)
		}
	}
	if seq, _ := s.LastSeq(); seq != int64(len(seqs)-1) {
		t.Errorf("LastSeq = %d, want %d", seq, len(seqs)-1)
	}
	if last == nil || last.Status != foundry.StatusCompleted || last.Usage == nil || last.Usage.OutputTokens != 25 {
		t.Fatalf("final response = %+v", last)
	}
	if last.OutputText != text {
		t.Errorf("final OutputText %q != deltas %q", last.OutputText, text)
	}
	got, err := c.Get(ctxT(t), s.ResponseID())
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != foundry.StatusCompleted || got.OutputText != text || !got.Background || got.Metadata["run_id"] != "run-complete" {
		t.Errorf("Get = %+v", got)
	}
	rec, _ := srv.Record(s.ResponseID())
	if rec.Text != text {
		t.Errorf("emulator text %q != streamed %q", rec.Text, text)
	}
}

// TestEmulatorRequestShape checks on the emulator's side what reached "Foundry":
// background, stream and store set, model or agent reference, metadata.
func TestEmulatorRequestShape(t *testing.T) {
	t.Parallel()
	for _, field := range []string{"", "agent"} {
		// The service refuses the old "agent" name; an emulator told to accept
		// it stands for a service that takes the name foundry.Config.AgentField
		// is set to.
		srv, c := setup(t, foundrytest.Config{DefaultTokens: 2, AcceptDeprecatedAgentField: field == "agent"},
			func(cfg *foundry.Config) { cfg.AgentField = field })
		prev, err := c.Create(ctxT(t), req("run-prev-"+field, nil)) // a response to continue
		if err != nil {
			t.Fatal(err)
		}
		read(t, prev)
		r := req("run-agent-"+field, nil)
		r.Model = ""
		r.Agent = &foundry.AgentRef{Name: "helper", Version: "2"}
		r.Options = map[string]json.RawMessage{"previous_response_id": json.RawMessage(`"` + prev.ResponseID() + `"`)}
		s, err := c.Create(ctxT(t), r)
		if err != nil {
			t.Fatal(err)
		}
		read(t, s)
		if s.Err() != nil {
			t.Fatal(s.Err())
		}
		bodies := srv.CreateRequests("run-agent-" + field)
		if len(bodies) != 1 {
			t.Fatalf("creates = %d", len(bodies))
		}
		var got map[string]any
		json.Unmarshal(bodies[0], &got)
		name := field
		if name == "" {
			name = "agent_reference"
		}
		ref, _ := got[name].(map[string]any)
		if ref["type"] != "agent_reference" || ref["name"] != "helper" || ref["version"] != "2" || got["model"] != nil {
			t.Errorf("%s: agent reference = %v (body %s)", name, got[name], bodies[0])
		}
		if got["background"] != true || got["stream"] != true || got["store"] != true || got["previous_response_id"] != prev.ResponseID() {
			t.Errorf("%s: body = %s", name, bodies[0])
		}
	}
}

// TestEmulatorProjectEndpoint serves the emulator under a project path: the
// client must send v1 paths below it (never /openai/deployments or ?api-version).
func TestEmulatorProjectEndpoint(t *testing.T) {
	t.Parallel()
	h := foundrytest.NewHandler(foundrytest.Config{APIKey: emuKey, DefaultTokens: 3})
	var paths sync.Map
	hs := httptest.NewServer(http.StripPrefix("/api/projects/proj", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths.Store(r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery, true)
		h.ServeHTTP(w, r)
	})))
	t.Cleanup(func() { hs.Close(); h.Close() })
	c, err := foundry.New(foundry.Config{BaseURL: hs.URL + "/api/projects/proj/openai/v1", APIKey: emuKey})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Create(ctxT(t), req("run-project", nil))
	if err != nil {
		t.Fatal(err)
	}
	text, _, _ := read(t, s)
	if s.Err() != nil || text == "" {
		t.Fatalf("stream: %v %q", s.Err(), text)
	}
	if _, err := c.Get(ctxT(t), s.ResponseID()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctxT(t), s.ResponseID()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"POST /openai/v1/responses?",
		"GET /openai/v1/responses/" + s.ResponseID() + "?",
		"POST /openai/v1/responses/" + s.ResponseID() + "/cancel?",
	} {
		if _, ok := paths.Load(want); !ok {
			var seen []string
			paths.Range(func(k, _ any) bool { seen = append(seen, k.(string)); return true })
			t.Errorf("missing request %q; saw %v", want, seen)
		}
	}
}

func TestEmulatorAuth(t *testing.T) {
	t.Parallel()
	srv, _ := setup(t, foundrytest.Config{DefaultTokens: 2})
	bad, _ := foundry.New(foundry.Config{BaseURL: srv.BaseURL(), APIKey: "wrong"})
	_, err := bad.Create(ctxT(t), req("run-badkey", nil))
	var apiErr *foundry.APIError
	if !errors.Is(err, foundry.ErrUnauthorized) || !errors.As(err, &apiErr) || apiErr.Message == "" {
		t.Errorf("wrong key: %v", err)
	}

	// Entra ID: the emulator accepts its key as a bearer token.
	cred := &keyCred{token: emuKey}
	c, err := foundry.New(foundry.Config{BaseURL: srv.BaseURL(), Credential: cred})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Create(ctxT(t), req("run-entra", nil))
	if err != nil {
		t.Fatal(err)
	}
	read(t, s)
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
	if _, err := c.Get(ctxT(t), s.ResponseID()); err != nil {
		t.Fatal(err)
	}
	if n := cred.calls.Load(); n != 1 {
		t.Errorf("GetToken calls = %d, want 1", n)
	}
	if got := cred.scope.Load(); got != foundry.ScopeCognitiveServices {
		t.Errorf("scope = %v", got)
	}
}

type keyCred struct {
	token string
	calls atomic.Int32
	scope atomic.Value
}

func (k *keyCred) GetToken(ctx context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	k.calls.Add(1)
	k.scope.Store(strings.Join(opts.Scopes, " "))
	return azcore.AccessToken{Token: k.token, ExpiresOn: time.Now().Add(time.Hour)}, nil
}

// TestEmulatorCreateNeverRetried: the emulator answers the create with 500 or
// 429 (Retry-After: 1); exactly one create must reach it.
func TestEmulatorCreateNeverRetried(t *testing.T) {
	t.Parallel()
	for _, status := range []string{"500", "503", "429"} {
		t.Run(status, func(t *testing.T) {
			t.Parallel()
			srv, c := setup(t, foundrytest.Config{})
			run := "run-noretry-" + status
			_, err := c.Create(ctxT(t), req(run, map[string]string{"emu_create_status": status}))
			var apiErr *foundry.APIError
			if !errors.As(err, &apiErr) || apiErr.StatusCode == 0 || apiErr.Message == "" {
				t.Fatalf("err = %v", err)
			}
			if !strings.Contains(err.Error(), apiErr.Message) {
				t.Errorf("Error() %q drops the server message %q", err.Error(), apiErr.Message)
			}
			if status == "429" && (!errors.Is(err, foundry.ErrRateLimited) || apiErr.RetryAfter != time.Second) {
				t.Errorf("429: %v, RetryAfter %v", err, apiErr.RetryAfter)
			}
			if n := len(srv.CreateRequests(run)); n != 1 {
				t.Errorf("creates received = %d, want 1", n)
			}
			if n := srv.Stats().ResponsesCreated; n != 0 {
				t.Errorf("responses created = %d", n)
			}
		})
	}
}

// TestEmulatorTruncatedThenResume: the create stream is cut (unexpected EOF);
// Stream reports ErrStreamTruncated (not a nil error, as openai-go would) and the
// resume with starting_after=LastSeq (stream=true in the query) delivers the rest:
// no token lost, none repeated.
func TestEmulatorTruncatedThenResume(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, foundrytest.Config{})
	s, err := c.Create(ctxT(t), req("run-drop", map[string]string{"emu_tokens": "30", "emu_drop_after": "12", "emu_token_ms": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	first, seqs, _ := read(t, s)
	if !errors.Is(s.Err(), foundry.ErrStreamTruncated) || s.Terminal() {
		t.Fatalf("Err = %v, Terminal = %v; want ErrStreamTruncated", s.Err(), s.Terminal())
	}
	last, ok := s.LastSeq()
	if !ok || last != seqs[len(seqs)-1] || len(seqs) != 12 {
		t.Fatalf("LastSeq = %d, %v after %d events", last, ok, len(seqs))
	}
	id := s.ResponseID()

	r, err := c.Resume(ctxT(t), id, last)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rest, seqs2, final := read(t, r)
	if r.Err() != nil || !r.Terminal() {
		t.Fatalf("resume: Err = %v, Terminal = %v", r.Err(), r.Terminal())
	}
	if seqs2[0] != last+1 {
		t.Errorf("resume started at %d, want %d", seqs2[0], last+1)
	}
	if final.Status != foundry.StatusCompleted || first+rest != final.OutputText {
		t.Errorf("text after resume = %q + %q, final %q", first, rest, final.OutputText)
	}
	if rec, _ := srv.Record(id); rec.Text != first+rest {
		t.Errorf("emulator text %q", rec.Text)
	}
	if n := srv.Stats().ResponsesCreated; n != 1 {
		t.Errorf("responses created = %d, want 1", n)
	}
}

// TestEmulatorResumeExpired moves the emulator clock past the resume window.
func TestEmulatorResumeExpired(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	_, c := setup(t, foundrytest.Config{Clock: clock, DefaultTokens: 3})
	s, err := c.Create(ctxT(t), req("run-expired", nil))
	if err != nil {
		t.Fatal(err)
	}
	read(t, s)
	offset.Store(int64(6 * time.Minute))
	_, err = c.Resume(ctxT(t), s.ResponseID(), 0)
	if !errors.Is(err, foundry.ErrResumeExpired) {
		t.Fatalf("err = %v, want ErrResumeExpired", err)
	}
	if !strings.Contains(err.Error(), "5 minutes") {
		t.Errorf("server message lost: %v", err)
	}
	// Polling still works.
	if got, err := c.Get(ctxT(t), s.ResponseID()); err != nil || got.Status != foundry.StatusCompleted {
		t.Errorf("Get after expiry = %+v, %v", got, err)
	}
}

func TestEmulatorNotFound(t *testing.T) {
	t.Parallel()
	_, c := setup(t, foundrytest.Config{})
	ctx := ctxT(t)
	if _, err := c.Get(ctx, "resp_missing"); !errors.Is(err, foundry.ErrNotFound) {
		t.Errorf("Get: %v", err)
	}
	if _, err := c.Cancel(ctx, "resp_missing"); !errors.Is(err, foundry.ErrNotFound) {
		t.Errorf("Cancel: %v", err)
	}
	if _, err := c.Resume(ctx, "resp_missing", 0); !errors.Is(err, foundry.ErrNotFound) {
		t.Errorf("Resume: %v", err)
	}
}

// TestEmulatorCancel cancels a slow run mid-stream (server-side), then again
// (idempotent), and cancels a finished run (its final state comes back).
func TestEmulatorCancel(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, foundrytest.Config{})
	ctx := ctxT(t)
	s, err := c.Create(ctx, req("run-cancel", map[string]string{"emu_tokens": "1000", "emu_token_ms": "20"}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	deltas := 0
	var cancelled *foundry.Response
	for s.Next() {
		if s.Event().Type == foundry.EventOutputTextDelta {
			deltas++
			if deltas == 3 {
				if cancelled, err = c.Cancel(ctx, s.ResponseID()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if cancelled == nil || cancelled.Status != foundry.StatusCancelled {
		t.Fatalf("cancel reply = %+v", cancelled)
	}
	// The emulator sends no terminal event after a cancel: the stream ends truncated.
	if !errors.Is(s.Err(), foundry.ErrStreamTruncated) {
		t.Errorf("stream after cancel: %v", s.Err())
	}
	again, err := c.Cancel(ctx, s.ResponseID())
	if err != nil || again.Status != foundry.StatusCancelled {
		t.Errorf("second cancel = %+v, %v", again, err)
	}
	if got, err := c.Get(ctx, s.ResponseID()); err != nil || got.Status != foundry.StatusCancelled {
		t.Errorf("Get = %+v, %v", got, err)
	}
	if st := srv.Stats(); st.TokensAfterCancel != 0 || st.ResponsesCancelled != 1 {
		t.Errorf("stats: %+v", st)
	}

	done, err := c.Create(ctx, req("run-cancel-done", map[string]string{"emu_tokens": "2"}))
	if err != nil {
		t.Fatal(err)
	}
	read(t, done)
	got, err := c.Cancel(ctx, done.ResponseID())
	if err != nil || got.Status != foundry.StatusCompleted || got.Usage == nil {
		t.Errorf("cancel of a finished response = %+v, %v", got, err)
	}
}

// TestEmulatorToolAndFailure: MCP tool items are decoded, and a failed run ends
// with response.failed carrying the error.
func TestEmulatorToolAndFailure(t *testing.T) {
	t.Parallel()
	_, c := setup(t, foundrytest.Config{DefaultTokens: 3})
	ctx := ctxT(t)
	r := req("run-tool", map[string]string{"emu_tool_ms": "10"})
	r.Tools = []json.RawMessage{json.RawMessage(`{"type":"mcp","server_label":"files","server_url":"https://mcp.example","allowed_tools":["read_file"],"require_approval":"never"}`)}
	s, err := c.Create(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	var added, done *foundry.OutputItem
	var final *foundry.Response
	for s.Next() {
		ev := s.Event()
		switch {
		case ev.Type == foundry.EventOutputItemAdded && ev.Item.Type == "mcp_call":
			it := *ev.Item
			added = &it
		case ev.Type == foundry.EventOutputItemDone && ev.Item.Type == "mcp_call":
			it := *ev.Item
			done = &it
		case ev.Terminal():
			final = ev.Response
		}
	}
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
	if added == nil || added.ServerLabel != "files" || added.Name != "read_file" || added.ID == "" {
		t.Errorf("mcp_call added = %+v", added)
	}
	if done == nil || done.Status != "completed" || done.ID != added.ID {
		t.Errorf("mcp_call done = %+v", done)
	}
	if final == nil || len(final.Output) != 3 || final.Output[0].Type != foundry.ItemMCPListTools ||
		final.Output[0].ServerLabel != "files" || len(final.Output[0].Tools) != 1 || final.Output[0].Tools[0] != "read_file" ||
		final.Output[1].Type != foundry.ItemMCPCall || final.Output[2].Type != foundry.ItemMessage {
		t.Errorf("final output = %+v", final)
	}

	f, err := c.Create(ctx, req("run-fail", map[string]string{"emu_fail_after": "4"}))
	if err != nil {
		t.Fatal(err)
	}
	_, _, last := read(t, f)
	if f.Err() != nil || !f.Terminal() || f.Event().Type != foundry.EventFailed {
		t.Fatalf("failed run: Err = %v, last type %s", f.Err(), f.Event().Type)
	}
	if last.Status != foundry.StatusFailed || last.Error == nil || last.Error.Code != "server_error" || last.Error.Message == "" {
		t.Errorf("failed response = %+v", last)
	}

	inc, err := c.Create(ctx, foundry.CreateRequest{Model: "m", Input: json.RawMessage(`"x"`), MaxOutputTokens: 16, Metadata: map[string]string{"emu_tokens": "40"}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, last = read(t, inc)
	if inc.Err() != nil || last.Status != foundry.StatusIncomplete || last.IncompleteReason != "max_output_tokens" {
		t.Errorf("incomplete run: %v %+v", inc.Err(), last)
	}
}

// TestEmulatorContextCancelStopsReading: cancelling ctx ends the read with the
// cause; the background response goes on server-side (closing is not cancelling).
func TestEmulatorContextCancelStopsReading(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, foundrytest.Config{})
	ctx, cancel := context.WithCancelCause(ctxT(t))
	defer cancel(nil)
	s, err := c.Create(ctx, req("run-ctx", map[string]string{"emu_tokens": "100", "emu_token_ms": "5"}))
	if err != nil {
		t.Fatal(err)
	}
	cause := errors.New("worker shutting down")
	for s.Next() {
		if s.Event().Type == foundry.EventOutputTextDelta {
			cancel(cause)
		}
	}
	if !errors.Is(s.Err(), cause) {
		t.Fatalf("Err = %v, want the cause", s.Err())
	}
	rec, _ := srv.Record(s.ResponseID())
	if rec.Status == foundry.StatusCancelled {
		t.Errorf("dropping the stream cancelled the response: %+v", rec)
	}
	// Clean up: cancel it for real.
	if _, err := c.Cancel(ctxT(t), s.ResponseID()); err != nil {
		t.Fatal(err)
	}
}

// TestEmulatorOverCleartextHTTP2: a run streamed and cancelled over HTTP/2
// without TLS, as foundryq bench --h2c runs the worker against the emulator.
func TestEmulatorOverCleartextHTTP2(t *testing.T) {
	t.Parallel()
	_, c := setup(t, foundrytest.Config{}, func(fc *foundry.Config) { fc.CleartextHTTP2 = true })
	defer c.CloseIdleConnections()
	s, err := c.Create(ctxT(t), req("run-h2c", map[string]string{"emu_tokens": "25"}))
	if err != nil {
		t.Fatal(err)
	}
	text, _, last := read(t, s)
	s.Close()
	if err := s.Err(); err != nil || last == nil || last.Status != foundry.StatusCompleted || last.OutputText != text {
		t.Fatalf("Err = %v, last = %+v", err, last)
	}
	long, err := c.Create(ctxT(t), req("run-h2c-cancel", map[string]string{"emu_tokens": "100000", "emu_token_ms": "5"}))
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close()
	if !long.Next() || long.ResponseID() == "" {
		t.Fatalf("no first event: %v", long.Err())
	}
	got, err := c.Cancel(ctxT(t), long.ResponseID())
	if err != nil || got.Status != foundry.StatusCancelled {
		t.Fatalf("cancel: %+v, %v", got, err)
	}
}
