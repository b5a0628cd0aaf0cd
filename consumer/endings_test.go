package consumer_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
)

// Every way Foundry ends a response, reported truthfully (issue 20, rows
// 2 to 10), each reproduced by an emulator directive.

// run submits one run with md to a fresh worker and returns its events,
// checked well formed.
func (e *env) endRun(runID string, md map[string]string, mod ...func(*events.RunRequest)) []events.RunEvent {
	e.t.Helper()
	req := request(runID, md)
	for _, m := range mod {
		m(&req)
	}
	e.submit(req)
	evs := e.collect(runID, 30*time.Second)
	checkWellFormed(e.t, evs)
	return evs
}

// failure checks that the run ended run.failed with code, not retryable,
// and returns its error.
func failure(t *testing.T, evs []events.RunEvent, code string) *events.Error {
	t.Helper()
	last := evs[len(evs)-1]
	if last.Type != events.TypeRunFailed || last.Error == nil || last.Error.Code != code {
		t.Fatalf("run ended %s %+v, want run.failed %s", last.Type, last.Error, code)
	}
	if last.Error.Retryable == nil || *last.Error.Retryable {
		t.Errorf("%s: retryable %v", code, last.Error.Retryable)
	}
	return last.Error
}

// Row 2: a content-filtered stream (response.failed with error null, then
// an error event) ends content_filter with the reason, not
// upstream_failed "Foundry reported status failed".
func TestContentFilteredStreamEndsContentFilter(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "filter-stream"})
	evs := e.endRun("filter-stream-1", map[string]string{"emu_tokens": "6", "emu_content_filter": "stream"})
	err := failure(t, evs, events.CodeContentFilter)
	if !strings.Contains(err.Message, "content management policy") || err.RequestID == "" {
		t.Errorf("error = %+v", err)
	}
	if text(evs) == "" || text(evs) != e.emulatorText("filter-stream-1") {
		t.Errorf("text %q, emulator %q", text(evs), e.emulatorText("filter-stream-1"))
	}
}

// Row 3: a refusal is relayed as refusal.delta events and ends
// run.completed with refusal true.
func TestRefusalIsRelayed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "refusal"})
	evs := e.endRun("refusal-1", map[string]string{"emu_refusal": "1"})
	var refusal strings.Builder
	for _, ev := range evs {
		if ev.Type == events.TypeRefusalDelta {
			refusal.WriteString(ev.Text)
		}
	}
	last := evs[len(evs)-1]
	if last.Type != events.TypeRunCompleted || !last.Refusal || last.Status != "completed" {
		t.Fatalf("run ended %+v", last)
	}
	if refusal.Len() == 0 || refusal.String() != e.emulatorText("refusal-1") || text(evs) != "" {
		t.Errorf("refusal %q, emulator %q, text %q", refusal.String(), e.emulatorText("refusal-1"), text(evs))
	}
}

// Row 4: a stream that opens with an error event (insufficient_quota)
// then response.failed: the real code, not upstream_lost, and not retried.
func TestErrorFirstReportsTheRealError(t *testing.T) {
	t.Parallel()
	e := setup(t, withProvision(consumer.ProvisionConfig{MaxDeliver: 5}))
	e.startWorker(consumer.Config{WorkerID: "error-first", RetryDelay: 50 * time.Millisecond})
	evs := e.endRun("error-first-1", map[string]string{"emu_error_first": "1"})
	err := failure(t, evs, "insufficient_quota")
	if !strings.Contains(err.Message, "quota") || err.RequestID == "" || evs[len(evs)-1].ResponseID == "" {
		t.Errorf("error = %+v, response id %q", err, evs[len(evs)-1].ResponseID)
	}
	if n := e.responses("error-first-1"); n != 1 {
		t.Errorf("emulator created %d responses, want 1", n)
	}
}

// Row 5: a prompt the content filter refuses (HTTP 400 with an innererror)
// ends content_filter with the category and severity, and the request id.
func TestContentFilteredPromptEndsContentFilter(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "filter-prompt"})
	evs := e.endRun("filter-prompt-1", map[string]string{"emu_content_filter": "prompt"})
	err := failure(t, evs, events.CodeContentFilter)
	if !strings.Contains(err.Message, "(filtered: violence: medium)") || err.RequestID == "" {
		t.Errorf("error = %+v", err)
	}
	if code := e.deadLetter("filter-prompt-1").Header.Get(events.HeaderDeadCode); code != events.CodeContentFilter {
		t.Errorf("dead letter code %q", code)
	}
}

// Row 6: the content filter can end a response incomplete: run.completed
// keeps status incomplete and the reason.
func TestIncompleteContentFilterKeepsTheStatus(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "filter-incomplete"})
	evs := e.endRun("filter-incomplete-1", map[string]string{"emu_tokens": "6", "emu_content_filter": "incomplete"})
	last := evs[len(evs)-1]
	if last.Type != events.TypeRunCompleted || last.Status != "incomplete" || last.IncompleteReason != "content_filter" {
		t.Fatalf("run ended %+v", last)
	}
}

// Row 7: an MCP server whose tools cannot be listed ends the run with its
// own code and Foundry's message.
func TestListToolsFailureHasItsOwnCode(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "list-fail"})
	evs := e.endRun("list-fail-1", map[string]string{"emu_list_tools_fail": "1"}, func(r *events.RunRequest) {
		r.Tools = []json.RawMessage{json.RawMessage(`{"type":"mcp","server_label":"docs","server_url":"https://mcp.test","require_approval":"never"}`)}
	})
	err := failure(t, evs, events.CodeMCPListToolsFailed)
	if err.Message != "Error retrieving tool list from MCP server: 'docs'. Http status code: 424 (Failed Dependency)" {
		t.Errorf("message %q", err.Message)
	}
}

// Row 8: a 503 with x-should-retry: false is not retried.
func TestShouldRetryFalseIsNotRetried(t *testing.T) {
	t.Parallel()
	e := setup(t, withProvision(consumer.ProvisionConfig{MaxDeliver: 5}))
	e.startWorker(consumer.Config{WorkerID: "no-retry", RetryDelay: 50 * time.Millisecond})
	evs := e.endRun("no-retry-1", map[string]string{"emu_create_status": "503", "emu_should_retry": "false"})
	if err := failure(t, evs, events.CodeUpstreamError); err.RequestID == "" {
		t.Errorf("error = %+v", err)
	}
	if n := len(e.emu.CreateRequests("no-retry-1")); n != 1 {
		t.Errorf("%d creates, want 1", n)
	}
}

// Row 9: keepalives in the middle of the text are ignored: the run
// completes with the whole text. Row 10: the worker asks for no
// obfuscation.
func TestKeepalivesMidStreamAndNoObfuscation(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "keepalive"})
	evs := e.endRun("keepalive-1", map[string]string{"emu_tokens": "12", "emu_keepalive_every": "1"})
	if last := evs[len(evs)-1]; last.Type != events.TypeRunCompleted || last.Status != "completed" {
		t.Fatalf("run ended %+v", last)
	}
	if text(evs) != e.emulatorText("keepalive-1") {
		t.Errorf("text %q, emulator %q", text(evs), e.emulatorText("keepalive-1"))
	}
	var body struct {
		StreamOptions map[string]any `json:"stream_options"`
	}
	if err := json.Unmarshal(e.emu.CreateRequests("keepalive-1")[0], &body); err != nil || body.StreamOptions["include_obfuscation"] != false {
		t.Errorf("stream_options = %v (%v)", body.StreamOptions, err)
	}
}
