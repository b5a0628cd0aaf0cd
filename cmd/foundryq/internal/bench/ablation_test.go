package bench

import (
	"testing"
	"time"
)

func TestAblationRatios(t *testing.T) {
	ar := AblationReport{Target: TargetAblationRatio, Rows: []AblationRow{
		{Variant: "foundryq", NATSCPUPerEvent: 12},
		{Variant: "no_fence", NATSCPUPerEvent: 10},
		{Variant: "raw", NATSCPUPerEvent: 4},
		{Variant: "foundryq_paced", PaceMS: 50, NATSCPUPerEvent: 130},
		{Variant: "raw_paced", PaceMS: 50, NATSCPUPerEvent: 100},
	}}
	ar.finish()
	want := map[string]float64{"foundryq": 3, "no_fence": 2.5, "raw": 1, "foundryq_paced": 1.3, "raw_paced": 1}
	for _, r := range ar.Rows {
		if r.RatioToRaw != want[r.Variant] {
			t.Errorf("%s: ratio %v, want %v", r.Variant, r.RatioToRaw, want[r.Variant])
		}
	}
	if ar.FoundryqRatio != 3 || ar.PacedRatio != 1.3 || ar.Met {
		t.Errorf("report %+v", ar)
	}
	ar.Rows[0].NATSCPUPerEvent = 6
	ar.finish()
	if ar.FoundryqRatio != 1.5 || !ar.Met {
		t.Errorf("at 1.5x raw: %+v", ar)
	}
}

func TestAblationVariantsSwitchOffOneThing(t *testing.T) {
	vs := ablationVariants(50 * time.Millisecond)
	if vs[0].name != "foundryq" || vs[0].noFence || vs[0].noMsgID || vs[0].noHeaders || vs[0].async || vs[0].stream != nil {
		t.Fatalf("the first variant must be foundryq's own way: %+v", vs[0])
	}
	names := map[string]bool{}
	for _, v := range vs {
		if names[v.name] {
			t.Errorf("variant %s twice", v.name)
		}
		names[v.name] = true
		if v.off == "" {
			t.Errorf("variant %s does not say what it switches off", v.name)
		}
	}
	for _, n := range []string{"no_fence", "no_msg_id", "short_dedupe_window", "no_republish", "no_headers", "one_subject", "memory_storage", "sync_always", "async_publish", "raw", "foundryq_paced", "raw_paced"} {
		if !names[n] {
			t.Errorf("no variant %s", n)
		}
	}
}
