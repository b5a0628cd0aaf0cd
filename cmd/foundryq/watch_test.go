package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/internal/natsembed"
)

// watch of an id that names no run says so (exit 6) after a short grace,
// instead of waiting for ever; a run still waiting in the queue is
// watched on.
func TestWatchOfAnUnknownRun(t *testing.T) {
	s := devstack.StartT(t, devstack.Config{Workers: 0, NATS: natsembed.Config{Host: "127.0.0.1", StoreDir: t.TempDir()}})
	natsURL := s.NATS.ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	code, _, stderr := runCmd(t, ctx, "watch", "--nats-url", natsURL, "no-such-run")
	if code != exitNotFound || !strings.Contains(stderr, "no such run") || time.Since(start) > 20*time.Second {
		t.Fatalf("watch of an unknown run: code %d after %s, stderr %q", code, time.Since(start), stderr)
	}
	if code, _, stderr := runCmd(t, ctx, "submit", "--nats-url", natsURL, "--model", "m", "--input", "hi", "--run-id", "queued-1"); code != exitOK {
		t.Fatalf("submit: %d %s", code, stderr)
	}
	wctx, wcancel := context.WithTimeout(ctx, 2*unknownRunGrace)
	defer wcancel()
	if code, _, stderr := runCmd(t, wctx, "watch", "--nats-url", natsURL, "queued-1"); code == exitNotFound {
		t.Fatalf("watch of a queued run said no such run: %q", stderr)
	}
}
