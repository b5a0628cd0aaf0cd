package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/foundryq/foundryq/events"
)

// The scheduling rules, checked from the outside (docs/guarantees.md, "How
// they are checked"): runs start in priority order, within a tolerance,
// and no capped fairness key ever has more runs running than its cap.

// schedRun is what the scheduling rules know of one run: what the test
// submitted, its state record's times, and its events.
type schedRun struct {
	id        string
	fair      events.Fairness
	submitted time.Time // when the submit returned
	// taken is when a worker first took the run: its record's created_at
	// (the claim that started it, or the hand-back of a run that had to
	// wait for its key's cap; for a run cancelled while queued, the
	// cancel). Zero: no record.
	taken time.Time
	// started is the run's first start (started_at); zero: never started.
	started time.Time
	// cancelAt is when a cancel (requested, or its deadline) was recorded;
	// zero: none.
	cancelAt time.Time
	ended    time.Time // when its terminal event was stored; zero: none
	evs      []events.RunEvent
}

// schedRunOf gathers what the scheduling rules need of run id.
func schedRunOf(id string, plan RunPlan, st *events.RunState, evs []events.RunEvent, ended time.Time) schedRun {
	r := schedRun{id: id, fair: plan.Fairness, submitted: plan.SubmittedAt, ended: ended, evs: evs}
	if st == nil {
		return r
	}
	r.taken = st.CreatedAt
	if st.StartedAt != nil {
		r.started = *st.StartedAt
	}
	if st.Cancel != nil {
		r.cancelAt = st.Cancel.At
	}
	return r
}

// firstDelivery reports whether the run started when a worker first took
// it: the claim that started it created its record. A run whose record
// was written before its start was handed back first (its key at its cap)
// and started at a redelivery, which the workers take back before new
// runs by design.
func (r schedRun) firstDelivery() bool {
	return !r.started.IsZero() && !r.taken.Before(r.started)
}

// waitedForSlot reports whether the run was handed back for its key's cap
// before it started (its record was written first, by the hand-back).
func (r schedRun) waitedForSlot() bool {
	return !r.started.IsZero() && r.taken.Before(r.started)
}

// waitingAt reports whether the run waited in its lane at t: submitted,
// and neither taken by a worker nor ended yet.
func (r schedRun) waitingAt(t time.Time) bool {
	if r.submitted.IsZero() || !r.submitted.Before(t) {
		return false
	}
	until := r.taken
	if until.IsZero() {
		until = r.ended
	}
	return until.IsZero() || until.After(t)
}

// orderRule checks that runs start in priority order. A run X started at
// its first delivery (firstDelivery) is out of order when some run Y of a
// higher priority had waited in its lane at X's start for longer than
// tolerance. Faults that hide runs from the workers, or runs a worker had
// taken, are allowed for: a run submitted before such a fault ended may
// have been taken and come back until the fault's end + redelivery, so
// that time does not count as its wait, and such a run started then is not
// judged. Pairs in which either lane held a run that had waited for the
// starvation bound less tolerance are not judged either, since aging
// reorders them.
type orderRule struct {
	tolerance  time.Duration // Bounds.StartOrder
	age        time.Duration // Bounds.PriorityAge; <= 0: priorities never rise
	redelivery time.Duration // Bounds.Redelivery
	faults     []outage      // the outages of blindKinds
}

// blindKinds are the outages that hide runs from the workers, or runs that
// a worker had taken.
var blindKinds = []string{OutageNATS, OutageStoreFull, OutageBlackHole, OutageWorker}

func newOrderRule(b Bounds, outages []outage) orderRule {
	o := orderRule{tolerance: b.StartOrder, age: b.PriorityAge, redelivery: b.Redelivery}
	for _, w := range outages {
		if slices.Contains(blindKinds, w.kind) {
			o.faults = append(o.faults, w)
		}
	}
	return o
}

// livedThrough returns the faults that ended after r was submitted, each
// extended by the redelivery: until then r may have been hidden.
func (o orderRule) livedThrough(r schedRun) []outage {
	var out []outage
	for _, w := range o.faults {
		if r.submitted.Before(w.to) {
			w.to = w.to.Add(o.redelivery)
			out = append(out, w)
		}
	}
	return out
}

// mayBeRedelivered reports whether run x may have been taken before or
// during a fault and started at a redelivery after it.
func (o orderRule) mayBeRedelivered(x schedRun) bool {
	for _, w := range o.livedThrough(x) {
		if !x.started.Before(w.from) && !x.started.After(w.to) {
			return true
		}
	}
	return false
}

// waited is how long run y had waited in its lane at t, not counting the
// faults that may have hidden it.
func (o orderRule) waited(y schedRun, t time.Time) time.Duration {
	return t.Sub(y.submitted) - covered(o.livedThrough(y), y.submitted, t, blindKinds...)
}

// aged reports whether r's lane (its key and priority) held a run at t
// that had waited for about the starvation bound.
func (o orderRule) aged(runs []schedRun, r schedRun, t time.Time) bool {
	if o.age <= 0 {
		return false
	}
	for _, z := range runs {
		if z.fair == r.fair && z.waitingAt(t) && t.Sub(z.submitted) >= o.age-o.tolerance {
			return true
		}
	}
	return false
}

// audit adds the priority rule's figures and problems to rep.
func (o orderRule) audit(rep *Report, runs []schedRun) {
	for _, x := range runs {
		if !x.firstDelivery() || o.mayBeRedelivered(x) || o.aged(runs, x, x.started) {
			continue
		}
		rep.FirstStartsJudged++
		var worst schedRun
		behind := false
		var longest time.Duration
		for _, y := range runs {
			if y.fair.Priority.Rank() >= x.fair.Priority.Rank() || !y.waitingAt(x.started) || o.aged(runs, y, x.started) {
				continue
			}
			behind = true
			if wait := o.waited(y, x.started); wait > longest {
				worst, longest = y, wait
			}
		}
		if behind {
			rep.FirstStartsBehind++
		}
		rep.LongestHigherWait = max(rep.LongestHigherWait, longest)
		if longest > o.tolerance {
			rep.OutOfOrder++
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: started (%s, %s) at its first delivery while %s (%s, %s) had waited %s in its lane",
				x.id, x.fair.Priority, x.fair.Key, worst.id, worst.fair.Priority, worst.fair.Key, longest.Round(time.Millisecond)))
		}
	}
}

// span is a time during which a run ran on one of its key's slots.
type span struct{ from, to time.Time }

// slotSpans are the spans during which a run's events show it running on
// a slot of its key. A span starts at each run.started (a start, or a
// re-attach by a new owner) and at the first event of a step after a
// pause, and ends at the last event its owner stored before the next
// span, the pause or the end. The worker stamps an event before it stores
// it, and frees the slot only after its last event is stored, so each span
// lies within a slot's hold. Not counted: input.required (a worker that
// repairs a pause stamps it anew, holding no slot), and a span that starts
// once a cancel is on record (the run is taken to be ended, and needs no
// slot).
func slotSpans(evs []events.RunEvent, cancelAt time.Time) []span {
	var out []span
	var cur span
	open, counted := false, false
	closeSpan := func() {
		if open && counted && cur.to.After(cur.from) {
			out = append(out, cur)
		}
		open = false
	}
	for _, ev := range evs {
		if ev.Type == events.TypeInputRequired {
			closeSpan()
			continue
		}
		if !open || ev.Type == events.TypeRunStarted {
			closeSpan()
			cur, open = span{from: ev.Time, to: ev.Time}, true
			counted = cancelAt.IsZero() || ev.Time.Before(cancelAt)
		}
		if ev.Time.After(cur.to) {
			cur.to = ev.Time
		}
	}
	closeSpan()
	return out
}

// capRule checks that no capped key had more runs running at once than its
// cap: a run counts once at any instant, whatever the number of its spans
// (a run re-attached after its owner died) that cover it.
type capRule struct {
	caps map[string]int
}

// audit adds the cap rule's figures and problems to rep.
func (c capRule) audit(rep *Report, runs []schedRun) {
	type mark struct {
		at    time.Time
		run   string
		delta int
	}
	byKey := make(map[string][]mark)
	for _, r := range runs {
		if _, capped := c.caps[r.fair.Key]; !capped {
			continue
		}
		if r.waitedForSlot() {
			rep.CapWaited++
		}
		for _, s := range slotSpans(r.evs, r.cancelAt) {
			byKey[r.fair.Key] = append(byKey[r.fair.Key], mark{s.from, r.id, 1}, mark{s.to, r.id, -1})
		}
	}
	for key, marks := range byKey {
		// At one instant, ends before starts: a slot freed then taken
		// again is not an overlap.
		sort.Slice(marks, func(i, j int) bool {
			if !marks[i].at.Equal(marks[j].at) {
				return marks[i].at.Before(marks[j].at)
			}
			return marks[i].delta < marks[j].delta
		})
		if rep.CapMost == nil {
			rep.CapMost = make(map[string]int)
		}
		running := make(map[string]int) // spans open, by run
		for _, m := range marks {
			running[m.run] += m.delta
			switch {
			case running[m.run] == 0:
				delete(running, m.run)
				continue
			case m.delta < 0 || running[m.run] > 1:
				continue // still running, or already running
			}
			rep.CapMost[key] = max(rep.CapMost[key], len(running))
			if len(running) > c.caps[key] {
				rep.CapExceeded++
				others := make([]string, 0, len(running))
				for id := range running {
					if id != m.run {
						others = append(others, id)
					}
				}
				sort.Strings(others)
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: running from %s with %d other runs of key %s (cap %d): %s",
					m.run, m.at.Format("15:04:05.000"), len(others), key, c.caps[key], strings.Join(others, ", ")))
			}
		}
	}
}
