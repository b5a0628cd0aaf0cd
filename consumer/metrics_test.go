package consumer_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/testkit"
)

// metricValue returns a counter's or gauge's value, or a histogram's
// sample count, of the series of family name with the given labels
// (name=value pairs); ok is false when there is no such series.
func metricValue(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) (v float64, ok bool) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue(), true
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue(), true
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func mustMetric(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	v, ok := metricValue(t, reg, name, labels...)
	if !ok {
		t.Fatalf("no series %s %v", name, labels)
	}
	return v
}

// TestRunMetrics checks the run metrics after a normal run, a run whose
// response is slow to be created (stuck meanwhile), and a cancelled run.
func TestRunMetrics(t *testing.T) {
	t.Parallel()
	e := setup(t)
	reg := prometheus.NewRegistry()
	e.startWorker(consumer.Config{Registerer: reg, StuckAfter: time.Second})

	if v := mustMetric(t, reg, "foundryq_runs_stuck"); v != 0 {
		t.Fatalf("runs_stuck = %v before any run", v)
	}
	e.submit(request("m-1", nil))
	last := checkWellFormed(t, e.collect("m-1", 20*time.Second))
	if last.Type != events.TypeRunCompleted || last.Usage == nil || last.Usage.OutputTokens == 0 {
		t.Fatalf("run ended %+v", last)
	}
	testkit.Eventually(t, 10*time.Second, "the run to be counted", func() bool {
		v, _ := metricValue(t, reg, "foundryq_run_duration_seconds", "outcome", "completed")
		return v == 1
	})
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"foundryq_run_queue_seconds", nil, 1},
		{"foundryq_time_to_first_token_seconds", nil, 1},
		{"foundryq_upstream_request_seconds", []string{"op", "create", "status", "ok"}, 1},
		{"foundryq_run_duration_seconds", []string{"outcome", "failed"}, 0},
		{"foundryq_tokens_total", []string{"kind", "output"}, float64(last.Usage.OutputTokens)},
		{"foundryq_tokens_total", []string{"kind", "input"}, float64(last.Usage.InputTokens)},
		{"foundryq_runs_finished_total", []string{"type", "run.completed"}, 1},
	} {
		if got := mustMetric(t, reg, c.name, c.labels...); got != c.want {
			t.Errorf("%s %v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}

	// No event while Foundry holds response.created back: stuck after 1s,
	// not any more once the run has ended.
	e.submit(request("m-stuck", map[string]string{"emu_created_ms": "5000"}))
	testkit.Eventually(t, 10*time.Second, "runs_stuck to count the silent run", func() bool {
		return mustMetric(t, reg, "foundryq_runs_stuck") == 1
	})
	if last := checkWellFormed(t, e.collect("m-stuck", 30*time.Second)); last.Type != events.TypeRunCompleted {
		t.Fatalf("run ended %s", last.Type)
	}
	testkit.Eventually(t, 10*time.Second, "runs_stuck to drop to 0", func() bool {
		return mustMetric(t, reg, "foundryq_runs_stuck") == 0
	})

	e.submit(slow("m-c"))
	e.waitEvent("m-c", events.TypeTextDelta, 20*time.Second)
	e.cancel("m-c")
	if last := checkWellFormed(t, e.collect("m-c", 20*time.Second)); last.Type != events.TypeRunCancelled {
		t.Fatalf("run ended %s", last.Type)
	}
	testkit.Eventually(t, 10*time.Second, "the cancelled run to be counted", func() bool {
		v, _ := metricValue(t, reg, "foundryq_run_duration_seconds", "outcome", "cancelled")
		return v == 1
	})
	if got := mustMetric(t, reg, "foundryq_upstream_request_seconds", "op", "cancel", "status", "ok"); got < 1 {
		t.Errorf("upstream cancel calls counted %v, want at least 1", got)
	}
}
