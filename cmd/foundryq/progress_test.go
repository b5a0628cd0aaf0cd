package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

// What the state record says about a quiet run, as watch prints it.
func TestProgressNotes(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	retrying := events.RunState{Status: events.StatusRunning, Failures: 2, MaxFailures: 10, LastError: "500 Internal Server Error", RetryAt: at(4 * time.Second)}
	tests := []struct {
		name  string
		st    events.RunState
		shown int // failures already reported
		line  string
	}{
		{"retry due in 4s", retrying, 0, "[attempt 2 of 10 failed: 500 Internal Server Error; next try in 4s]"},
		{"retry due in less than a second", func() events.RunState { s := retrying; s.RetryAt = at(300 * time.Millisecond); return s }(), 0,
			"[attempt 2 of 10 failed: 500 Internal Server Error; next try in 1s]"},
		{"retry overdue: no worker free", func() events.RunState { s := retrying; s.RetryAt = at(-time.Second); return s }(), 2,
			"[attempt 2 of 10 failed: 500 Internal Server Error; next try when a worker is free]"},
		{"a worker from before retry_at", func() events.RunState { s := retrying; s.RetryAt, s.MaxFailures = nil, 0; return s }(), 0,
			"[attempt 2 failed: 500 Internal Server Error; next try when a worker is free]"},
		{"a vanished owner, taken over", events.RunState{Status: events.StatusRunning, Owner: "w2", Failures: 1, LastError: "worker w1 stopped during attempt 1"}, 0,
			"[attempt 1 failed: worker w1 stopped during attempt 1; worker w2 tries again]"},
		{"taken over, already said", events.RunState{Status: events.StatusRunning, Owner: "w2", Failures: 1, LastError: "x"}, 1, ""},
		{"handed back", events.RunState{Status: events.StatusRunning}, 0, "[waiting for a worker (the run was given back to the queue)]"},
		{"running", events.RunState{Status: events.StatusRunning, Owner: "w1"}, 0, ""},
		{"waiting for answers", events.RunState{Status: events.StatusWaiting}, 0, ""},
		{"finished", events.RunState{Status: events.StatusCompleted, Failures: 3, LastError: "x"}, 0, ""},
	}
	for _, tt := range tests {
		if n := noteOf(tt.st, tt.shown, now); n.line != tt.line {
			t.Errorf("%s: %q, want %q", tt.name, n.line, tt.line)
		}
	}
	if n := queuedNote(12 * time.Second); n.line != "[queued: waiting for a worker (12s)]" {
		t.Errorf("queued: %q", n.line)
	}
}

// A line is printed when the run's situation changes, and an unchanged
// one again only after progressRepeat.
func TestProgressPrintsChanges(t *testing.T) {
	var out testkit.Buffer
	p := &progress{out: &out}
	now := time.Now()
	p.show(queuedNote(2*time.Second), now)
	p.show(queuedNote(3*time.Second), now.Add(time.Second))
	p.show(note{key: "owned w1"}, now.Add(2*time.Second))
	p.show(note{key: "owned w1"}, now.Add(3*time.Second))
	p.show(queuedNote(time.Minute), now.Add(4*time.Second))
	p.show(queuedNote(time.Minute+progressRepeat), now.Add(4*time.Second+progressRepeat))
	want := "[queued: waiting for a worker (2s)]\n[queued: waiting for a worker (1m0s)]\n[queued: waiting for a worker (1m30s)]\n"
	if out.String() != want {
		t.Fatalf("printed %q, want %q", out.String(), want)
	}
}

// No silent waits: a run that no worker takes is said to be queued, on
// stderr, until a worker comes; a run whose create fails says which
// attempt failed, why, and when the next try comes, before it completes.
func TestWatchSaysWhatARunWaitsFor(t *testing.T) {
	s := devstack.StartT(t, devstack.Config{
		Workers:  0,
		NATS:     natsembed.Config{Host: "127.0.0.1", StoreDir: t.TempDir()},
		Emulator: foundrytest.Config{DefaultTokenDelay: time.Millisecond},
	})
	natsURL := s.NATS.ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	var stdout, stderr testkit.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"submit", "--nats-url", natsURL, "--model", "m", "--input", "hi", "--run-id", "wait-1", "--watch"}, &stdout, &stderr)
	}()
	testkit.Eventually(t, 30*time.Second, "the queued line", func() bool {
		return strings.Contains(stderr.String(), "[queued: waiting for a worker (")
	})
	if strings.Contains(stdout.String(), "queued") {
		t.Fatalf("the queued line went to stdout: %q", stdout.String())
	}
	// A worker whose failed attempts wait long enough to be seen.
	if _, err := s.StartWorker(consumer.Config{WorkerID: "w1", RetryDelay: 6 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != exitOK || strings.Index(stderr.String(), "[queued") > strings.Index(stderr.String(), "[run wait-1 started") {
		t.Fatalf("submit --watch: code %d, stderr %q", code, stderr.String())
	}

	code, _, errText := runCmd(t, ctx, "submit", "--nats-url", natsURL, "--model", "m", "--input", "hi", "--run-id", "retry-1", "--watch",
		"--metadata", foundrytest.KeyCreateStatus+"=500", "--metadata", foundrytest.KeyCreateStatusTimes+"=1")
	failed := strings.Index(errText, "[attempt 1 of 10 failed: ")
	if code != exitOK || failed < 0 || failed > strings.Index(errText, "[run completed") ||
		!strings.Contains(errText[failed:], "500") || !strings.Contains(errText[failed:], "; next try in ") {
		t.Fatalf("submit --watch of a run whose first create fails: code %d, stderr %q", code, errText)
	}
	t.Logf("stderr of the first run:\n%s\nof the second:\n%s", stderr.String(), errText)
	if strings.Count(errText, "[attempt 1 of 10 failed") != 1 {
		t.Errorf("the failed attempt was reported more than once: %q", errText)
	}
}
