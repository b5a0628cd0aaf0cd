package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/events"
)

// at is a moment of the synthetic runs below, in seconds from t0.
var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// queued is a run of priority p submitted at sub and taken (its record
// written) at taken, never started (negative: never taken).
func queued(id string, p events.Priority, sub, taken float64) schedRun {
	r := schedRun{id: id, fair: events.Fairness{Key: "k-" + string(p), Priority: p}, submitted: at(sub)}
	if taken >= 0 {
		r.taken = at(taken)
	}
	return r
}

// startedAt is a run of priority p submitted at sub, taken at taken and
// started at started (taken == started: at its first delivery).
func startedAt(id string, p events.Priority, sub, taken, started float64) schedRun {
	r := queued(id, p, sub, taken)
	r.started = at(started)
	return r
}

// The priority rule counts a run started at its first delivery while a run
// of a higher priority had waited past the tolerance, and nothing else.
func TestOrderRuleCountsStartsOutOfOrder(t *testing.T) {
	t.Parallel()
	const high, normal, low = events.PriorityHigh, events.PriorityNormal, events.PriorityLow
	workerLost := []outage{{kind: OutageWorker, from: at(10), to: at(11)}}
	for _, tc := range []struct {
		name                     string
		runs                     []schedRun
		outages                  []outage
		age                      time.Duration
		judged, behind, outOfOrd int
	}{
		{"a high run waited 2s past the tolerance", []schedRun{queued("y", high, 0, 5), startedAt("x", low, 1, 3, 3)}, nil, 0, 1, 1, 1},
		{"a normal run waited 2s", []schedRun{queued("y", normal, 0, 5), startedAt("x", low, 1, 3, 3)}, nil, 0, 1, 1, 1},
		{"within the tolerance", []schedRun{queued("y", high, 0, 5), startedAt("x", low, 0, 0.5, 0.5)}, nil, 0, 1, 1, 0},
		{"started at a redelivery", []schedRun{queued("y", high, 0, 5), startedAt("x", low, 0, 1, 3)}, nil, 0, 0, 0, 0},
		{"of the same priority", []schedRun{queued("y", high, 0, 5), startedAt("x", high, 1, 3, 3)}, nil, 0, 1, 0, 0},
		{"the higher one taken first", []schedRun{queued("y", high, 0, 2), startedAt("x", low, 1, 3, 3)}, nil, 0, 1, 0, 0},
		{"the higher one never taken", []schedRun{queued("y", high, 0, -1), startedAt("x", low, 1, 3, 3)}, nil, 0, 1, 1, 1},
		// A run submitted before a fault ended may have been hidden until
		// its end + the redelivery (5s): that time is not a wait.
		{"hidden by a fault", []schedRun{queued("y", high, 9.8, 15), startedAt("x", low, 12, 14, 14)}, workerLost, 0, 1, 1, 0},
		{"the same without the fault", []schedRun{queued("y", high, 9.8, 15), startedAt("x", low, 12, 14, 14)}, nil, 0, 1, 1, 1},
		{"submitted after the fault", []schedRun{queued("y", high, 11.5, 15), startedAt("x", low, 12, 14, 14)}, workerLost, 0, 1, 1, 1},
		{"started after a fault it lived through", []schedRun{queued("y", high, 11.5, 15), startedAt("x", low, 9.9, 14, 14)}, workerLost, 0, 0, 0, 0},
		// With a starvation bound of 10s, a lane whose oldest run waited
		// 9s (the bound less the tolerance) may have risen.
		{"the higher lane near the starvation bound", []schedRun{queued("y", high, 0, 15), startedAt("x", low, 8, 9.5, 9.5)}, nil, 10 * time.Second, 1, 0, 0},
		{"the lower lane near the starvation bound", []schedRun{queued("y", high, 5, 15), queued("x0", low, 0, 12), startedAt("x", low, 8, 9.5, 9.5)}, nil, 10 * time.Second, 0, 0, 0},
		{"before the starvation bound", []schedRun{queued("y", high, 0, 15), startedAt("x", low, 4, 5, 5)}, nil, 10 * time.Second, 1, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule := newOrderRule(Bounds{StartOrder: time.Second, PriorityAge: tc.age, Redelivery: 5 * time.Second}, tc.outages)
			var rep Report
			rule.audit(&rep, tc.runs)
			if rep.FirstStartsJudged != tc.judged || rep.FirstStartsBehind != tc.behind || rep.OutOfOrder != tc.outOfOrd {
				t.Errorf("judged %d, behind %d, out of order %d; want %d, %d, %d (problems %q)",
					rep.FirstStartsJudged, rep.FirstStartsBehind, rep.OutOfOrder, tc.judged, tc.behind, tc.outOfOrd, rep.Problems)
			}
			if len(rep.Problems) != tc.outOfOrd {
				t.Errorf("problems %q, want %d", rep.Problems, tc.outOfOrd)
			}
			if rep.OK() != (tc.outOfOrd == 0) {
				t.Errorf("OK %v with %d out of order", rep.OK(), rep.OutOfOrder)
			}
		})
	}
}

// ev is an event of type typ stamped at s.
func ev(typ events.EventType, s float64) events.RunEvent {
	return events.RunEvent{Type: typ, Time: at(s)}
}

// capped is a run of key k with events evs.
func capped(id string, evs ...events.RunEvent) schedRun {
	return schedRun{id: id, fair: events.Fairness{Key: "k", Priority: events.PriorityNormal}, evs: evs}
}

// The cap rule counts a run that started while its key had its cap of runs
// running, and no run running off a slot: a run handed off or paused
// between two owners, one re-attached (counted once), one taken to be
// ended after a cancel.
func TestCapRuleCountsRunsOverTheCap(t *testing.T) {
	t.Parallel()
	const (
		started   = events.TypeRunStarted
		delta     = events.TypeTextDelta
		completed = events.TypeRunCompleted
	)
	cancelled := capped("m", ev(started, 41), ev(events.TypeRunCancelled, 42.5))
	cancelled.cancelAt = at(40)
	waited := capped("n", ev(started, 40.5), ev(completed, 43))
	waited.taken, waited.started = at(39), at(40.5)
	runs := []schedRun{
		// a, b and c at once: c is one too many.
		capped("a", ev(started, 0), ev(delta, 1), ev(completed, 4)),
		capped("b", ev(started, 1), ev(completed, 5)),
		capped("c", ev(started, 2), ev(completed, 3)),
		// d starts as b ends: a slot freed, then taken again.
		capped("d", ev(started, 5), ev(completed, 5.5)),
		// e is handed off at 7 and re-attached at 9: f and g run in between.
		capped("e", ev(started, 6), ev(delta, 7), ev(started, 9), ev(completed, 10)),
		capped("f", ev(started, 7.5), ev(completed, 8.5)),
		capped("g", ev(started, 7.6), ev(completed, 8.6)),
		// h's owner died and a new one re-attached while the old one's
		// last event was stamped: h counts once, with i.
		capped("h", ev(started, 20), ev(delta, 23), ev(started, 21), ev(completed, 24)),
		capped("i", ev(started, 22), ev(completed, 25)),
		// j pauses for answers from 31 to 35: k and l run meanwhile.
		capped("j", ev(started, 30), ev(delta, 30.5), ev(events.TypeInputRequired, 31),
			ev(events.TypeInputReceived, 35), ev(delta, 35.5), ev(completed, 36)),
		capped("k", ev(started, 32), ev(completed, 34)),
		capped("l", ev(started, 32.5), ev(completed, 34.5)),
		// m is taken after its cancel was recorded (no slot); n waited for
		// a slot, and runs with o.
		cancelled, waited,
		capped("o", ev(started, 41), ev(completed, 44)),
		// p has no cap.
		{id: "p", fair: events.Fairness{Key: "free", Priority: events.PriorityLow}, evs: []events.RunEvent{ev(started, 0), ev(completed, 9)}},
	}
	rep := Report{Caps: map[string]int{"k": 2}}
	capRule{caps: rep.Caps}.audit(&rep, runs)
	if rep.CapExceeded != 1 || rep.CapMost["k"] != 3 || rep.CapWaited != 1 {
		t.Errorf("exceeded %d, most %v, waited %d; want 1, k 3, 1 (problems %q)", rep.CapExceeded, rep.CapMost, rep.CapWaited, rep.Problems)
	}
	if len(rep.Problems) != 1 || !strings.HasPrefix(rep.Problems[0], "c: ") || !strings.HasSuffix(rep.Problems[0], "a, b") {
		t.Errorf("problems %q, want c's, naming a and b", rep.Problems)
	}
	if rep.OK() {
		t.Error("OK with a cap exceeded")
	}
	t.Log("\n" + rep.Table())
}
