package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
)

func TestDescribeCancel(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		reply     events.CancelReply
		want, not []string
	}{
		{events.CancelReply{RunID: "r1", Result: events.CancelCancelling},
			[]string{"run r1: cancelling", "recorded, not yet confirmed", "outcome follows on the run's events", "foundryq watch r1"},
			[]string{"could not be stored", "Foundry status now"}},
		{events.CancelReply{RunID: "r1", Result: events.CancelCancelling, UpstreamStatus: "cancelled"},
			[]string{"recorded, not yet confirmed", "(Foundry status now: cancelled)", "foundryq watch r1"}, nil},
		{events.CancelReply{RunID: "r1", Result: events.CancelCancelling, Unrecorded: true},
			[]string{"run r1: cancelling", "could not be stored", "Send the cancel again if the run does not end", "foundryq watch r1"},
			[]string{"is recorded"}},
		{events.CancelReply{RunID: "r1", Result: events.CancelCancelled}, []string{"cancelled before it started"}, nil},
		{events.CancelReply{RunID: "r1", Result: events.CancelAlreadyFinished, Terminal: events.TypeRunCompleted},
			[]string{"already finished (run.completed)"}, nil},
		{events.CancelReply{RunID: "r1", Result: events.CancelAlreadyFinished, Terminal: events.TypeRunCancelled, UpstreamStatus: "cancelled"},
			[]string{"run r1: cancelled (Foundry status: cancelled)"}, []string{"nothing to cancel"}},
		{events.CancelReply{RunID: "r1", Result: events.CancelNotFound}, []string{"not found"}, nil},
	} {
		got := describeCancel(tt.reply)
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%+v: %q does not say %q", tt.reply, got, w)
			}
		}
		for _, n := range tt.not {
			if strings.Contains(got, n) {
				t.Errorf("%+v: %q says %q", tt.reply, got, n)
			}
		}
	}
}

// foundryq cancel when no worker confirms the cancel (it is recorded), and
// when a worker could not store it: exit 0 both times, and words that say
// what is known.
func TestCancelCommandUnconfirmed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := devstack.StartT(t, devstack.Config{NATS: natsembed.Config{StoreDir: t.TempDir()}})
	url := s.NATS.ClientURL()
	names := s.Client.Names()

	t.Run("nobody confirms", func(t *testing.T) {
		devstack.StandInWorker(t, s.Conn, names, nil)
		start := time.Now()
		code, stdout, stderr := runCmd(t, ctx, "cancel", "--nats-url", url, "unconf-1")
		if code != exitOK || !strings.Contains(stdout, "recorded, not yet confirmed") || !strings.Contains(stdout, "foundryq watch unconf-1") {
			t.Fatalf("code %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		// One timeout (the client's default) for the whole command.
		if took := time.Since(start); took > events.DefaultCancelTimeout+5*time.Second {
			t.Fatalf("took %s", took)
		}
	})

	t.Run("unrecorded", func(t *testing.T) {
		devstack.StandInWorker(t, s.Conn, names, &events.CancelReply{Result: events.CancelCancelling, Unrecorded: true})
		code, stdout, stderr := runCmd(t, ctx, "cancel", "--nats-url", url, "unrec-1")
		if code != exitOK || !strings.Contains(stdout, "could not be stored") || !strings.Contains(stdout, "Send the cancel again") {
			t.Fatalf("code %d, stdout %q, stderr %q", code, stdout, stderr)
		}
	})
}

// submit --fairness-key and --priority set the request's fields; a bad
// value is refused before anything is published (exit 2).
func TestSubmitFairnessFlags(t *testing.T) {
	t.Parallel()
	f := newFlags("submit", "submit")
	sf := addSubmitFlags(f)
	if err := f.parse([]string{"--model", "m", "--input", "hi", "--fairness-key", "team-a", "--priority", "low"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	req, err := sf.request()
	if err != nil || req.FairnessKey != "team-a" || req.Priority != events.PriorityLow {
		t.Fatalf("request %+v, %v", req, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, bad := range [][]string{{"--priority", "urgent"}, {"--fairness-key", "a.b"}} {
		args := append([]string{"submit", "--nats-url", "nats://127.0.0.1:1", "--model", "m", "--input", "hi"}, bad...)
		if code, _, stderr := runCmd(t, ctx, args...); code != exitUsage || !strings.Contains(stderr, strings.TrimPrefix(bad[0], "--")[:8]) {
			t.Errorf("submit %v: code %d, stderr %q; want a usage error naming the field", bad, code, stderr)
		}
	}
}
