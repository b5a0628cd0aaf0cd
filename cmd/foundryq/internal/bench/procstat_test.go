package bench

import (
	"os"
	"testing"
	"time"
)

// TestReadProcUsage reads this process: its CPU time grows with work done
// and its RSS is plausible.
func TestReadProcUsage(t *testing.T) {
	before, err := readProcUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if before.RSS < 1<<20 || before.RSS > 64<<30 {
		t.Fatalf("rss %d", before.RSS)
	}
	deadline := time.Now().Add(time.Minute)
	x := 0
	for {
		for i := range 10_000_000 {
			x ^= i * i
		}
		after, err := readProcUsage(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after.CPU > before.CPU {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cpu did not grow: %v then %v (%d)", before.CPU, after.CPU, x)
		}
	}
}
