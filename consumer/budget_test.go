package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/testkit"
)

// budgeted is a request that the emulator's quota and the worker's budget
// both count as 104 tokens: "hello there" (13 bytes as JSON: 4 tokens)
// and max_output_tokens 100.
func budgeted(runID string) events.RunRequest {
	req := request(runID, map[string]string{"emu_tokens": "5"})
	req.MaxOutputTokens = 100
	return req
}

// TestBudgetKeepsRunsQueuedInsteadOf429: the emulator's deployment has a
// quota of 330 tokens per 3s window (it takes creates until its count
// reaches 330: four of 104). Twelve runs at once on three workers: with a
// budget of the same size, the runs that do not fit wait queued
// (queue_reason token_budget) and Foundry answers no 429; without it,
// Foundry answers 429s.
func TestBudgetKeepsRunsQueuedInsteadOf429(t *testing.T) {
	const window = 3 * time.Second
	perMinute := int(330 * time.Minute / window)
	for _, withBudget := range []bool{true, false} {
		t.Run(fmt.Sprintf("budget=%t", withBudget), func(t *testing.T) {
			e := setup(t, withEmulator(foundrytest.Config{TokensPerMinute: map[string]int{"gpt-test": perMinute}, QuotaWindow: window}))
			view := e.watchFleet()
			cfg := consumer.Config{BudgetWindow: window, RetryDelay: 200 * time.Millisecond}
			if withBudget {
				cfg.TokensPerMinute = map[string]int{"gpt-test": perMinute}
			}
			for i := range 3 {
				c := cfg
				c.WorkerID = fmt.Sprintf("b%d", i)
				w := e.startWorker(c)
				t.Cleanup(func() { w.shutdown(t) })
			}
			var ids []string
			for i := range 12 {
				id := fmt.Sprintf("budget-%d", i)
				ids = append(ids, id)
				e.submit(budgeted(id))
			}
			if !withBudget {
				testkit.Eventually(t, time.Minute, "Foundry to answer 429", func() bool { return e.emu.Stats().CreatesOverQuota > 0 })
				return
			}
			for _, id := range ids {
				if last := checkWellFormed(t, e.collect(id, 2*time.Minute)); last.Type != events.TypeRunCompleted {
					t.Fatalf("run %s ended %s: %+v", id, last.Type, last.Error)
				}
			}
			if n := e.emu.Stats().CreatesOverQuota; n != 0 {
				t.Errorf("Foundry answered %d creates 429 with the budget on, want 0", n)
			}
			if view.reason(events.QueueReasonBudget) == 0 {
				t.Error("no run was recorded queued with queue_reason token_budget")
			}
		})
	}
}

// TestBudgetTightenedByHeaders: the worker's budget is far above the
// deployment's quota (330 tokens per 30s window), and another client has
// spent 201 of it. A run's create answer says 25 tokens are left
// (x-ratelimit-remaining-tokens): the budget takes it, and the next three
// runs wait queued for the next window instead of getting 429s.
func TestBudgetTightenedByHeaders(t *testing.T) {
	const window = 30 * time.Second
	e := setup(t, withEmulator(foundrytest.Config{TokensPerMinute: map[string]int{"gpt-test": int(330 * time.Minute / window)}, QuotaWindow: window}))
	view := e.watchFleet()
	cfg := consumer.Config{BudgetWindow: window, TokensPerMinute: map[string]int{"gpt-test": 1_000_000}}
	for i := range 3 {
		c := cfg
		c.WorkerID = fmt.Sprintf("h%d", i)
		w := e.startWorker(c)
		t.Cleanup(func() { w.shutdown(t) })
	}
	// Start at the beginning of a window: the steps below fit in it.
	testkit.Eventually(t, window+5*time.Second, "a fresh quota window", func() bool {
		now := time.Now()
		return now.Sub(now.Truncate(window)) < 2*time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := e.up.Create(ctx, foundry.CreateRequest{Model: "gpt-test", Input: json.RawMessage(`"x"`), MaxOutputTokens: 200,
		Metadata: map[string]string{"run_id": "other-client", "emu_tokens": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()

	e.submit(budgeted("tight-first"))
	if last := checkWellFormed(t, e.collect("tight-first", time.Minute)); last.Type != events.TypeRunCompleted {
		t.Fatalf("first run ended %s", last.Type)
	}
	for _, id := range []string{"tight-a", "tight-b", "tight-c"} {
		e.submit(budgeted(id))
	}
	testkit.Eventually(t, 20*time.Second, "a run recorded queued for the budget", func() bool {
		return view.reason(events.QueueReasonBudget) > 0
	})
	for _, id := range []string{"tight-a", "tight-b", "tight-c"} {
		if last := checkWellFormed(t, e.collect(id, 2*time.Minute)); last.Type != events.TypeRunCompleted {
			t.Fatalf("run %s ended %s", id, last.Type)
		}
	}
	if n := e.emu.Stats().CreatesOverQuota; n != 0 {
		t.Errorf("Foundry answered %d creates 429, want 0: the budget did not take x-ratelimit-remaining-tokens", n)
	}
}

// TestBudgetSharedBetweenKeys: a deployment's budget fits two runs a
// window. Key A floods the queue with 16 runs, then key B submits 4: with
// lanes, each window's budget goes round the keys waiting for it (one run
// each), so B's last run is about the 10th to start (A's first two take
// the first window) instead of the 20th. The budget shares itself so,
// taking runs first in, first out too. (Before it did, B's last run was
// the 20th, with lanes the 11th to 17th.) Start order comes from the
// state records' started_at.
func TestBudgetSharedBetweenKeys(t *testing.T) {
	const window = 2 * time.Second
	for _, fifo := range []bool{false, true} {
		t.Run(fmt.Sprintf("fifo=%t", fifo), func(t *testing.T) {
			e := setup(t)
			w := e.startWorker(consumer.Config{WorkerID: "share", Concurrency: 8, FIFO: fifo, BudgetWindow: window,
				RetryDelay: 200 * time.Millisecond, TokensPerMinute: map[string]int{"gpt-test": int(300 * time.Minute / window)}})
			t.Cleanup(func() { w.shutdown(t) })
			flood, few := ids("a-", 16), ids("b-", 4)
			for _, id := range flood {
				req := budgeted(id)
				req.FairnessKey = "a"
				e.submit(req)
			}
			for _, id := range few {
				req := budgeted(id)
				req.FairnessKey = "b"
				e.submit(req)
			}
			e.waitEnded(few, 3*time.Minute)
			type start struct {
				id string
				at time.Time
			}
			var starts []start
			for _, id := range slices.Concat(flood, few) {
				if at, ok := e.startedAt(id); ok {
					starts = append(starts, start{id, at})
				}
			}
			slices.SortFunc(starts, func(a, b start) int { return a.at.Compare(b.at) })
			lastB := 0
			for i, s := range starts {
				if strings.HasPrefix(s.id, "b-") {
					lastB = i + 1
				}
			}
			t.Logf("B's last run was start %d of %d", lastB, len(starts))
			if lastB > 12 {
				t.Fatalf("B's last run was start %d: the budget did not go round the keys", lastB)
			}
		})
	}
}
