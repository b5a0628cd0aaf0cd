package chaos

import (
	"fmt"
	"sort"
	"strings"
)

// Report is what an audit found. The figures that must be zero are
// LostTokens, DuplicateTokens, ExtraUpstreamResponses, NoTerminal,
// TokensAfterCancel + ToolCallsAfterCancel, and Malformed.
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
	// ExtraUpstreamResponses counts responses beyond the first per run.
	ExtraUpstreamResponses int
	// NoTerminal counts runs without a terminal event.
	NoTerminal int
	// TokensAfterCancel counts tokens generated after a cancel had been
	// accepted upstream and acknowledged; ToolCallsAfterCancel tool calls
	// that ran to their end after a cancel was accepted.
	TokensAfterCancel, ToolCallsAfterCancel int
	// Malformed counts runs whose stored events are not seqs 1..n with
	// exactly one terminal event, last.
	Malformed int
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
		len(r.Problems) == 0
}

// FailedTotal is the number of failed runs.
func (r Report) FailedTotal() int {
	n := 0
	for _, c := range r.Failed {
		n += c
	}
	return n
}

// Table renders the report as the table the README shows.
func (r Report) Table() string {
	var b strings.Builder
	row := func(k string, v any) { fmt.Fprintf(&b, "| %-40s | %v |\n", k, v) }
	fmt.Fprintf(&b, "| %-40s | %s |\n|%s|---|\n", "", "runs", strings.Repeat("-", 42))
	row("submitted", r.Submitted)
	row("completed", r.Completed)
	codes := make([]string, 0, len(r.Failed))
	for c := range r.Failed {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	by := make([]string, len(codes))
	for i, c := range codes {
		by[i] = fmt.Sprintf("%s %d", c, r.Failed[c])
	}
	failed := fmt.Sprint(r.FailedTotal())
	if len(by) > 0 {
		failed += " (" + strings.Join(by, ", ") + ")"
	}
	row("failed (by code)", failed)
	row("cancelled", r.Cancelled)
	row("lost tokens", r.LostTokens)
	row("duplicate tokens", r.DuplicateTokens)
	row("extra upstream responses", r.ExtraUpstreamResponses)
	row("runs without a terminal event", r.NoTerminal)
	row("tokens and tool calls after a cancel", fmt.Sprintf("%d (%d tokens, %d tool calls)",
		r.TokensAfterCancel+r.ToolCallsAfterCancel, r.TokensAfterCancel, r.ToolCallsAfterCancel))
	row("malformed event streams", r.Malformed)
	return b.String()
}
