package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/foundryq/foundryq/events"
)

// runRuns lists runs from their state records (filtered, most recently
// updated first), or shows one run's record with a summary of its events.
func runRuns(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("runs", "runs [RUN_ID] [flags]")
	nf := addNATSFlags(f)
	status := f.String("status", "", "", "list only runs in these statuses, comma-separated: "+statusNames())
	since := f.Duration("since", "", 0, "list only runs updated within this long, e.g. 1h (0: any time)")
	limit := f.Int("limit", "", 0, "list at most this many runs, the most recently updated (0: all)")
	asJSON := f.Bool("json", "", false, "print JSON: one state record per line, or for RUN_ID {\"state\", \"summary\"}")
	if err := f.parse(args, stdout); err != nil {
		return err
	}
	if f.NArg() > 1 {
		return usageError{errors.New("runs: want at most one RUN_ID")}
	}
	var runID string
	if f.NArg() == 1 {
		id, err := runIDArg(f)
		if err != nil {
			return err
		}
		runID = id
	}
	filter, err := runFilter(*status, *since, *limit, time.Now())
	if err != nil {
		return err
	}
	c, closeConn, err := nf.client("foundryq-runs")
	if err != nil {
		return err
	}
	defer closeConn()
	if runID != "" {
		return showRun(ctx, c, runID, *asJSON, stdout, stderr)
	}
	return listRuns(ctx, c, filter, *asJSON, stdout)
}

// runFilter builds the client library's filter from the flags.
func runFilter(status string, since time.Duration, limit int, now time.Time) (events.RunFilter, error) {
	var filter events.RunFilter
	for _, s := range strings.Split(status, ",") {
		if s = strings.TrimSpace(s); s != "" {
			filter.Status = append(filter.Status, events.RunStatus(s))
		}
	}
	if since < 0 {
		return filter, usageError{fmt.Errorf("runs: --since %s: want a positive duration, e.g. 1h (0: any time)", since)}
	}
	if since > 0 {
		filter.UpdatedSince = now.Add(-since)
	}
	filter.Limit = limit
	if err := filter.Validate(); err != nil {
		flag := "--status"
		if limit < 0 {
			flag = "--limit"
		}
		return filter, usageError{fmt.Errorf("runs: %s: %w", flag, err)}
	}
	return filter, nil
}

func listRuns(ctx context.Context, c *events.Client, filter events.RunFilter, asJSON bool, stdout io.Writer) error {
	now := time.Now()
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	if !asJSON {
		fmt.Fprintln(tw, "RUN\tSTATUS\tPRIORITY\tKEY\tATTEMPT\tAGE\tUPDATED\tOWNER\tRESPONSE\tUSAGE\tEND\tNOTES")
	}
	enc := json.NewEncoder(stdout)
	for st, err := range c.Runs(ctx, filter) {
		if err != nil {
			return err
		}
		if asJSON {
			if err := enc.Encode(st); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintln(tw, runRow(st, now))
	}
	if asJSON {
		return nil
	}
	return tw.Flush()
}

// showRun prints one run's state record and the summary of its events.
func showRun(ctx context.Context, c *events.Client, runID string, asJSON bool, stdout, stderr io.Writer) error {
	st, _, err := c.State(ctx, runID)
	if errors.Is(err, events.ErrStateNotFound) {
		return showUnrecorded(ctx, c, runID, asJSON, stdout, stderr)
	}
	if err != nil {
		return err
	}
	evs, err := c.Events(ctx, runID)
	if err != nil {
		// The record alone still says how the run ended and what it used.
		fmt.Fprintf(stderr, "foundryq: run %s: events unavailable, summary from the state record: %v\n", runID, err)
	}
	sum := events.Summarize(runID, &st, evs, time.Now())
	if asJSON {
		return printRunJSON(stdout, st, sum, nil)
	}
	now := time.Now()
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	line := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	line("run", st.RunID)
	status := string(st.Status)
	if e := endText(st); e != "" {
		status += " (" + e + ")"
	}
	line("status", status)
	line("response", orDash(st.ResponseID))
	if st.FairnessKey != "" {
		line("fairness", fmt.Sprintf("key %s, priority %s", st.FairnessKey, orDash(string(st.Priority))))
	}
	line("owner", fmt.Sprintf("%s, attempt %s, failures %d", orDash(st.Owner), orDash(attemptOf(st)), st.Failures))
	if st.LastError != "" {
		line("last error", st.LastError)
	}
	if st.RetryAt != nil && st.Owner == "" && !st.Finished() {
		line("retry", failedText(st, now))
	}
	if st.Cancel != nil {
		line("cancel", fmt.Sprintf("%s at %s%s", st.Cancel.Reason, st.Cancel.At.Format(time.RFC3339), noteText(st.Cancel.Note)))
		if st.Cancel.UpstreamError != "" {
			u := "Foundry's cancel answered: " + st.Cancel.UpstreamError
			if st.Status == events.StatusCancelling {
				u += " (retrying)"
			}
			line("cancel upstream", u)
		}
	}
	if st.Deadline != nil {
		d := st.Deadline.Format(time.RFC3339)
		if !st.Finished() {
			d += " (" + deadlineText(*st.Deadline, now) + ")"
		}
		line("deadline", d)
	}
	if r := queueReasonText(st.QueueReason); r != "" && !st.Finished() {
		line("waits", r)
	}
	if st.StalledAt != nil && !st.Finished() {
		line("stalled", fmt.Sprintf("since %s (%s ago): Foundry's stream has sent nothing", st.StalledAt.Format(time.RFC3339), since(now, *st.StalledAt)))
	}
	line("created", fmt.Sprintf("%s (%s ago)", st.CreatedAt.Format(time.RFC3339), since(now, st.CreatedAt)))
	line("updated", fmt.Sprintf("%s (%s ago)", st.UpdatedAt.Format(time.RFC3339), since(now, st.UpdatedAt)))
	duration := sum.Duration.Round(time.Millisecond).String()
	if !sum.Finished {
		duration += " so far"
	}
	line("duration", duration)
	if sum.TimeToFirstToken != nil {
		line("first token", sum.TimeToFirstToken.Round(time.Millisecond).String())
	} else {
		line("first token", "-")
	}
	line("usage", usageLong(sum.Usage))
	if sum.Error != nil {
		line("error", sum.Error.Code+": "+sum.Error.Message)
	}
	line("upstream", orDash(sum.UpstreamStatus))
	line("events", eventsText(sum))
	return tw.Flush()
}

// showUnrecorded shows a run that has no state record: queued (no worker
// has taken it yet), with its place in the queue as a worker tells it, or
// no run at all (exit 6). A run just submitted is already in the queue: no
// grace is needed, unlike watch's.
func showUnrecorded(ctx context.Context, c *events.Client, runID string, asJSON bool, stdout, stderr io.Writer) error {
	queued, err := c.Exists(ctx, runID)
	if err != nil {
		return err
	}
	if !queued {
		fmt.Fprintf(stderr, "runs %s: no such run (none recorded, none queued)\n", runID)
		return exitCode(exitNotFound)
	}
	var place *events.QueuePosition
	if pos, err := c.QueuePosition(ctx, runID); err == nil {
		place = &pos
	} else if !errors.Is(err, events.ErrNoWorker) {
		fmt.Fprintf(stderr, "foundryq: run %s: its place in the queue is unknown: %v\n", runID, err)
	}
	if !asJSON {
		_, err := fmt.Fprintf(stdout, "run %s: %s\n", runID, placeText(place, time.Now()))
		return err
	}
	st := events.RunState{RunID: runID, Status: events.StatusQueued}
	return printRunJSON(stdout, st, events.Summarize(runID, &st, nil, time.Now()), place)
}

// placeText says where a queued run waits, from a worker's answer (nil:
// no worker answered).
func placeText(pos *events.QueuePosition, now time.Time) string {
	const waiting = "queued, waiting for a worker (no worker has taken it yet"
	if pos == nil {
		return waiting + "; none is running to tell its place)"
	}
	submitted := ""
	if pos.SubmittedAt != nil {
		submitted = "submitted " + since(now, *pos.SubmittedAt) + " ago"
	}
	switch pos.Where {
	case events.WhereLane:
		out := fmt.Sprintf("queued in lane %s/%s, number %d of the %d waiting there", pos.Priority, pos.FairnessKey, pos.Position, pos.LaneWaiting)
		if pos.PositionCapped {
			out = fmt.Sprintf("queued in lane %s/%s, behind the first %d of the %d waiting there", pos.Priority, pos.FairnessKey,
				events.MaxCountedPosition, pos.LaneWaiting)
		}
		if pos.HigherWaiting > 0 {
			out += fmt.Sprintf("; %d runs of higher priority wait and start first", pos.HigherWaiting)
		}
		return out + "; " + submitted
	case events.WhereIntake:
		return waiting + "; it waits in the intake, " + submitted + ")"
	case events.WhereTaken:
		return "queued, a worker has just taken it (ask again for its state)"
	}
	return waiting + ")"
}

// printRunJSON prints runs RUN_ID --json: {"state", "summary"}, and
// "queue" for a queued run whose place a worker told.
func printRunJSON(stdout io.Writer, st events.RunState, sum events.RunSummary, place *events.QueuePosition) error {
	b, err := json.MarshalIndent(struct {
		State   events.RunState       `json:"state"`
		Summary events.RunSummary     `json:"summary"`
		Queue   *events.QueuePosition `json:"queue,omitempty"`
	}{st, sum, place}, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, string(b))
	return err
}

// runRow is a run's row of the runs table, its cells separated by tabs.
func runRow(st events.RunState, now time.Time) string {
	return strings.Join([]string{st.RunID, string(st.Status), orDash(string(st.Priority)), orDash(st.FairnessKey), orDash(attemptOf(st)), since(now, st.CreatedAt),
		since(now, st.UpdatedAt) + " ago", orDash(st.Owner), orDash(st.ResponseID), usageCell(st.Usage), orDash(endText(st)),
		orDash(strings.Join(runNotes(st, now), "; "))}, "\t")
}

// runNotes are what a run's record says about a run that has not ended
// beyond its status: that its response's stream has stalled, when its
// deadline passes, since when its cancel waits for Foundry.
func runNotes(st events.RunState, now time.Time) []string {
	if st.Finished() {
		return nil
	}
	var notes []string
	if r := queueReasonText(st.QueueReason); r != "" {
		notes = append(notes, r)
	}
	if st.StalledAt != nil {
		notes = append(notes, "stalled since "+since(now, *st.StalledAt))
	}
	if st.Status == events.StatusCancelling && st.Cancel != nil {
		notes = append(notes, "cancel waits for Foundry since "+since(now, st.Cancel.At))
	}
	if st.Deadline != nil {
		notes = append(notes, deadlineText(*st.Deadline, now))
	}
	return notes
}

// queueReasonText says why a run waits before a worker takes it
// (RunState.QueueReason); "" if it does not.
func queueReasonText(reason string) string {
	switch reason {
	case "":
		return ""
	case events.QueueReasonCap:
		return "waits: its fairness key is at its concurrency cap"
	case events.QueueReasonBudget:
		return "waits: its deployment's token budget is spent"
	}
	return "waits: " + reason
}

// deadlineText is "deadline in 4m30s", or "deadline passed 12s ago".
func deadlineText(deadline, now time.Time) string {
	if deadline.After(now) {
		return "deadline in " + since(deadline, now)
	}
	return "deadline passed " + since(now, deadline) + " ago"
}

// statusNames lists the run statuses for the --status help:
// "queued, running, ...".
func statusNames() string {
	var names []string
	for _, s := range events.RunStatuses() {
		names = append(names, string(s))
	}
	return strings.Join(names, ", ")
}

func attemptOf(st events.RunState) string {
	if st.Attempt == 0 {
		return ""
	}
	return fmt.Sprint(st.Attempt)
}

// endText is the terminal event and why: "run.cancelled requested".
func endText(st events.RunState) string {
	if st.End == nil {
		return string(st.Terminal)
	}
	s := events.Summarize(st.RunID, &st, nil, time.Time{})
	if s.Reason == "" {
		return string(s.Terminal)
	}
	return string(s.Terminal) + " " + s.Reason
}

func noteText(note string) string {
	if note == "" {
		return ""
	}
	return fmt.Sprintf(" (%q)", note)
}

func usageCell(u *events.Usage) string {
	if u == nil {
		return "-"
	}
	return fmt.Sprintf("in=%d out=%d", u.InputTokens, u.OutputTokens)
}

func usageLong(u *events.Usage) string {
	if u == nil {
		return "-"
	}
	s := fmt.Sprintf("input %d, output %d, total %d", u.InputTokens, u.OutputTokens, u.TotalTokens)
	if u.CachedTokens > 0 || u.ReasoningTokens > 0 {
		s += fmt.Sprintf(" (cached %d, reasoning %d)", u.CachedTokens, u.ReasoningTokens)
	}
	return s
}

// eventsText is "42 stored: run.started 1, text.delta 40, run.completed 1".
func eventsText(s events.RunSummary) string {
	if s.Events == 0 {
		return "none stored (expired, or not started)"
	}
	out := fmt.Sprintf("%d stored", s.Events)
	if missing := int(s.LastSeq) - s.Events; missing > 0 {
		out += fmt.Sprintf(" (%d expired)", missing)
	}
	// In lifecycle order, then any other type (one this version does not
	// know), sorted: every type stored is counted.
	order := []events.EventType{events.TypeRunStarted, events.TypeTextDelta, events.TypeRefusalDelta, events.TypeToolStarted,
		events.TypeToolCompleted, events.TypeToolFailed, events.TypeInputRequired, events.TypeInputReceived, events.TypeStepStarted,
		events.TypeRunCompleted, events.TypeRunFailed, events.TypeRunCancelled}
	for _, t := range slices.Sorted(maps.Keys(s.Counts)) {
		if !slices.Contains(order, t) {
			order = append(order, t)
		}
	}
	var parts []string
	for _, t := range order {
		if n := s.Counts[t]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", t, n))
		}
	}
	return out + ": " + strings.Join(parts, ", ")
}

// since is how long ago t was, rounded for a table: 42s, 3m12s, 5h3m, 2d4h.
func since(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return roundDuration(now.Sub(t))
}

// roundDuration is d (at least 0) rounded for people: 42s, 3m12s, 5h3m,
// 2d4h.
func roundDuration(d time.Duration) string {
	d = max(d, 0).Round(time.Second)
	switch {
	case d < time.Minute:
		return d.String()
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d.Round(time.Minute) < 48*time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	d = d.Round(time.Hour)
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
