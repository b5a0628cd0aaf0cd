package consumer_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/testkit"
)

// logBuffer collects a worker's JSON log lines.
type logBuffer struct{ testkit.Buffer }

// lines returns the lines that mention runID anywhere, decoded.
func (b *logBuffer) lines(t *testing.T, runID string) []map[string]any {
	t.Helper()
	raw := b.String()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(raw), "\n") {
		if !strings.Contains(l, runID) {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func (b *logBuffer) waitFor(t *testing.T, runID, msg string) {
	t.Helper()
	testkit.Eventually(t, 20*time.Second, "log line "+msg+" of "+runID, func() bool {
		for _, l := range b.lines(t, runID) {
			if l["message"] == msg {
				return true
			}
		}
		return false
	})
}

// TestRunLogs: every line about a run names it (run_id), with the worker
// and the attempt, and the response once known; a normal run logs a
// handful of lines at info, the last one saying how it ended and what it
// cost.
func TestRunLogs(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var logs logBuffer
	log := zerolog.New(&logs).Level(zerolog.InfoLevel)
	e.startWorker(consumer.Config{WorkerID: "logw", Logger: &log})

	e.submit(request("logs-1", nil))
	last := checkWellFormed(t, e.collect("logs-1", 20*time.Second))
	if last.Type != events.TypeRunCompleted || last.Usage == nil {
		t.Fatalf("run ended %+v", last)
	}
	logs.waitFor(t, "logs-1", "run ended")
	lines := logs.lines(t, "logs-1")
	if len(lines) < 2 || len(lines) > 5 {
		t.Fatalf("a normal run logged %d lines, want a handful (2-5): %v", len(lines), lines)
	}
	if lines[0]["message"] != "run taken" {
		t.Fatalf("first line %v, want run taken", lines[0])
	}
	for i, l := range lines {
		if l["run_id"] != "logs-1" || l["worker"] != "logw" || l["attempt"] != float64(1) {
			t.Fatalf("log line %v lacks run_id, worker or attempt", l)
		}
		if i > 0 && l["response_id"] != last.ResponseID {
			t.Fatalf("log line %v after the create lacks response_id %s", l, last.ResponseID)
		}
		if l["level"] != "info" {
			t.Fatalf("a normal run logged at %v: %v", l["level"], l)
		}
	}
	t.Logf("a normal run logged %d lines at info: %v", len(lines), lines)
	end := lines[len(lines)-1]
	if end["message"] != "run ended" || end["type"] != string(events.TypeRunCompleted) || end["took"] == nil ||
		end["output_tokens"] != float64(last.Usage.OutputTokens) || end["input_tokens"] != float64(last.Usage.InputTokens) {
		t.Fatalf("last line %v, want run ended with its type, duration and usage %+v", end, *last.Usage)
	}

	// A cancelled run: the lines of the answering side name the run too.
	e.submit(slow("logs-c"))
	e.waitEvent("logs-c", events.TypeTextDelta, 20*time.Second)
	e.cancel("logs-c")
	logs.waitFor(t, "logs-c", "run ended")
	logs.waitFor(t, "logs-c", "cancel answered")
	for _, l := range logs.lines(t, "logs-c") {
		if l["run_id"] != "logs-c" || l["worker"] != "logw" {
			t.Fatalf("log line %v lacks run_id or worker", l)
		}
	}
}

// TestRunEndedLogsRequestID: a run that Foundry's error ended (a prompt the
// content filter refuses: an HTTP 400) logs, on its "run ended" line, the
// request id Azure support asks for, the one its run.failed carries.
func TestRunEndedLogsRequestID(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var logs logBuffer
	log := zerolog.New(&logs).Level(zerolog.InfoLevel)
	e.startWorker(consumer.Config{WorkerID: "logreq", Logger: &log})

	evs := e.endRun("logs-req", map[string]string{"emu_content_filter": "prompt"})
	failed := failure(t, evs, events.CodeContentFilter)
	if failed.RequestID == "" {
		t.Fatalf("run.failed without a request id: %+v", failed)
	}
	logs.waitFor(t, "logs-req", "run ended")
	var end map[string]any
	for _, l := range logs.lines(t, "logs-req") {
		if l["message"] == "run ended" {
			end = l
		}
	}
	if end["type"] != string(events.TypeRunFailed) || end["code"] != events.CodeContentFilter || end["request_id"] != failed.RequestID {
		t.Fatalf("run ended line %v, want type run.failed, code %s and request_id %s", end, events.CodeContentFilter, failed.RequestID)
	}
}
