package events

import (
	"encoding/json"
	"time"
)

// RunSummary condenses what is known of a run: its state record and its
// stored events (Summarize). It is what foundryq runs RUN_ID shows.
type RunSummary struct {
	RunID string `json:"run_id"`
	// Status is the record's status; empty without a record.
	Status RunStatus `json:"status,omitempty"`
	// Events is how many events are stored; Counts splits them by type.
	// LastSeq is the seq of the last one: more than Events when some have
	// expired.
	Events  int               `json:"events"`
	Counts  map[EventType]int `json:"counts"`
	LastSeq uint64            `json:"last_seq,omitempty"`
	// Attempts counts run.started events (one per upstream response
	// attached to: a create, or a re-attach after a hand-off or crash).
	Attempts int `json:"attempts"`
	// Duration runs from the start (the record's created_at, when a worker
	// first took the run; else the first event) to the terminal event, or
	// to now while the run is not over (Finished false).
	Duration time.Duration `json:"-"`
	Finished bool          `json:"finished"`
	// TimeToFirstToken runs from the same start to the first text.delta;
	// nil if there was none.
	TimeToFirstToken *time.Duration `json:"-"`
	// Usage is the final token usage (terminal event, else the record).
	Usage *Usage `json:"usage,omitempty"`
	// Terminal is the terminal event's type, and Reason why the run ended:
	// the cancel reason (requested, timeout, abandoned), the error code of
	// run.failed, or the status of run.completed (completed, or
	// incomplete: REASON).
	Terminal EventType `json:"terminal,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	// Error is run.failed's error.
	Error *Error `json:"error,omitempty"`
	// UpstreamStatus is Foundry's last word on the response (the record's,
	// which a cancel audit may have updated, else the terminal event's).
	UpstreamStatus string `json:"upstream_status,omitempty"`
}

// MarshalJSON writes the durations in milliseconds (duration_ms,
// time_to_first_token_ms).
func (s RunSummary) MarshalJSON() ([]byte, error) {
	type plain RunSummary
	out := struct {
		plain
		DurationMS         float64  `json:"duration_ms"`
		TimeToFirstTokenMS *float64 `json:"time_to_first_token_ms,omitempty"`
	}{plain: plain(s), DurationMS: ms(s.Duration)}
	if s.TimeToFirstToken != nil {
		v := ms(*s.TimeToFirstToken)
		out.TimeToFirstTokenMS = &v
	}
	return json.Marshal(out)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Summarize condenses a run's state record (nil if there is none) and its
// stored events, in order (Client.Events), as of now. The record alone
// still gives the end, usage and duration after the events have expired.
func Summarize(runID string, st *RunState, evs []RunEvent, now time.Time) RunSummary {
	s := RunSummary{RunID: runID, Counts: map[EventType]int{}, Events: len(evs)}
	var start, end time.Time
	var terminal *RunEvent
	if st != nil {
		s.Status = st.Status
		start = st.CreatedAt
		if st.End != nil {
			terminal = st.End
		}
		if st.FinishedAt != nil {
			end = *st.FinishedAt
		}
	}
	for i := range evs {
		ev := &evs[i]
		s.Counts[ev.Type]++
		s.LastSeq = max(s.LastSeq, ev.Seq)
		if start.IsZero() || ev.Time.Before(start) {
			start = ev.Time
		}
		switch {
		case ev.Type == TypeRunStarted:
			s.Attempts++
		case ev.Type == TypeTextDelta && s.TimeToFirstToken == nil:
			d := ev.Time.Sub(start)
			s.TimeToFirstToken = &d
		case ev.Type.Terminal():
			terminal, end = ev, ev.Time
		}
	}
	if terminal != nil {
		s.Finished = true
		s.Terminal = terminal.Type
		s.Usage = terminal.Usage
		s.UpstreamStatus = terminal.UpstreamStatus
		s.Error = terminal.Error
		switch terminal.Type {
		case TypeRunCancelled:
			s.Reason = terminal.Reason
		case TypeRunFailed:
			if terminal.Error != nil {
				s.Reason = terminal.Error.Code
			}
		case TypeRunCompleted:
			s.Reason = terminal.Status
			if terminal.IncompleteReason != "" {
				s.Reason += ": " + terminal.IncompleteReason
			}
		}
		if end.IsZero() {
			end = terminal.Time
		}
	}
	if st != nil {
		if s.Usage == nil {
			s.Usage = st.Usage
		}
		if st.UpstreamStatus != "" {
			s.UpstreamStatus = st.UpstreamStatus
		}
	}
	if end.IsZero() {
		end = now
	}
	if !start.IsZero() && end.After(start) {
		s.Duration = end.Sub(start)
	}
	return s
}
