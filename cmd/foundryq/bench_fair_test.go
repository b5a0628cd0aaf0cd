package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

// The fair phase at a small size prints lanes and first in, first out
// side by side, and shows what lanes are for: key B's runs and the high
// runs start before the flood of key A has drained, first in, first out
// they wait behind it.
func TestBenchFairPhase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := fairBench{Flood: 300, Concurrency: 8, BRuns: 5, BEvery: 200 * time.Millisecond, Highs: 3, Tokens: 5}
	var out bytes.Buffer
	if err := runFairBench(ctx, cfg, true, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"fair: 300 runs of key A queued, concurrency 8", "B wait p99", "high wait max", "\nlanes ", "\nfifo "} {
		if !strings.Contains(text, want) {
			t.Errorf("the table lacks %q:\n%s", want, text)
		}
	}
	var res []fairResult
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil || len(res) != 2 || res[0].Mode != "lanes" || res[1].Mode != "fifo" {
		t.Fatalf("JSON %v: %+v\n%s", err, res, text)
	}
	lanes, fifo := res[0], res[1]
	t.Logf("\n%s", text)
	if lanes.BWaitP99 >= fifo.BWaitP99 || lanes.HighWaitMax >= fifo.HighWaitMax {
		t.Errorf("lanes did not shorten the waits: B p99 %s vs %s, high max %s vs %s", lanes.BWaitP99, fifo.BWaitP99, lanes.HighWaitMax, fifo.HighWaitMax)
	}
	if fifo.FloodStarted != cfg.Flood || lanes.FloodStarted >= cfg.Flood {
		t.Errorf("runs of A started before the last high: lanes %d, first in, first out %d (of %d)", lanes.FloodStarted, fifo.FloodStarted, cfg.Flood)
	}
}
