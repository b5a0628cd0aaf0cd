package consumer

import (
	"sync"
	"testing"
	"time"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/testkit"
)

// Drains one after another run on one goroutine of the pool, which exits
// once it has waited drainerIdle for the next, or at once when the pool
// closes.
func TestDrainsReuseOneGoroutine(t *testing.T) {
	t.Parallel()
	r, _ := testRelay(t, 0)
	d := r.drainers
	r.start(t.Context(), func(err error) { t.Errorf("onFail(%v)", err) })
	for i := range 20 {
		r.add(events.RunEvent{Type: events.TypeTextDelta, Text: "x"}, int64(i))
		if err := r.flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 10*time.Second, "the drain's goroutine to wait for the next", func() bool { return d.waiting.Load() == 1 })
	}
	if got := d.started.Load(); got != 1 {
		t.Fatalf("20 drains one after another started %d goroutines, want 1", got)
	}
	if got := r.tail().Seq; got != 20 {
		t.Fatalf("stored seq %d, want 20", got)
	}
	testkit.Eventually(t, 10*drainerIdle, "the idle goroutine to exit", func() bool { return d.waiting.Load() == 0 })

	// Idle again, then the pool closes: the goroutine goes at once.
	r.add(events.RunEvent{Type: events.TypeTextDelta, Text: "y"}, 20)
	if err := r.flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "a goroutine to wait for the next drain", func() bool { return d.waiting.Load() == 1 })
	began := time.Now()
	d.close()
	testkit.Eventually(t, 10*time.Second, "the idle goroutine to exit at close", func() bool { return d.waiting.Load() == 0 })
	if waited := time.Since(began); waited >= drainerIdle {
		t.Fatalf("the idle goroutine exited %s after close, not at once", waited)
	}

	// A drain after close runs on a goroutine that does not stay.
	r.add(events.RunEvent{Type: events.TypeTextDelta, Text: "z"}, 21)
	if err := r.flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := r.tail().Seq; got != 22 {
		t.Fatalf("stored seq %d after close, want 22", got)
	}
}

// After a burst of drains at once, at most maxIdleDrainers goroutines stay
// waiting for the next.
func TestIdleDrainersAreBounded(t *testing.T) {
	t.Parallel()
	d := newDrainers()
	defer d.close()
	hold := make(chan struct{})
	var held sync.WaitGroup
	const burst = 4 * maxIdleDrainers
	for range burst {
		// A relay whose drain blocks until the burst has begun: each takes a
		// goroutine of its own.
		r := &relay{done: make(chan struct{}), draining: true}
		r.mu.Lock()
		held.Add(1)
		go func() { defer held.Done(); <-hold; r.mu.Unlock() }()
		d.start(r)
	}
	if got := d.started.Load(); got != burst {
		t.Fatalf("%d drains at once started %d goroutines, want %d", burst, got, burst)
	}
	close(hold)
	held.Wait()
	testkit.Eventually(t, 10*time.Second, "all but the waiting goroutines to exit after the burst", func() bool {
		return d.alive.Load() == maxIdleDrainers && d.waiting.Load() == maxIdleDrainers
	})
}
