package bench

import (
	"fmt"
	"slices"
)

// Target is one target of the benchmark, the figure it is held to and
// whether that figure met it. The keys of the report that have targets
// carry them in a list (`targets`), and their `met` is true when every
// target of the list was met.
type Target struct {
	// What names the figure, e.g. "p99 added over the bare reader at 50%".
	What string `json:"what"`
	// Measured is the figure; Max is the most it may be; both in Unit.
	Measured float64 `json:"measured"`
	Max      float64 `json:"max"`
	Unit     string  `json:"unit"`
	Met      bool    `json:"met"`
	// Note says how Measured was read when it is not the figure What
	// names as such; absent otherwise.
	Note string `json:"note,omitempty"`
}

// newTarget holds measured to at most max.
func newTarget(what string, measured, max float64, unit string) Target {
	return Target{What: what, Measured: measured, Max: max, Unit: unit, Met: measured <= max}
}

// allMet reports whether there are targets and every one was met.
func allMet(ts []Target) bool {
	return len(ts) > 0 && !slices.ContainsFunc(ts, func(t Target) bool { return !t.Met })
}

// TargetLatencyAddedP99 is the most per-token latency p99 that foundryq may
// add over the bare reader, ms, at each load of the latency phase (as a
// fraction of the maximum); loads not listed have no target.
var TargetLatencyAddedP99 = map[float64]float64{0.1: 5, 0.5: 15, 0.9: 50}

// TargetCancelP99At is the most a cancel's reply p99 and its run.cancelled
// stored p99 may take, ms, at each load of the cancel phase (as a fraction
// of the maximum); loads not listed have no target.
var TargetCancelP99At = map[float64]float64{0.5: TargetCancelP99, 1: 150}

// finish sets the latency targets and the verdict from the points. The
// p99 added is foundryq's p99 less the bare reader's, each from a run of
// its own; when the reader's tail rose more in its run than foundryq's in
// its own, that difference falls below the p50 added, or below zero, which
// no p99 of added latency can be: the target then holds the p50 added.
func (lr *LatencyReport) finish() {
	lr.Targets = nil
	for _, pt := range lr.Points {
		max, ok := TargetLatencyAddedP99[pt.Fraction]
		if !ok {
			continue
		}
		t := newTarget(fmt.Sprintf("token latency p99 added over the bare reader at %.0f%% of the maximum", pt.Fraction*100), pt.AddedP99, max, "ms")
		if pt.AddedP50 > pt.AddedP99 {
			t = newTarget(t.What, pt.AddedP50, max, "ms")
			t.Note = fmt.Sprintf("the bare reader's p99 (%.1f ms, in a run of its own) left a p99 difference of %.1f ms, under the p50 added: "+
				"held to the p50 added, which a p99 of added latency cannot be under", pt.Reader.P99, pt.AddedP99)
		}
		lr.Targets = append(lr.Targets, t)
	}
	lr.Met = allMet(lr.Targets)
}

// finish sets the cancel targets and the verdict from the points: at each
// load with a target, the reply p99 and the run.cancelled stored p99, and
// no cancel that failed.
func (cr *CancelReport) finish() {
	cr.Target = TargetCancelP99
	cr.Targets = nil
	for _, pt := range cr.Points {
		max, ok := TargetCancelP99At[pt.Fraction]
		if !ok {
			continue
		}
		at := fmt.Sprintf("at %.0f%% of the maximum", pt.Fraction*100)
		cr.Targets = append(cr.Targets,
			newTarget("cancel reply p99 "+at, pt.Reply.P99, max, "ms"),
			newTarget("run.cancelled stored p99 "+at, pt.Stored.P99, max, "ms"),
			newTarget("runs not cancelled "+at, float64(pt.NotCancelled), 0, "runs"))
	}
	cr.Met = allMet(cr.Targets)
}

// finish sets the memory target (RSS per run at the largest load over the
// bench's transport, the first row of that load) and the verdict.
func (mr *MemoryReport) finish(transport string) {
	mr.Target = TargetMemoryPerRun
	mr.Targets = nil
	largest := -1
	for i, pt := range mr.Points {
		if pt.Transport == transport && (largest < 0 || pt.Runs > mr.Points[largest].Runs) {
			largest = i
		}
	}
	if largest >= 0 {
		pt := mr.Points[largest]
		mr.Targets = append(mr.Targets, newTarget(fmt.Sprintf("worker RSS per streaming run at %d runs over %s", pt.Runs, pt.Transport), round2(pt.RSSPerRun), TargetMemoryPerRun, "KiB"))
	}
	mr.Met = allMet(mr.Targets)
}

// finish sets the relay target (worker CPU per token over the bare
// reader's) and the verdict.
func (r *RelayReport) finish() {
	r.Target = TargetRelayRatio
	r.Targets = nil
	if r.Ratio > 0 {
		r.Targets = append(r.Targets, newTarget(fmt.Sprintf("worker CPU per token over the bare reader's (%d runs)", r.Runs), round2(r.Ratio), TargetRelayRatio, "x"))
	}
	for _, l := range r.Loads {
		if l.Ratio > 0 {
			r.Targets = append(r.Targets, newTarget(fmt.Sprintf("worker CPU per token over the bare reader's (%d runs x %d tokens, a token every %gms)", l.Runs, l.Tokens, l.TokenDelayMS), round2(l.Ratio), TargetRelayRatio, "x"))
		}
	}
	r.Met = allMet(r.Targets)
}
