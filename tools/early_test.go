package tools

import (
	"fmt"
	"testing"
	"time"
)

// Remembered cancels are taken once, expire after earlyCancelMemory, and
// never number more than maxEarlyCancels (the oldest go first).
func TestEarlyCancelsExpireAndAreBounded(t *testing.T) {
	var e earlyCancels
	t0 := time.Unix(1_700_000_000, 0)
	e.add(callKey{"r", "a"}, t0)
	if !e.take(callKey{"r", "a"}, t0.Add(time.Second)) || e.take(callKey{"r", "a"}, t0.Add(time.Second)) {
		t.Fatal("a remembered cancel is taken exactly once")
	}
	e.add(callKey{"r", "b"}, t0)
	if e.take(callKey{"r", "b"}, t0.Add(earlyCancelMemory)) {
		t.Fatal("a cancel is remembered past earlyCancelMemory")
	}
	for i := range maxEarlyCancels + 10 {
		e.add(callKey{"r", fmt.Sprint(i)}, t0.Add(time.Minute))
	}
	if len(e.at) != maxEarlyCancels || len(e.order) != maxEarlyCancels {
		t.Fatalf("%d remembered (%d in order), want at most %d", len(e.at), len(e.order), maxEarlyCancels)
	}
	if e.take(callKey{"r", "0"}, t0.Add(time.Minute)) || !e.take(callKey{"r", fmt.Sprint(maxEarlyCancels + 9)}, t0.Add(time.Minute)) {
		t.Fatal("the oldest cancels go first")
	}
}
