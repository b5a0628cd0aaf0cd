package chaos

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// Report is what an audit found. The figures that must be zero are
// LostTokens, DuplicateTokens, ExtraUpstreamResponses, NoTerminal,
// TokensAfterCancel + ToolCallsAfterCancel, Malformed, RanOnUnreported,
// LateTerminal and LateUpstreamCancel.
type Report struct {
	// Submitted is the number of runs audited.
	Submitted int
	// Completed, Cancelled and Failed (by error code) count the runs by
	// their terminal event.
	Completed, Cancelled int
	Failed               map[string]int
	// LostTokens counts generated tokens a run's relay is missing (all of
	// them for a completed run; before the last relayed one otherwise).
	LostTokens int
	// DuplicateTokens counts relayed tokens that were not generated there:
	// repeats.
	DuplicateTokens int
	// ExtraUpstreamResponses counts responses beyond the first per step of
	// a run (a run that asks has one response per step).
	ExtraUpstreamResponses int
	// Asked counts the runs whose response asked for approval
	// (input.required); AskedCompleted those of them that completed, after
	// a second step.
	Asked, AskedCompleted int
	// NoTerminal counts runs without a terminal event.
	NoTerminal int
	// TokensAfterCancel counts tokens generated after a cancel had been
	// accepted upstream and acknowledged; ToolCallsAfterCancel tool calls
	// that ran to their end after a cancel was accepted.
	TokensAfterCancel, ToolCallsAfterCancel int
	// Malformed counts runs whose stored events are not seqs 1..n with
	// exactly one terminal event, last.
	Malformed int
	// CancelledBy counts the cancelled runs by reason (requested, timeout,
	// abandoned); Unconfirmed those whose cancel Foundry never confirmed
	// (upstream_status unconfirmed).
	CancelledBy map[string]int
	Unconfirmed int
	// UnknownUpstream counts runs whose response id never reached a worker
	// (cancelled with upstream_status unknown, or timed out and lost):
	// Foundry cannot be asked about such a response, which is outside the
	// guarantees and said so.
	UnknownUpstream int
	// RanOnUnreported counts cancelled runs whose response ran on upstream
	// (the emulator's final status completed, incomplete, or unfinished)
	// while their run.cancelled says otherwise: its upstream_status must be
	// that status, or "unconfirmed" with an error.
	RanOnUnreported int
	// WithTimeout counts the runs submitted with a timeout_seconds the
	// deadline rules check; LateTerminal those whose terminal event was not
	// stored by the first start + timeout + the bound; LateUpstreamCancel those whose
	// response was still generating past the deadline + the bound without
	// a cancel call.
	WithTimeout, LateTerminal, LateUpstreamCancel int
	// TerminalAfterTimeout is the longest a terminal event of a run with a
	// timeout was stored after its first start + timeout; CancelAfterDeadline the
	// longest after a run's deadline that the first cancel call reached a
	// response still generating then (the margins the two rules leave).
	TerminalAfterTimeout, CancelAfterDeadline time.Duration
	// TerminalAfterTimeoutOf names the run of TerminalAfterTimeout and what
	// its bound allowed it (after the first start + timeout).
	TerminalAfterTimeoutOf string
	// FirstStartsJudged counts the runs the priority rule judges: started
	// at their first delivery, not after a fault that may have hidden them
	// (orderRule); FirstStartsBehind those of them started while a run of
	// a higher priority waited in its lane, however briefly; OutOfOrder
	// those started while one had waited longer than the tolerance
	// (Bounds.StartOrder); LongestHigherWait the longest a run of a higher
	// priority had waited at a judged start (the margin the rule leaves).
	FirstStartsJudged, FirstStartsBehind, OutOfOrder int
	LongestHigherWait                                time.Duration
	// Caps are the concurrency caps checked, by fairness key; CapExceeded
	// counts the times a run of a capped key started running while its key
	// already had its cap of runs running; CapMost is the most runs of each
	// capped key seen running at once; CapWaited counts the runs of capped
	// keys handed back for their cap before they started.
	Caps                   map[string]int
	CapExceeded, CapWaited int
	CapMost                map[string]int
	// Problems names every run that broke a promise, and how.
	Problems []string
	// Failures names every failed run with its error code and message (a
	// failure is an outcome, not a broken promise).
	Failures []string
}

// OK reports whether every promise held.
func (r Report) OK() bool {
	return r.LostTokens == 0 && r.DuplicateTokens == 0 && r.ExtraUpstreamResponses == 0 &&
		r.NoTerminal == 0 && r.TokensAfterCancel+r.ToolCallsAfterCancel == 0 && r.Malformed == 0 &&
		r.RanOnUnreported == 0 && r.LateTerminal == 0 && r.LateUpstreamCancel == 0 && r.OutOfOrder == 0 &&
		r.CapExceeded == 0 && len(r.Problems) == 0
}

// FailedTotal is the number of failed runs.
func (r Report) FailedTotal() int {
	n := 0
	for _, c := range r.Failed {
		n += c
	}
	return n
}

// Table renders the report as the table docs/guarantees.md shows.
func (r Report) Table() string {
	var b strings.Builder
	row := func(k string, v any) { fmt.Fprintf(&b, "| %-60s | %v |\n", k, v) }
	fmt.Fprintf(&b, "| %-60s | %s |\n|%s|---|\n", "", "runs", strings.Repeat("-", 62))
	row("submitted", r.Submitted)
	row("completed", r.Completed)
	row("failed (by code)", fmt.Sprint(r.FailedTotal())+byKey(r.Failed, ""))
	unconfirmed := ""
	if r.Unconfirmed > 0 {
		unconfirmed = fmt.Sprintf("unconfirmed %d", r.Unconfirmed)
	}
	row("cancelled (by reason)", fmt.Sprint(r.Cancelled)+byKey(r.CancelledBy, unconfirmed))
	row("with a short timeout_seconds", r.WithTimeout)
	row("that asked for approval (completed after a second step)", fmt.Sprintf("%d (%d)", r.Asked, r.AskedCompleted))
	row("response id never known to a worker (outside the guarantees)", r.UnknownUpstream)
	row("lost tokens", r.LostTokens)
	row("duplicate tokens", r.DuplicateTokens)
	row("extra upstream responses", r.ExtraUpstreamResponses)
	row("runs without a terminal event", r.NoTerminal)
	row("tokens and tool calls after a cancel", fmt.Sprintf("%d (%d tokens, %d tool calls)",
		r.TokensAfterCancel+r.ToolCallsAfterCancel, r.TokensAfterCancel, r.ToolCallsAfterCancel))
	row("malformed event streams", r.Malformed)
	row("cancelled runs whose response ran on without being reported", r.RanOnUnreported)
	row("runs without a terminal event after the run timeout", fmt.Sprintf("%d (latest %s after first start + timeout%s)",
		r.LateTerminal, r.TerminalAfterTimeout.Round(time.Millisecond), r.TerminalAfterTimeoutOf))
	row("timed-out runs cancelled upstream late", fmt.Sprintf("%d (latest first cancel call %s after the deadline)",
		r.LateUpstreamCancel, r.CancelAfterDeadline.Round(time.Millisecond)))
	row("runs started out of priority order beyond the bound", fmt.Sprintf("%d (%d first starts judged, %d while a higher priority waited, at most %s)",
		r.OutOfOrder, r.FirstStartsJudged, r.FirstStartsBehind, r.LongestHigherWait.Round(time.Millisecond)))
	row("cap exceeded", fmt.Sprintf("%d (%s)", r.CapExceeded, r.capFigures()))
	return b.String()
}

// capFigures renders the caps checked as "most running at once: k1 m1 of
// c1, ...; n runs waited for a slot".
func (r Report) capFigures() string {
	if len(r.Caps) == 0 {
		return "no cap"
	}
	keys := slices.Sorted(maps.Keys(r.Caps))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d of %d", k, r.CapMost[k], r.Caps[k])
	}
	return fmt.Sprintf("most running at once: %s; %d runs waited for a slot", strings.Join(parts, ", "), r.CapWaited)
}

// byKey renders m as " (k1 n1, k2 n2; extra)", keys sorted; "" if empty.
func byKey(m map[string]int, extra string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		if k == "" {
			parts[i] = fmt.Sprintf("? %d", m[k])
			continue
		}
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	s := strings.Join(parts, ", ")
	if extra != "" {
		if s != "" {
			s += "; "
		}
		s += extra
	}
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}
