package foundry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
)

// Every way the service ends a response, as the emulator reproduces it
// (issue 20, rows 2 to 10), read through the client.

// Row 2: Azure ends a content-filtered stream with response.failed whose
// error is null, then an error event with the reason; the client merges
// them into one terminal response.failed carrying the reason.
func TestEndingContentFilteredStream(t *testing.T) {
	t.Parallel()
	_, c := setup(t, foundrytest.Config{})
	s, err := c.Create(ctxT(t), req("end-filter-stream", map[string]string{"emu_tokens": "6", "emu_content_filter": "stream"}))
	if err != nil {
		t.Fatal(err)
	}
	types, text, last := drainAll(s)
	if s.Err() != nil || !s.Terminal() {
		t.Fatalf("err %v terminal %v, types %v", s.Err(), s.Terminal(), types)
	}
	if text == "" || types[len(types)-1] != foundry.EventFailed {
		t.Fatalf("text %q, types %v: want some text, then response.failed", text, types)
	}
	if last.Status != foundry.StatusFailed || last.Error == nil || last.Error.Code != "content_policy_violation" ||
		!strings.Contains(last.Error.Message, "content management policy") {
		t.Fatalf("last = %+v error %+v", last, last.Error)
	}
	if last.Error.Retryable() {
		t.Error("a content filter failure is retryable")
	}
}

// Row 4: a stream that opens with an error event (insufficient_quota) and
// then response.failed carrying it: one terminal event, with the response
// id and the real code.
func TestEndingErrorFirst(t *testing.T) {
	t.Parallel()
	_, c := setup(t, foundrytest.Config{})
	s, err := c.Create(ctxT(t), req("end-error-first", map[string]string{"emu_error_first": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	types, _, last := drainAll(s)
	if s.Err() != nil || !reflect.DeepEqual(types, []string{foundry.EventFailed}) {
		t.Fatalf("types %v err %v, want one response.failed", types, s.Err())
	}
	if s.ResponseID() == "" || last.ID != s.ResponseID() {
		t.Errorf("response id %q, last %q", s.ResponseID(), last.ID)
	}
	if last.Error == nil || last.Error.Code != "insufficient_quota" || !strings.Contains(last.Error.Message, "quota") {
		t.Fatalf("error = %+v", last.Error)
	}
	if last.Error.Retryable() {
		t.Error("insufficient_quota is retryable")
	}
}

// Row 3: a refusal arrives as response.refusal.delta events and a refusal
// content part.
func TestEndingRefusal(t *testing.T) {
	t.Parallel()
	_, c := setup(t, foundrytest.Config{})
	s, err := c.Create(ctxT(t), req("end-refusal", map[string]string{"emu_refusal": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	var deltas strings.Builder
	var types []string
	var last *foundry.Response
	for s.Next() {
		ev := s.Event()
		types = append(types, ev.Type)
		if ev.Type == foundry.EventRefusalDelta {
			deltas.WriteString(ev.Delta)
		}
		if ev.Response != nil {
			last = ev.Response
		}
	}
	if s.Err() != nil || last == nil || last.Status != foundry.StatusCompleted {
		t.Fatalf("err %v last %+v types %v", s.Err(), last, types)
	}
	if deltas.Len() == 0 || last.Refusal != deltas.String() || last.OutputText != "" {
		t.Fatalf("deltas %q, refusal %q, text %q", deltas.String(), last.Refusal, last.OutputText)
	}
	if !contains(types, foundry.EventRefusalDone) || contains(types, foundry.EventOutputTextDelta) {
		t.Errorf("types %v", types)
	}
}

// Row 5: Azure's 400 for a prompt the content filter refused carries an
// innererror; every answer carries x-request-id and apim-request-id.
func TestEndingContentFilteredPrompt(t *testing.T) {
	t.Parallel()
	_, c := setup(t, foundrytest.Config{})
	_, err := c.Create(ctxT(t), req("end-filter-prompt", map[string]string{"emu_content_filter": "prompt"}))
	e := apiError(t, err)
	if e.StatusCode != 400 || e.Code != "content_filter" || e.Param != "prompt" || e.Inner == nil ||
		e.Inner.Code != "ResponsibleAIPolicyViolation" {
		t.Fatalf("err = %+v inner %+v", e, e.Inner)
	}
	if want := []foundry.FilterCategory{{Name: "violence", Severity: "medium"}}; !reflect.DeepEqual(e.Inner.ContentFilter, want) {
		t.Errorf("categories = %+v, want %+v", e.Inner.ContentFilter, want)
	}
	if e.RequestID == "" || e.APIMRequestID == "" || foundry.RequestIDOf(err) != e.RequestID {
		t.Errorf("request ids %q %q", e.RequestID, e.APIMRequestID)
	}
	if e.Retryable() {
		t.Error("a refused prompt is retryable")
	}

	s, err := c.Create(ctxT(t), req("end-request-id", map[string]string{"emu_tokens": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	drainAll(s)
	if s.RequestID() == "" {
		t.Error("stream without a request id")
	}
	_, err = c.Get(ctxT(t), "resp_unknown")
	if !errors.Is(err, foundry.ErrNotFound) || foundry.RequestIDOf(err) == "" {
		t.Errorf("get: %v, request id %q", err, foundry.RequestIDOf(err))
	}
}

// Row 6: the content filter can end a response incomplete.
func TestEndingIncompleteContentFilter(t *testing.T) {
	t.Parallel()
	_, c := setup(t, foundrytest.Config{})
	s, err := c.Create(ctxT(t), req("end-filter-incomplete", map[string]string{"emu_tokens": "6", "emu_content_filter": "incomplete"}))
	if err != nil {
		t.Fatal(err)
	}
	types, text, last := drainAll(s)
	if s.Err() != nil || types[len(types)-1] != foundry.EventIncomplete || text == "" {
		t.Fatalf("err %v text %q types %v", s.Err(), text, types)
	}
	if last.Status != foundry.StatusIncomplete || last.IncompleteReason != "content_filter" {
		t.Fatalf("last = %+v", last)
	}
}

// Row 7: listing an MCP server's tools fails: response.mcp_list_tools.failed,
// the item carries the reason, the response fails.
func TestEndingListToolsFailed(t *testing.T) {
	t.Parallel()
	_, c := setup(t, foundrytest.Config{})
	r := req("end-list-fail", map[string]string{"emu_list_tools_fail": "1"})
	r.Tools = []json.RawMessage{json.RawMessage(`{"type":"mcp","server_label":"docs","server_url":"https://mcp.test","require_approval":"never"}`)}
	s, err := c.Create(ctxT(t), r)
	if err != nil {
		t.Fatal(err)
	}
	types, _, last := drainAll(s)
	if s.Err() != nil || !contains(types, foundry.EventMCPListToolsFailed) || last.Status != foundry.StatusFailed {
		t.Fatalf("err %v types %v last %+v", s.Err(), types, last)
	}
	want := "Error retrieving tool list from MCP server: 'docs'. Http status code: 424 (Failed Dependency)"
	if len(last.Output) != 1 || last.Output[0].Type != foundry.ItemMCPListTools || last.Output[0].Error != want {
		t.Fatalf("output = %+v", last.Output)
	}
}

// Row 8: an error with x-should-retry: false is not retryable, whatever
// its status; true makes any status retryable (as openai-go decides).
func TestEndingShouldRetry(t *testing.T) {
	t.Parallel()
	_, c := setup(t, foundrytest.Config{})
	for _, tt := range []struct {
		status, header string
		retryable      bool
	}{
		{"503", "", true},
		{"503", "false", false},
		{"400", "true", true},
	} {
		md := map[string]string{"emu_create_status": tt.status}
		if tt.header != "" {
			md["emu_should_retry"] = tt.header
		}
		_, err := c.Create(ctxT(t), req("end-should-retry-"+tt.status+tt.header, md))
		if e := apiError(t, err); e.Retryable() != tt.retryable || e.ShouldRetry != tt.header {
			t.Errorf("%s x-should-retry %q: retryable %v (header %q)", tt.status, tt.header, e.Retryable(), e.ShouldRetry)
		}
	}
}

// Row 9: keepalive events also come in the middle of a stream; they carry
// no state and do not move the resume cursor.
func TestEndingKeepalivesMidStream(t *testing.T) {
	t.Parallel()
	_, c := setup(t, foundrytest.Config{})
	s, err := c.Create(ctxT(t), req("end-keepalive", map[string]string{"emu_tokens": "6", "emu_keepalive_every": "2"}))
	if err != nil {
		t.Fatal(err)
	}
	keepalives, afterText := 0, false
	var text strings.Builder
	for s.Next() {
		ev := s.Event()
		switch ev.Type {
		case foundry.EventOutputTextDelta:
			afterText = true
			text.WriteString(ev.Delta)
		case foundry.EventKeepalive:
			if afterText {
				keepalives++
				if seq, _ := s.LastSeq(); seq == ev.SequenceNumber {
					t.Errorf("a keepalive moved the cursor to %d", seq)
				}
			}
		}
	}
	if s.Err() != nil || keepalives != 2 || text.Len() == 0 {
		t.Fatalf("err %v, %d keepalives between deltas, text %q", s.Err(), keepalives, text.String())
	}
}

// Row 10: the client asks for no obfuscation by default; the emulator pads
// deltas with it unless asked not to.
func TestEndingObfuscation(t *testing.T) {
	t.Parallel()
	for _, include := range []bool{false, true} {
		srv, c := setup(t, foundrytest.Config{}, func(cfg *foundry.Config) { cfg.IncludeObfuscation = include })
		runID := "end-obfuscation"
		s, err := c.Create(ctxT(t), req(runID, map[string]string{"emu_tokens": "3"}))
		if err != nil {
			t.Fatal(err)
		}
		deltas, padded := 0, 0
		for s.Next() {
			if ev := s.Event(); ev.Type == foundry.EventOutputTextDelta {
				deltas++
				if bytes.Contains(ev.Raw, []byte(`"obfuscation":"`)) {
					padded++
				}
			}
		}
		want := 0
		if include {
			want = deltas
		}
		if s.Err() != nil || deltas != 3 || padded != want {
			t.Errorf("include %v: err %v, %d deltas, %d with obfuscation", include, s.Err(), deltas, padded)
		}
		body := string(srv.CreateRequests(runID)[0])
		if sent := strings.Contains(body, `"stream_options":{"include_obfuscation":false}`); sent == include {
			t.Errorf("include %v: body %s", include, body)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestTrailingFrameWaitIsBounded: after a response.failed whose error is
// null the client waits for the error frame that may complete it, but no
// longer than TrailingFrameWait: a server that sends nothing more and
// holds the connection open does not hold the stream. It ends with the
// failure as its terminal event, and the connection is closed.
func TestTrailingFrameWaitIsBounded(t *testing.T) {
	t.Parallel()
	url, gone := sseServer(t, "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,"+
		"\"response\":{\"id\":\"resp_held\",\"object\":\"response\",\"status\":\"in_progress\",\"background\":true}}\n\n"+
		"event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":1,"+
		"\"response\":{\"id\":\"resp_held\",\"object\":\"response\",\"status\":\"failed\",\"background\":true,\"error\":null}}\n\n")
	// The idle timeout (90 s by default) and the context are far beyond
	// the bound: only TrailingFrameWait can end the wait.
	c, err := foundry.New(foundry.Config{BaseURL: url, APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := c.Resume(ctx, "resp_held", -1)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		types []string
		last  *foundry.Response
		took  time.Duration
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		types, _, last := drainAll(s)
		done <- result{types, last, time.Since(start)}
	}()
	const slack = 10 * time.Second // a loaded machine; the server holds the connection for ever
	var r result
	select {
	case r = <-done:
	case <-time.After(foundry.TrailingFrameWait + slack):
		_ = s.Close()
		<-done
		t.Fatalf("the stream still waited %s after a response.failed with a null error (bound %s)", foundry.TrailingFrameWait+slack, foundry.TrailingFrameWait)
	}
	if r.took < foundry.TrailingFrameWait || r.took > foundry.TrailingFrameWait+slack {
		t.Errorf("the stream ended after %s, want the bound %s (it waits for the error frame, no longer)", r.took, foundry.TrailingFrameWait)
	}
	if s.Err() != nil || !s.Terminal() || !reflect.DeepEqual(r.types, []string{foundry.EventCreated, foundry.EventFailed}) ||
		r.last == nil || r.last.Status != foundry.StatusFailed || r.last.Error != nil || r.last.ID != "resp_held" {
		t.Fatalf("err %v, terminal %t, types %v, last %+v: want the failure as the terminal event", s.Err(), s.Terminal(), r.types, r.last)
	}
	select {
	case <-gone:
	case <-time.After(15 * time.Second):
		t.Fatal("the server never saw the connection close")
	}
}
