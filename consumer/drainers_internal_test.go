package consumer

import (
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
