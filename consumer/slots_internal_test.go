package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/internal/natsembed"
)

// A worker polls for work several times a second while it has free slots:
// each poll reserves every free slot and gives back those its fetch did not
// use. That must cost the same whatever the number of slots, or a worker set
// up for many runs burns CPU idling and each run costs more the larger the
// worker (with the slots a buffered channel, a slot at a time, an idle worker
// used about 0.65 ms of CPU per second for each 1,000 free slots).
func TestReserveCostDoesNotGrowWithSlots(t *testing.T) {
	_, nc := natsembed.RunTest(t)
	up, err := foundry.New(foundry.Config{BaseURL: "http://127.0.0.1:1/openai/v1/", APIKey: "unused"})
	if err != nil {
		t.Fatal(err)
	}
	cost := func(slots int) time.Duration {
		w, err := New(nc, up, Config{WorkerID: "slots", Concurrency: slots})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		res := testing.Benchmark(func(b *testing.B) {
			for b.Loop() {
				n, err := w.reserve(ctx)
				if err != nil || n != slots {
					b.Fatalf("reserve: %d slots, %v; want %d", n, err, slots)
				}
				w.releaseSlots(n)
			}
		})
		return time.Duration(res.NsPerOp())
	}
	few, many := cost(10), cost(100_000)
	t.Logf("reserve and give back: %v with 10 slots, %v with 100,000", few, many)
	// Before: about 10,000 times as much. A loaded machine moves either
	// figure by far less than the bound.
	if many > 20*max(few, time.Microsecond) {
		t.Fatalf("reserving 100,000 free slots costs %v against %v for 10: the cost grows with the slots", many, few)
	}
}
