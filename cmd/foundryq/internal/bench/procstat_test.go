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

// The bench gives each of its processes a port from freePort: two ports
// of one run must differ, or a process fails to listen ("port 45243 on
// 127.0.0.1 is in use": the emulator's HTTPS and plain ports were once the
// same, since the kernel may hand out a port again as soon as it is free).
func TestFreePortsDiffer(t *testing.T) {
	seen := make(map[int]bool)
	for range 2000 {
		p, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("freePort gave port %d twice in %d calls", p, len(seen)+1)
		}
		seen[p] = true
	}
}
