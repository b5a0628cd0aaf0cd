package bench

import (
	"slices"
	"strings"
	"testing"
)

// The waiting phase reads the worker's gauges from its /metrics page:
// samples without labels only, comments skipped, a bad value an error.
func TestParseMetrics(t *testing.T) {
	page := `# HELP foundryq_runs_active Runs this worker owns now.
# TYPE foundryq_runs_active gauge
foundryq_runs_active 3
foundryq_runs_paused_total 5000
foundryq_runs_finished_total{type="run.cancelled"} 7
go_goroutines 42
`
	m, err := parseMetrics([]byte(page))
	if err != nil {
		t.Fatal(err)
	}
	if m["foundryq_runs_active"] != 3 || m["foundryq_runs_paused_total"] != 5000 || m["go_goroutines"] != 42 || len(m) != 3 {
		t.Fatalf("parsed %v", m)
	}
	for name, bad := range map[string]string{"empty": "", "comments only": "# HELP x\n", "bad value": "go_goroutines many\n"} {
		t.Run(name, func(t *testing.T) {
			if m, err := parseMetrics([]byte(bad)); err == nil {
				t.Fatalf("parsed %q as %v, want an error", bad, m)
			}
		})
	}
}

// --phases takes known phase names only, and the phases measured against
// the maximum need the phase that measures it.
func TestConfigPhases(t *testing.T) {
	for _, tc := range []struct {
		phases []string
		err    string
	}{
		{nil, ""},
		{[]string{"waiting"}, ""},
		{[]string{"memory", "waiting", "waste", "relay"}, ""},
		{[]string{"tool_cancel"}, ""},
		{[]string{"throughput", "latency", "cancel", "raw_publish"}, ""},
		{[]string{"wait"}, `unknown phase "wait"`},
		{[]string{""}, `unknown phase ""`},
		{[]string{"latency"}, "phase latency needs phase throughput"},
		{[]string{"waiting", "cancel"}, "phase cancel needs phase throughput"},
	} {
		err := Config{Binary: "foundryq", Phases: tc.phases}.withDefaults().validate()
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("phases %q: %v, want %q", tc.phases, err, tc.err)
		}
	}
	if err := (Config{Binary: "foundryq", WaitingRuns: -1}).withDefaults().validate(); err == nil {
		t.Error("WaitingRuns -1 accepted")
	}
}

// Which phases run: all but the opt-in ones by default, else the ones
// named.
func TestConfigRuns(t *testing.T) {
	all := Config{}
	for _, p := range Phases {
		if optIn := slices.Contains(OptInPhases, p); all.runs(p) == optIn {
			t.Errorf("default config: runs %s %v, an opt-in phase %v", p, all.runs(p), optIn)
		}
	}
	if !slices.Contains(OptInPhases, "scale") {
		t.Error("scale runs by default")
	}
	only := Config{Phases: []string{"waiting"}}
	if !only.runs("waiting") || only.runs("memory") || only.runs("throughput") || only.runs("scale") {
		t.Error("--phases waiting runs other phases or not waiting")
	}
	if scale := (Config{Phases: []string{"scale"}}); !scale.runs("scale") || scale.runs("memory") {
		t.Error("--phases scale does not run scale alone")
	}
}
