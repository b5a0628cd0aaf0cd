package retry

import (
	"context"
	"testing"
	"time"
)

func TestBackoffGrowsToItsMax(t *testing.T) {
	b := Backoff(10*time.Millisecond, 80*time.Millisecond)
	var last time.Duration
	for i := range 10 {
		d := b.NextBackOff()
		if d < 8*time.Millisecond || d > 96*time.Millisecond {
			t.Fatalf("wait %d is %s, outside [8ms, 96ms]", i, d)
		}
		last = d
	}
	if last < 64*time.Millisecond {
		t.Fatalf("after 10 waits the backoff is %s, want near its 80ms max", last)
	}
}

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("a full sleep reported false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if Sleep(ctx, time.Hour) || time.Since(start) > time.Second {
		t.Fatal("a sleep did not end with its context")
	}
}
