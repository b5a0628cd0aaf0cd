package bench

import (
	"testing"
)

// verdicts are the Met of each target, in order.
func verdicts(ts []Target) []bool {
	out := make([]bool, len(ts))
	for i, t := range ts {
		out[i] = t.Met
	}
	return out
}

func sameVerdicts(t *testing.T, name string, ts []Target, want ...bool) {
	t.Helper()
	got := verdicts(ts)
	if len(got) != len(want) {
		t.Fatalf("%s: targets %+v, want verdicts %v", name, ts, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: target %d %+v: met %v, want %v", name, i, ts[i], got[i], want[i])
		}
	}
}

func TestLatencyTargets(t *testing.T) {
	lr := LatencyReport{Points: []LatencyPoint{
		{Fraction: 0.1, AddedP99: 5},
		{Fraction: 0.5, AddedP99: 15.1},
		{Fraction: 0.7, AddedP99: 500}, // no target at 70%
		{Fraction: 0.9, AddedP99: -2},  // the reader slower: met
	}}
	lr.finish()
	sameVerdicts(t, "latency", lr.Targets, true, false, true)
	if lr.Met || lr.Targets[1].Max != 15 || lr.Targets[1].Unit != "ms" {
		t.Errorf("latency %+v", lr)
	}
	lr.Points[1].AddedP99 = 14
	lr.finish()
	if !lr.Met || len(lr.Targets) != 3 {
		t.Errorf("every point within its target: %+v", lr)
	}
	// The bare reader's p99 above foundryq's (a tail of its own run) does
	// not make the p99 added less than the p50 added: a full run called
	// 50 % met at -58.6 ms while foundryq added 50.6 ms at p50.
	lr.Points[1] = LatencyPoint{Fraction: 0.5, AddedP50: 50.6, AddedP99: -58.6}
	lr.finish()
	sameVerdicts(t, "latency, the reader's p99 above foundryq's", lr.Targets, true, false, true)
	if got := lr.Targets[1]; got.Measured != 50.6 || got.Note == "" {
		t.Errorf("held to the p50 added, with a note: %+v", got)
	}
	if lr.Targets[0].Note != "" {
		t.Errorf("a note where the p99 added stands: %+v", lr.Targets[0])
	}
	empty := LatencyReport{Points: []LatencyPoint{{Fraction: 0.3, AddedP99: 1}}}
	empty.finish()
	if empty.Met || len(empty.Targets) != 0 {
		t.Errorf("no load with a target cannot be met: %+v", empty)
	}
}

func TestCancelTargets(t *testing.T) {
	cr := CancelReport{Points: []CancelPoint{
		{Fraction: 0.5, Reply: Percentiles{P99: 49}, Stored: Percentiles{P99: 51}},
		{Fraction: 1, Reply: Percentiles{P99: 150}, Stored: Percentiles{P99: 140}, NotCancelled: 1},
	}}
	cr.finish()
	sameVerdicts(t, "cancel", cr.Targets, true, false, true, true, true, false)
	if cr.Met || cr.Target != TargetCancelP99 || cr.Targets[3].Max != 150 {
		t.Errorf("cancel %+v", cr)
	}
	cr.Points[0].Stored.P99, cr.Points[1].NotCancelled = 50, 0
	cr.finish()
	if !cr.Met {
		t.Errorf("every p99 within its target: %+v", cr)
	}
}

func TestMemoryTarget(t *testing.T) {
	mr := MemoryReport{Points: []MemoryPoint{
		{Runs: 1000, Transport: transportHTTPS, RSSPerRun: 90},
		{Runs: 5000, Transport: transportHTTPS, RSSPerRun: 63.5},
		{Runs: 5000, Transport: transportHTTP1, RSSPerRun: 200}, // a row for comparison only
	}}
	mr.finish(transportHTTPS)
	sameVerdicts(t, "memory", mr.Targets, true)
	if !mr.Met || mr.Targets[0].Measured != 63.5 || mr.Target != TargetMemoryPerRun {
		t.Errorf("memory %+v", mr)
	}
	mr.Points[1].RSSPerRun = 64.5
	mr.finish(transportHTTPS)
	if mr.Met {
		t.Errorf("64.5 KiB per run met the target: %+v", mr)
	}
}

func TestRelayAndAblationTargets(t *testing.T) {
	r := RelayReport{Runs: 200, Ratio: 1.25}
	r.finish()
	sameVerdicts(t, "relay", r.Targets, false)
	if r.Met || r.Target != 1.2 {
		t.Errorf("relay %+v", r)
	}
	r.Ratio = 1.1
	r.Loads = []RelayLoadPoint{{Runs: 1000, Ratio: 1.19}, {Runs: 5000, Ratio: 1.3}, {Runs: 9000}} // the last not measured
	r.finish()
	sameVerdicts(t, "relay at its loads", r.Targets, true, true, false)
	if r.Met {
		t.Errorf("1.3x at 5,000 runs met: %+v", r)
	}
	ar := AblationReport{Target: TargetAblationRatio, WorkerCPURatio: 1.1, Rows: []AblationRow{
		{Variant: "foundryq", NATSCPUPerEvent: 6},
		{Variant: "raw", NATSCPUPerEvent: 4},
	}}
	ar.finish()
	sameVerdicts(t, "ablation", ar.Targets, true, true)
	if !ar.Met {
		t.Errorf("ablation %+v", ar)
	}
	ar.WorkerCPURatio = 1.3
	ar.finish()
	sameVerdicts(t, "ablation", ar.Targets, true, false)
	if ar.Met {
		t.Errorf("the worker's 1.3x met: %+v", ar)
	}
}

func TestScaleTargets(t *testing.T) {
	sr := ScaleReport{Points: []ScalePoint{
		{Runs: 20000, RSSPerRun: 66, WorkerCPUPerToken: 30},
		{Runs: 5000, RSSPerRun: 60, WorkerCPUPerToken: 25},
	}}
	sr.finish()
	// 66/60 = 1.1: met; 30/25 = 1.2: missed; no ownership lost.
	sameVerdicts(t, "scale", sr.Targets, true, false, true, true)
	if sr.Met || sr.RSSRatio != 1.1 || sr.CPURatio != 1.2 || sr.Target != TargetScaleRatio {
		t.Errorf("scale %+v", sr)
	}
	sr.Points[0].WorkerCPUPerToken, sr.Points[1].LostOwnership = 26, 2
	sr.finish()
	sameVerdicts(t, "scale", sr.Targets, true, true, true, false)
	if sr.Met {
		t.Errorf("runs lost their ownership, and scale met: %+v", sr)
	}
	one := ScaleReport{Points: []ScalePoint{{Runs: 5000, RSSPerRun: 60, WorkerCPUPerToken: 25}}}
	one.finish()
	sameVerdicts(t, "one load", one.Targets, true)
	if one.RSSRatio != 0 || one.Met {
		t.Errorf("a ratio from one load: %+v", one)
	}
}
