package events_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/events"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ev := func(seq uint64, typ events.EventType, ms int) events.RunEvent {
		return events.RunEvent{RunID: "r", Seq: seq, Type: typ, Time: at(ms)}
	}
	usage := &events.Usage{InputTokens: 3, OutputTokens: 9, TotalTokens: 12}
	completed := ev(5, events.TypeRunCompleted, 900)
	completed.Status, completed.Usage = "completed", usage
	cancelled := ev(4, events.TypeRunCancelled, 700)
	cancelled.Reason, cancelled.UpstreamStatus, cancelled.Usage = "requested", "cancelled", usage
	failed := ev(3, events.TypeRunFailed, 400)
	failed.Error = &events.Error{Code: "server_error", Message: "boom"}
	incomplete := completed
	incomplete.Status, incomplete.IncompleteReason = "incomplete", "max_output_tokens"
	finished := at(950)
	record := &events.RunState{RunID: "r", Status: events.StatusCompleted, CreatedAt: at(-100), End: &completed, Usage: usage, FinishedAt: &finished}
	audited := &events.RunState{RunID: "r", Status: events.StatusCancelled, CreatedAt: at(0), End: &cancelled, Usage: usage, UpstreamStatus: "completed"}
	ttft := func(ms int) *time.Duration { d := time.Duration(ms) * time.Millisecond; return &d }

	for _, c := range []struct {
		name   string
		st     *events.RunState
		evs    []events.RunEvent
		want   events.RunSummary
		counts map[events.EventType]int
	}{{
		name: "completed, with its record",
		st:   record,
		evs:  []events.RunEvent{ev(1, events.TypeRunStarted, 50), ev(2, events.TypeTextDelta, 150), ev(3, events.TypeTextDelta, 300), ev(4, events.TypeToolStarted, 400), completed},
		want: events.RunSummary{Status: events.StatusCompleted, Events: 5, LastSeq: 5, Attempts: 1, Duration: time.Second, Finished: true,
			TimeToFirstToken: ttft(250), Usage: usage, Terminal: events.TypeRunCompleted, Reason: "completed"},
		counts: map[events.EventType]int{events.TypeRunStarted: 1, events.TypeTextDelta: 2, events.TypeToolStarted: 1, events.TypeRunCompleted: 1},
	}, {
		name: "events expired: the record alone",
		st:   record,
		want: events.RunSummary{Status: events.StatusCompleted, Duration: 1050 * time.Millisecond, Finished: true, Usage: usage,
			Terminal: events.TypeRunCompleted, Reason: "completed"},
	}, {
		name: "cancelled, then completed upstream (the audit's status wins)",
		st:   audited,
		evs:  []events.RunEvent{ev(1, events.TypeRunStarted, 10), ev(2, events.TypeTextDelta, 20), ev(3, events.TypeRunStarted, 30), cancelled},
		want: events.RunSummary{Status: events.StatusCancelled, Events: 4, LastSeq: 4, Attempts: 2, Duration: 700 * time.Millisecond, Finished: true,
			TimeToFirstToken: ttft(20), Usage: usage, Terminal: events.TypeRunCancelled, Reason: "requested", UpstreamStatus: "completed"},
	}, {
		name: "failed, no record, first events expired",
		evs:  []events.RunEvent{ev(2, events.TypeRunStarted, 100), failed},
		want: events.RunSummary{Events: 2, LastSeq: 3, Attempts: 1, Duration: 300 * time.Millisecond, Finished: true,
			Terminal: events.TypeRunFailed, Reason: "server_error", Error: failed.Error},
	}, {
		name: "incomplete",
		evs:  []events.RunEvent{ev(1, events.TypeRunStarted, 0), incomplete},
		want: events.RunSummary{Events: 2, LastSeq: 5, Attempts: 1, Duration: 900 * time.Millisecond, Finished: true, Usage: usage,
			Terminal: events.TypeRunCompleted, Reason: "incomplete: max_output_tokens"},
	}, {
		name: "running: duration so far, no token yet",
		st:   &events.RunState{RunID: "r", Status: events.StatusRunning, CreatedAt: at(0)},
		evs:  []events.RunEvent{ev(1, events.TypeRunStarted, 100)},
		want: events.RunSummary{Status: events.StatusRunning, Events: 1, LastSeq: 1, Attempts: 1, Duration: 2 * time.Second},
	}} {
		t.Run(c.name, func(t *testing.T) {
			got := events.Summarize("r", c.st, c.evs, at(2000))
			c.want.RunID = "r"
			if c.counts == nil {
				c.counts = map[events.EventType]int{}
				for _, e := range c.evs {
					c.counts[e.Type]++
				}
			}
			c.want.Counts = c.counts
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(c.want)
			if string(gj) != string(wj) {
				t.Fatalf("got  %s\nwant %s", gj, wj)
			}
		})
	}
}

func TestSummaryJSON(t *testing.T) {
	t.Parallel()
	d := 1500 * time.Microsecond
	b, err := json.Marshal(events.RunSummary{RunID: "r", Duration: 2 * time.Second, TimeToFirstToken: &d, Counts: map[events.EventType]int{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"duration_ms":2000`, `"time_to_first_token_ms":1.5`, `"run_id":"r"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
}
