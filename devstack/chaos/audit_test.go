package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/retry"
)

// Emulator is what the Auditor reads from the Foundry emulator
// (*foundrytest.Server).
type Emulator interface {
	Records(runID string) []foundrytest.ResponseRecord
	Stats() foundrytest.Stats
}

// Auditor collects what a test did (runs submitted, cancels acknowledged)
// and, once the runs have ended, checks every run against the events
// stream and the emulator. Its methods are safe for concurrent use.
type Auditor struct {
	js    jetstream.JetStream
	names events.Names
	emu   Emulator

	mu      sync.Mutex
	runs    map[string]*runNotes
	bounds  Bounds
	outages []outage
}

// runNotes is what the test told the Auditor about one run.
type runNotes struct {
	acks []cancelAck
	plan RunPlan
}

// RunPlan is what a test asked of a run that the deadline and scheduling
// rules check.
type RunPlan struct {
	// SubmittedAt is when the submit was accepted.
	SubmittedAt time.Time
	// Fairness is the run's fairness key and priority, as submitted; its
	// zero value: the scheduling rules do not apply.
	Fairness events.Fairness
	// Timeout is the run's timeout_seconds; 0: the deadline rules do not
	// apply.
	Timeout time.Duration
	// CancelFault is how long Foundry's cancel fails or hangs for this run
	// (emu_cancel_fail_ms, emu_cancel_hang_ms): the owner retries it that
	// long (at most Bounds.CancelConfirm) before the terminal event.
	CancelFault time.Duration
	// Asks: the run's response stops on an approval request, which the
	// chaos run answers (answerLater): a run of two steps.
	Asks bool
}

// Bounds are the deadline and scheduling rules' allowances, and the
// workers' settings those rules check.
type Bounds struct {
	// Terminal: a run with a timeout has its terminal event stored by its
	// first start + Timeout + Terminal (plus the outages meanwhile, plus
	// its CancelFault). The ack wait and a few seconds: with its owner
	// dead, any worker enforces the deadline upstream and the terminal
	// event comes at the redelivery.
	Terminal time.Duration
	// UpstreamCancel: a response still generating at the run's deadline
	// has had a cancel call by the deadline + UpstreamCancel (plus the
	// NATS outages meanwhile).
	UpstreamCancel time.Duration
	// CancelConfirm is the workers' bound on retrying Foundry's cancel
	// (--cancel-confirm-timeout): it caps a run's CancelFault.
	CancelConfirm time.Duration
	// StartOrder is the priority rule's tolerance: how long a run may have
	// waited in its lane while a run of a lower priority starts (the
	// workers do not coordinate: each sees the lanes as it last listed
	// them).
	StartOrder time.Duration
	// PriorityAge is the workers' starvation bound (--priority-age): a
	// start is not judged against a lane whose oldest run had waited
	// about that long, as aging reorders them.
	PriorityAge time.Duration
	// Redelivery is how long after a fault that hides runs (OutageNATS,
	// OutageStoreFull, OutageBlackHole, OutageWorker) a job taken then may
	// come back: the ack wait and a little. For the runs submitted before
	// the fault ended, the priority rule does not judge a start until then,
	// nor count the time as waiting.
	Redelivery time.Duration
	// Caps are the workers' concurrency caps by fairness key (--cap).
	Caps map[string]int
}

// Outage kinds: what held runs back for a while, through no fault of the
// workers'. The deadline rules extend their bounds by them.
const (
	OutageNATS      = "nats down"      // the NATS server was stopped
	OutageStoreFull = "store full"     // JetStream refused writes
	OutageCancel    = "foundry cancel" // Foundry's cancel failed or hung for every response
	OutageBlackHole = "worker cut off" // a worker's NATS connection was black-holed (recorded, not an allowance)
	OutageWorker    = "worker lost"    // a worker was killed, frozen or shut down: jobs it had taken come back later
)

type outage struct {
	kind     string
	from, to time.Time
}

// cancelAck is an acknowledged cancel, with the emulator's view of the
// run's responses at that moment.
type cancelAck struct {
	reply events.CancelReply
	at    []foundrytest.ResponseRecord
}

// NewAuditor returns an Auditor of the runs on js (subjects and streams
// named by names) against emu.
func NewAuditor(js jetstream.JetStream, names events.Names, emu Emulator) *Auditor {
	return &Auditor{js: js, names: names, emu: emu, runs: make(map[string]*runNotes)}
}

// Submitted records that runID was submitted: Audit checks it.
func (a *Auditor) Submitted(runID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.runs[runID] == nil {
		a.runs[runID] = &runNotes{}
	}
}

// Planned records that runID was submitted, with what the deadline rules
// check it against.
func (a *Auditor) Planned(runID string, p RunPlan) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.runs[runID] == nil {
		a.runs[runID] = &runNotes{}
	}
	a.runs[runID].plan = p
}

// SetBounds sets the deadline rules' allowances (call it before Audit).
func (a *Auditor) SetBounds(b Bounds) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.bounds = b
}

// Outage records that, from from to to, runs were held back by kind (one
// of the Outage constants).
func (a *Auditor) Outage(kind string, from, to time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.outages = append(a.outages, outage{kind, from, to})
}

// extend returns end moved on by the time the outages of the given kinds
// (their union) took up between start and end, until the moved end takes
// in no more.
func extend(outages []outage, start, end time.Time, kinds ...string) time.Time {
	base := end
	for range len(outages) + 1 {
		next := base.Add(covered(outages, start, end, kinds...))
		if next.Equal(end) {
			break
		}
		end = next
	}
	return end
}

// covered is the time the outages of the given kinds (their union) took
// up between start and end.
func covered(outages []outage, start, end time.Time, kinds ...string) time.Duration {
	var ws []outage
	for _, o := range outages {
		if slices.Contains(kinds, o.kind) && o.to.After(start) && o.from.Before(end) {
			o.from, o.to = maxTime(o.from, start), minTime(o.to, end)
			ws = append(ws, o)
		}
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].from.Before(ws[j].from) })
	var took time.Duration
	var cur outage
	for i, w := range ws {
		switch {
		case i == 0:
			cur = w
		case w.from.After(cur.to):
			took += cur.to.Sub(cur.from)
			cur = w
		case w.to.After(cur.to):
			cur.to = w.to
		}
	}
	if len(ws) > 0 {
		took += cur.to.Sub(cur.from)
	}
	return took
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// CancelAcknowledged records a cancel reply the client received for runID.
// Call it as soon as the reply arrives: the emulator's records are read
// now, and a response the cancel had stopped must generate nothing more.
func (a *Auditor) CancelAcknowledged(runID string, reply events.CancelReply) {
	recs := a.emu.Records(runID)
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.runs[runID]
	if n == nil {
		n = &runNotes{}
		a.runs[runID] = n
	}
	n.acks = append(n.acks, cancelAck{reply: reply, at: recs})
}

// RunIDs returns the submitted run ids, sorted.
func (a *Auditor) RunIDs() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Sorted(maps.Keys(a.runs))
}

// WaitEnded waits until every submitted run has a terminal event stored,
// or ctx ends (then it returns the cause; Audit still reports the runs
// without one).
func (a *Auditor) WaitEnded(ctx context.Context) error {
	for {
		stored, _, err := a.stored(ctx)
		if err == nil {
			open := 0
			for _, id := range a.RunIDs() {
				if !hasTerminal(stored[id]) {
					open++
				}
			}
			if open == 0 {
				return nil
			}
			err = fmt.Errorf("%d runs without a terminal event", open)
		}
		if !retry.Sleep(ctx, 250*time.Millisecond) {
			return fmt.Errorf("chaos: waiting for every run to end: %w (%w)", context.Cause(ctx), err)
		}
	}
}

func hasTerminal(evs []events.RunEvent) bool {
	for _, ev := range evs {
		if ev.Type.Terminal() {
			return true
		}
	}
	return false
}

// Audit checks every submitted run and returns the Report.
func (a *Auditor) Audit(ctx context.Context) (Report, error) {
	stored, ended, err := a.stored(ctx)
	if err != nil {
		return Report{}, err
	}
	stats := a.emu.Stats()
	rep := Report{Failed: map[string]int{}, CancelledBy: map[string]int{}, ToolCallsAfterCancel: int(stats.ToolCallsCompletedAfterCancel)}
	a.mu.Lock()
	notes := make(map[string]runNotes, len(a.runs))
	for id, n := range a.runs {
		notes[id] = *n
	}
	dl := deadlines{bounds: a.bounds, outages: slices.Clone(a.outages)}
	a.mu.Unlock()
	rep.Caps = dl.bounds.Caps
	var sched []schedRun
	for _, id := range a.RunIDs() {
		recs := a.emu.Records(id)
		plan := notes[id].plan
		a.auditRun(&rep, id, stored[id], recs, notes[id])
		if plan.Timeout == 0 && plan.Fairness.Priority == "" {
			continue
		}
		st, err := a.state(ctx, id)
		if err != nil {
			return Report{}, err
		}
		if plan.Timeout > 0 {
			dl.audit(&rep, id, plan, ended[id], st, recs)
		}
		if plan.Fairness.Priority != "" {
			sched = append(sched, schedRunOf(id, plan, st, stored[id], ended[id]))
		}
	}
	newOrderRule(dl.bounds, dl.outages).audit(&rep, sched)
	capRule{caps: dl.bounds.Caps}.audit(&rep, sched)
	sort.Strings(rep.Problems)
	sort.Strings(rep.Failures)
	return rep, nil
}

// auditRun adds one run's figures and problems to rep.
func (a *Auditor) auditRun(rep *Report, id string, evs []events.RunEvent, recs []foundrytest.ResponseRecord, notes runNotes) {
	rep.Submitted++
	problem := func(format string, args ...any) {
		rep.Problems = append(rep.Problems, id+": "+fmt.Sprintf(format, args...))
	}
	// Events: seqs 1..n, exactly one terminal event, last.
	var terminal *events.RunEvent
	terminals, malformed := 0, false
	for i := range evs {
		ev := &evs[i]
		if ev.Seq != uint64(i+1) && !malformed {
			malformed = true
			problem("stored event %d has seq %d (types %v)", i+1, ev.Seq, types(evs))
		}
		if ev.Type.Terminal() {
			terminals++
			if terminal == nil {
				terminal = ev
			}
		}
	}
	switch {
	case terminals == 0:
		rep.NoTerminal++
		problem("no terminal event after %d events", len(evs))
	case terminals > 1 || !evs[len(evs)-1].Type.Terminal():
		malformed = true
		problem("%d terminal events, last event %s", terminals, evs[len(evs)-1].Type)
	}
	if malformed {
		rep.Malformed++
	}
	for _, ev := range evs {
		if ev.Type == events.TypeInputRequired {
			rep.Asked++
			if terminal != nil && terminal.Type == events.TypeRunCompleted {
				rep.AskedCompleted++
			}
			break
		}
	}
	if terminal != nil {
		switch terminal.Type {
		case events.TypeRunCompleted:
			rep.Completed++
		case events.TypeRunCancelled:
			rep.Cancelled++
			rep.CancelledBy[terminal.Reason]++
			if terminal.UpstreamStatus == events.UpstreamUnconfirmed {
				rep.Unconfirmed++
			}
			ranOnUnreported(rep, id, terminal, recs, problem)
		case events.TypeRunFailed:
			code, msg := "?", ""
			if terminal.Error != nil {
				code, msg = terminal.Error.Code, terminal.Error.Message
			}
			rep.Failed[code]++
			rep.Failures = append(rep.Failures, id+": "+code+": "+msg)
		}
	}
	// Upstream: at most one response per step, the ones the events name.
	// A run that asks has a chain of responses, each continuing the one
	// before (previous_response_id); two responses continuing the same one
	// (or two first ones) are a step created twice.
	byPrev := map[string][]string{}
	named := map[string]bool{}
	for _, r := range recs {
		byPrev[r.PreviousResponseID] = append(byPrev[r.PreviousResponseID], r.ID)
		named[r.ID] = true
	}
	for prev, ids := range byPrev {
		if len(ids) > 1 {
			rep.ExtraUpstreamResponses += len(ids) - 1
			problem("%d upstream responses %v for one step (continuing %q)", len(ids), ids, prev)
		}
	}
	for _, ev := range evs {
		if ev.ResponseID != "" && !named[ev.ResponseID] {
			problem("%s names response %s, not one of the emulator's %v", ev.Type, ev.ResponseID, byPrev)
			break
		}
	}
	want := chainText(recs)
	if terminal != nil && terminal.Type == events.TypeRunCompleted && len(recs) == 0 {
		problem("completed without an upstream response")
	}
	// Text: equal to the emulator's for a completed run, a prefix of it
	// otherwise (a cancelled or failed run stops relaying).
	got := relayedText(evs)
	complete := terminal != nil && terminal.Type == events.TypeRunCompleted
	lost, dup := diffTokens(got, want, complete)
	rep.LostTokens += lost
	rep.DuplicateTokens += dup
	if lost > 0 || dup > 0 {
		problem("%d tokens lost, %d repeated: relayed %q, generated %q", lost, dup, clip(got), clip(want))
	}
	// Cancels: nothing generated after an acknowledged cancel had stopped
	// the response (the emulator counts what it generated after it
	// accepted a cancel; the records at the acknowledgement show any
	// generation after it that the emulator did not see as cancelled).
	after := 0
	for _, r := range recs {
		after = max(after, r.TokensAfterCancel)
	}
	for _, ack := range notes.acks {
		for _, then := range ack.at {
			if then.CancelledAt.IsZero() {
				continue
			}
			for _, now := range recs {
				if now.ID == then.ID && now.Tokens > then.Tokens {
					after = max(after, now.Tokens-then.Tokens)
				}
			}
		}
	}
	if after > 0 {
		rep.TokensAfterCancel += after
		problem("%d tokens generated after the cancel", after)
	}
}

// chainText is the text the emulator generated for a run: its responses'
// texts, each step after the one it continues.
func chainText(recs []foundrytest.ResponseRecord) string {
	next := map[string]foundrytest.ResponseRecord{}
	for _, r := range recs {
		next[r.PreviousResponseID] = r
	}
	var b []byte
	for prev, n := "", 0; n < len(recs); n++ {
		r, ok := next[prev]
		if !ok {
			break
		}
		b = append(b, r.Text...)
		prev = r.ID
	}
	return string(b)
}

// relayedText concatenates the text of every stored text.delta, repeats
// included.
func relayedText(evs []events.RunEvent) string {
	var b []byte
	for _, ev := range evs {
		if ev.Type == events.TypeTextDelta {
			b = append(b, ev.Text...)
		}
	}
	return string(b)
}

func types(evs []events.RunEvent) []events.EventType {
	out := make([]events.EventType, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

func clip(s string) string {
	if len(s) > 120 {
		return s[:60] + "…" + s[len(s)-60:]
	}
	return s
}

// stored reads every event on the events stream, by run id, in stream
// order, repeats included (a client's Watch drops repeated seqs: the
// Auditor must see them), and when each run's first terminal event was
// stored.
func (a *Auditor) stored(ctx context.Context) (map[string][]events.RunEvent, map[string]time.Time, error) {
	stream, err := a.js.Stream(ctx, a.names.EventsStream())
	if err != nil {
		return nil, nil, fmt.Errorf("chaos: events stream: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("chaos: events stream info: %w", err)
	}
	out := make(map[string][]events.RunEvent)
	ended := make(map[string]time.Time)
	if info.State.Msgs == 0 {
		return out, ended, nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{a.names.EventsWildcard()}})
	if err != nil {
		return nil, nil, fmt.Errorf("chaos: read events: %w", err)
	}
	last := info.State.LastSeq
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Each batch is read to its end (its goroutine ends with it), at
		// most up to the last sequence the stream had.
		batch, err := cons.FetchNoWait(500)
		if err != nil {
			return nil, nil, fmt.Errorf("chaos: read events: %w", err)
		}
		n, done := 0, false
		var bad error
		for msg := range batch.Messages() {
			if done || bad != nil {
				continue
			}
			n++
			ev, err := events.DecodeRunEvent(msg.Data())
			if err != nil {
				bad = fmt.Errorf("chaos: event on %s: %w", msg.Subject(), err)
				continue
			}
			out[ev.RunID] = append(out[ev.RunID], ev)
			md, err := msg.Metadata()
			if err != nil {
				bad = fmt.Errorf("chaos: event metadata: %w", err)
				continue
			}
			if _, seen := ended[ev.RunID]; ev.Type.Terminal() && !seen {
				ended[ev.RunID] = md.Timestamp
			}
			done = md.Sequence.Stream >= last
		}
		switch err := batch.Error(); {
		case bad != nil:
			return nil, nil, bad
		case done:
			return out, ended, nil
		case err != nil && !errors.Is(err, jetstream.ErrNoMessages):
			return nil, nil, fmt.Errorf("chaos: read events: %w", err)
		case n == 0 && time.Now().After(deadline):
			return nil, nil, fmt.Errorf("chaos: read events: nothing more after 30s, below stream seq %d", last)
		case n == 0:
			time.Sleep(20 * time.Millisecond) // the consumer is being set up again (ordered consumers reset)
		}
	}
}

// state reads runID's state record; nil if there is none.
func (a *Auditor) state(ctx context.Context, runID string) (*events.RunState, error) {
	st, _, err := events.ReadState(ctx, a.js.Conn(), a.names.Bucket(), runID)
	switch {
	case errors.Is(err, events.ErrStateNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("chaos: %w", err)
	}
	return &st, nil
}

// ranOn reports whether a response's final status (as the emulator
// records it) means it was not stopped: it generated to its end, or is
// generating still.
func ranOn(status string) bool {
	switch status {
	case "completed", "incomplete", "in_progress", "queued":
		return true
	}
	return false
}

// ranOnUnreported checks a run.cancelled against the emulator: its
// upstream_status is the response's final status, or "unconfirmed" with an
// error object. A response that ran on while the run says otherwise counts
// in RanOnUnreported; any other mismatch is a problem.
func ranOnUnreported(rep *Report, id string, terminal *events.RunEvent, recs []foundrytest.ResponseRecord, problem func(string, ...any)) {
	if len(recs) == 0 {
		return
	}
	rec := recs[len(recs)-1]
	if rec.Status == "" || terminal.UpstreamStatus == rec.Status {
		return
	}
	if terminal.UpstreamStatus == events.UpstreamUnconfirmed && terminal.Error != nil {
		return
	}
	if terminal.UpstreamStatus == events.UpstreamUnknown && terminal.ResponseID == "" {
		// The create's response id never reached a worker (one was killed
		// between the create and saving the id): the run says it cannot
		// know, which is the truth, and Foundry has no look-up by metadata.
		rep.UnknownUpstream++
		return
	}
	if ranOn(rec.Status) {
		rep.RanOnUnreported++
		problem("run.cancelled (%s) says upstream_status %q but response %s ran on: %s with %d tokens",
			terminal.Reason, terminal.UpstreamStatus, rec.ID, rec.Status, rec.Tokens)
		return
	}
	problem("run.cancelled (%s) says upstream_status %q, the emulator's response %s is %s",
		terminal.Reason, terminal.UpstreamStatus, rec.ID, rec.Status)
}

// deadlines checks the runs submitted with a timeout.
type deadlines struct {
	bounds  Bounds
	outages []outage
}

// audit checks one run with a timeout: its terminal event stored in time
// (LateTerminal), and a response still generating at the run's deadline
// cancelled upstream in time (LateUpstreamCancel).
func (d deadlines) audit(rep *Report, id string, plan RunPlan, endedAt time.Time, st *events.RunState, recs []foundrytest.ResponseRecord) {
	rep.WithTimeout++
	problem := func(format string, args ...any) {
		rep.Problems = append(rep.Problems, id+": "+fmt.Sprintf(format, args...))
	}
	// The terminal event, by the first start + timeout + the bound (the
	// contract counts timeout_seconds from the first start: a run waits
	// queued for a free slot or its key's cap first), moved on by what held
	// every run back meanwhile and by this run's own cancel fault. A run
	// that never started counts from its submit.
	start := plan.SubmittedAt
	if st != nil && st.StartedAt != nil {
		start = *st.StartedAt
	}
	due := start.Add(plan.Timeout + d.bounds.Terminal + min(plan.CancelFault, d.bounds.CancelConfirm))
	due = extend(d.outages, start, due, OutageNATS, OutageStoreFull, OutageCancel)
	if after := endedAt.Sub(start.Add(plan.Timeout)); !endedAt.IsZero() && after > rep.TerminalAfterTimeout {
		rep.TerminalAfterTimeout = after
		rep.TerminalAfterTimeoutOf = fmt.Sprintf(": %s, allowed %s", id, due.Sub(start.Add(plan.Timeout)).Round(time.Millisecond))
	}
	switch {
	case endedAt.IsZero():
		rep.LateTerminal++
		problem("timeout %s: no terminal event (due %s after the first start)", plan.Timeout, due.Sub(start).Round(time.Millisecond))
	case endedAt.After(due):
		rep.LateTerminal++
		problem("timeout %s: terminal event stored %s after the first start, due within %s", plan.Timeout,
			endedAt.Sub(start).Round(time.Millisecond), due.Sub(start).Round(time.Millisecond))
	}
	// The response, stopped upstream by the deadline + the bound if it was
	// generating still. The deadline is the one the workers recorded, else
	// counted from the run's start, else from the submit.
	deadline := plan.SubmittedAt.Add(plan.Timeout)
	switch {
	case st != nil && st.Deadline != nil:
		deadline = *st.Deadline
	case st != nil && st.StartedAt != nil:
		deadline = st.StartedAt.Add(plan.Timeout)
	}
	limit := extend(d.outages, deadline, deadline.Add(d.bounds.UpstreamCancel), OutageNATS)
	if st != nil && st.ResponseID == "" && st.CreateStartedAt != nil {
		// The create's response id never reached a worker (the attempt
		// that sent it died first): no worker can ask Foundry to cancel
		// it, which is outside the guarantees and said so (the run fails
		// upstream_lost, or is cancelled with upstream_status unknown).
		rep.UnknownUpstream++
		return
	}
	for _, rec := range recs {
		called := cancelCalledAt(rec)
		if !called.IsZero() && (rec.FinishedAt.IsZero() || rec.FinishedAt.After(deadline)) {
			rep.CancelAfterDeadline = max(rep.CancelAfterDeadline, called.Sub(deadline))
		}
		if !rec.FinishedAt.IsZero() && !rec.FinishedAt.After(limit) {
			continue // it ended by then
		}
		if !called.IsZero() && !called.After(limit) {
			continue
		}
		rep.LateUpstreamCancel++
		when := "never"
		if !called.IsZero() {
			when = called.Sub(deadline).Round(time.Millisecond).String() + " after the deadline"
		}
		problem("timeout %s: response %s (%s, %d tokens) still generating %s after the deadline; first cancel call %s",
			plan.Timeout, rec.ID, rec.Status, rec.Tokens, limit.Sub(deadline).Round(time.Millisecond), when)
		return
	}
}

// cancelCalledAt is when Foundry's cancel was first called for rec,
// whatever its answer (a cancel that failed or hung was still asked for
// in time); zero if never.
func cancelCalledAt(rec foundrytest.ResponseRecord) time.Time {
	if !rec.FirstCancelCallAt.IsZero() {
		return rec.FirstCancelCallAt
	}
	return rec.CancelledAt
}
