package consumer_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/testkit"
)

// TestLimitMetrics: per key, the runs running across the fleet, the waits
// for a cap and the tokens spent; per deployment, the estimates taken from
// the budget and the budgets tightened by Foundry's headers.
func TestLimitMetrics(t *testing.T) {
	e := setup(t, withEmulator(foundrytest.Config{TokensPerMinute: map[string]int{"gpt-test": 1_000_000}}))
	reg := prometheus.NewRegistry()
	e.startWorker(consumer.Config{Registerer: reg, CapPerKey: 1, CapRetryDelay: 100 * time.Millisecond,
		TokensPerMinute: map[string]int{"gpt-test": 1_000_000}})
	e.submit(keyed("metric-long", "k", 40, 50)) // 2 s upstream
	e.waitEvent("metric-long", events.TypeRunStarted, 30*time.Second)
	e.submit(keyed("metric-short", "k", 3, 0))
	testkit.Eventually(t, 20*time.Second, "the key's running run counted", func() bool {
		v, _ := metricValue(t, reg, "foundryq_key_running", "key", "k")
		return v == 1
	})
	testkit.Eventually(t, 20*time.Second, "a wait for the cap counted", func() bool {
		v, _ := metricValue(t, reg, "foundryq_key_waits_total", "key", "k", "reason", events.QueueReasonCap)
		return v >= 1
	})
	var total int64
	for _, id := range []string{"metric-long", "metric-short"} {
		last := checkWellFormed(t, e.collect(id, time.Minute))
		if last.Type != events.TypeRunCompleted || last.Usage == nil {
			t.Fatalf("run %s ended %+v", id, last)
		}
		total += last.Usage.TotalTokens
	}
	testkit.Eventually(t, 10*time.Second, "the key's tokens counted", func() bool {
		v, _ := metricValue(t, reg, "foundryq_key_tokens_total", "key", "k", "priority", string(events.PriorityNormal))
		return v == float64(total)
	})
	// "hello there" is 13 bytes as JSON (4 tokens), plus the default
	// output estimate of 1000, for each of the two creates.
	if v := mustMetric(t, reg, "foundryq_budget_tokens_total", "deployment", "gpt-test"); v != 2*1004 {
		t.Errorf("budget tokens %v, want %v", v, 2*1004)
	}
	if v := mustMetric(t, reg, "foundryq_budget_tightened_total", "deployment", "gpt-test"); v != 2 {
		t.Errorf("budgets tightened %v, want 2 (one per create answer)", v)
	}
}
