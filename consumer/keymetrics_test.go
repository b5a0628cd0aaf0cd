package consumer_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/testkit"
)

// Fair share metrics (docs/operations.md, "Fair share metrics"): queue
// wait, runs owned and tokens by fairness key and priority, with a bounded
// set of key labels.

// byLabels sums the series of family name by the values of labels (joined
// by "/"): a counter's or gauge's value, a histogram's sample count.
func byLabels(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			var vals []string
			for _, l := range labels {
				vals = append(vals, have[l])
			}
			k := strings.Join(vals, "/")
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[k] += m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[k] += m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[k] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// sumValues is the sum of m's values.
func sumValues(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

// TestKeyMetricsBoundTheKeys: with MetricKeys 3 and a weight for key
// "named", six other keys are submitted: the first three seen get a label
// of their own, the other three share _other; "named" and the default key
// keep theirs. Queue wait, tokens and runs owned are counted by those
// labels and by priority, with lanes and first in, first out.
func TestKeyMetricsBoundTheKeys(t *testing.T) {
	for _, fifo := range []bool{false, true} {
		t.Run(fmt.Sprintf("fifo=%v", fifo), func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			reg := prometheus.NewRegistry()
			e.startWorker(consumer.Config{Registerer: reg, FIFO: fifo, MetricKeys: 3, Weights: map[string]int{"named": 2}})

			runs := []events.RunRequest{quick("km-named", events.PriorityHigh, "named"), quick("km-default", "", "")}
			for i := range 6 {
				runs = append(runs, quick(fmt.Sprintf("km-%d", i), events.PriorityLow, fmt.Sprintf("tenant-%d", i)))
			}
			for _, req := range runs {
				e.submit(req)
			}
			var tokens float64
			for _, req := range runs {
				last := checkWellFormed(t, e.collect(req.RunID, time.Minute))
				if last.Type != events.TypeRunCompleted || last.Usage == nil {
					t.Fatalf("run %s ended %+v", req.RunID, last)
				}
				tokens += float64(last.Usage.TotalTokens)
			}

			waits := byLabels(t, reg, "foundryq_run_queue_seconds", "key", "priority")
			own := 0
			for label, n := range waits {
				if strings.HasPrefix(label, "tenant-") {
					own++
					if !strings.HasSuffix(label, "/low") || n != 1 {
						t.Errorf("queue waits %s: %v, want 1 of priority low", label, n)
					}
				}
			}
			if own != 3 || waits["_other/low"] != 3 || waits["named/high"] != 1 || waits["default/normal"] != 1 || len(waits) != 6 {
				t.Errorf("queue waits by key/priority %v: want named/high 1, default/normal 1, three keys with 1 each, _other/low 3", waits)
			}
			keys := func(m map[string]float64) []string { return slices.Sorted(maps.Keys(m)) }
			testkit.Eventually(t, 10*time.Second, "the tokens counted by key", func() bool {
				return sumValues(byLabels(t, reg, "foundryq_key_tokens_total", "key")) == tokens
			})
			// The same keys, and the default key's series (kept at 0 from
			// the start for every priority).
			wantKeys := keys(byLabels(t, reg, "foundryq_run_queue_seconds", "key"))
			got := byLabels(t, reg, "foundryq_key_tokens_total", "key", "priority")
			if got["_other/low"] == 0 || got["named/high"] == 0 || got["default/normal"] == 0 || len(got) != 8 {
				t.Errorf("tokens by key/priority %v: want named/high, default (3 priorities), three own keys and _other/low", got)
			}
			if k := keys(byLabels(t, reg, "foundryq_key_tokens_total", "key")); !slices.Equal(k, wantKeys) {
				t.Errorf("token keys %v, want the queue wait's %v", k, wantKeys)
			}
			testkit.Eventually(t, 10*time.Second, "no run owned", func() bool {
				return sumValues(byLabels(t, reg, "foundryq_key_runs_active", "key")) == 0
			})
			if k := keys(byLabels(t, reg, "foundryq_key_runs_active", "key")); !slices.Equal(k, wantKeys) {
				t.Errorf("runs owned keys %v, want the queue wait's %v", k, wantKeys)
			}
		})
	}
}

// TestKeyRunsActive: a run counts in foundryq_key_runs_active by its key
// and priority while its worker owns it, and the gauge sums to
// foundryq_runs_active.
func TestKeyRunsActive(t *testing.T) {
	t.Parallel()
	e := setup(t)
	reg := prometheus.NewRegistry()
	e.startWorker(consumer.Config{Registerer: reg})
	req := slow("kr-1")
	req.FairnessKey, req.Priority = "team-a", events.PriorityLow
	e.submit(req)
	e.waitEvent(req.RunID, events.TypeTextDelta, 30*time.Second)
	if v := mustMetric(t, reg, "foundryq_key_runs_active", "key", "team-a", "priority", "low"); v != 1 {
		t.Errorf("team-a/low runs owned %v, want 1", v)
	}
	if all, active := sumValues(byLabels(t, reg, "foundryq_key_runs_active", "key")), mustMetric(t, reg, "foundryq_runs_active"); all != active {
		t.Errorf("runs owned by key sum to %v, runs_active %v", all, active)
	}
	e.cancel(req.RunID)
	if last := checkWellFormed(t, e.collect(req.RunID, 30*time.Second)); last.Type != events.TypeRunCancelled {
		t.Fatalf("run ended %s", last.Type)
	}
	testkit.Eventually(t, 10*time.Second, "the run no longer owned", func() bool {
		return mustMetric(t, reg, "foundryq_key_runs_active", "key", "team-a", "priority", "low") == 0
	})
}

// TestKeyRunningOtherSumsTheKeysPastTheBound: with caps, foundryq_key_running
// shows the fleet's running runs by key; past MetricKeys, _other counts the
// runs of every key that shares it.
func TestKeyRunningOtherSumsTheKeysPastTheBound(t *testing.T) {
	t.Parallel()
	e := setup(t)
	reg := prometheus.NewRegistry()
	e.startWorker(consumer.Config{Registerer: reg, CapPerKey: 5, MetricKeys: 1})
	ids := []string{"ko-a", "ko-b", "ko-c"}
	for _, id := range ids {
		e.submit(keyed(id, id, 100000, 10))
	}
	for _, id := range ids {
		e.waitEvent(id, events.TypeTextDelta, 30*time.Second)
	}
	testkit.Eventually(t, 20*time.Second, "_other to count two running runs, one key one", func() bool {
		running := byLabels(t, reg, "foundryq_key_running", "key")
		return len(running) == 2 && running["_other"] == 2 && sumValues(running) == 3
	})
	for _, id := range ids {
		e.cancel(id)
	}
	for _, id := range ids {
		checkWellFormed(t, e.collect(id, 30*time.Second))
	}
	testkit.Eventually(t, 20*time.Second, "no run running", func() bool {
		return sumValues(byLabels(t, reg, "foundryq_key_running", "key")) == 0
	})
}

// TestKeyTokensOfARunEndedWhileWaiting: a run cancelled while it waits
// for its caller ends with no worker owning it (endJobless); the tokens
// of its first step count for its key all the same.
func TestKeyTokensOfARunEndedWhileWaiting(t *testing.T) {
	t.Parallel()
	e := setup(t)
	reg := prometheus.NewRegistry()
	e.startWorker(consumer.Config{Registerer: reg})
	req := askingRequest("ask-tokens")
	req.FairnessKey, req.Priority = "waiter", events.PriorityHigh
	e.submit(req)
	e.waitEvent("ask-tokens", events.TypeInputRequired, 20*time.Second)
	if reply, err := e.client.Cancel(testCtx(t), "ask-tokens", "changed my mind"); err != nil || reply.Result != events.CancelCancelled {
		t.Fatalf("cancel: %+v %v", reply, err)
	}
	end := checkWellFormed(t, e.collect("ask-tokens", 20*time.Second))
	if end.Type != events.TypeRunCancelled || end.Usage == nil || end.Usage.TotalTokens == 0 {
		t.Fatalf("end %+v", end)
	}
	testkit.Eventually(t, 10*time.Second, "the run's tokens counted for its key", func() bool {
		return byLabels(t, reg, "foundryq_key_tokens_total", "key", "priority")["waiter/high"] == float64(end.Usage.TotalTokens)
	})
}
