package events_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

// storedCancel reports whether a cancel for runID is on the cancels stream.
func storedCancel(t *testing.T, ctx context.Context, s jetstream.Stream, names events.Names, runID string) bool {
	t.Helper()
	_, err := s.GetLastMsgForSubject(ctx, names.CancelRecordSubject(runID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// A queue group with a member that never answers and one that does: every
// Cancel ends within its one timeout with cancelling and no error, whichever
// member the requests went to (the cancel is on the cancels stream, which
// the owner follows).
func testCancelSilentQueueMember(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	const timeout = 1500 * time.Millisecond
	c, err := events.NewClient(e.nc, events.ClientConfig{CancelTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	dropped := devstack.StandInWorker(t, e.nc, e.names, nil)
	answered := devstack.StandInWorker(t, e.nc, e.names, &events.CancelReply{Result: events.CancelCancelling})
	// At least 12 cancels, and more until each member had one (random
	// routing: 12 leave the silent one none once in 4096 runs).
	for i := 0; i < 12 || (dropped.Load() == 0 || answered.Load() == 0) && i < 40; i++ {
		id := fmt.Sprintf("silent%d", i)
		start := time.Now()
		reply, err := c.Cancel(ctx, id, "")
		took := time.Since(start)
		if err != nil || reply.Result != events.CancelCancelling || reply.RunID != id {
			t.Fatalf("cancel %d: %+v, %v; want cancelling and no error", i, reply, err)
		}
		// The bound is the one timeout; the slack is for a loaded machine.
		if took > timeout+time.Second {
			t.Fatalf("cancel %d took %s, beyond its timeout %s", i, took, timeout)
		}
		if !storedCancel(t, ctx, e.res.Cancels, e.names, id) {
			t.Fatalf("cancel %d: not on the cancels stream", i)
		}
	}
	if dropped.Load() == 0 || answered.Load() == 0 {
		t.Fatalf("the silent member dropped %d requests and the other answered %d: the test did not exercise both", dropped.Load(), answered.Load())
	}
}

// Only a silent member: nobody confirms, but the cancel is stored, so
// Cancel answers cancelling (no error) once its timeout is spent, after
// asking more than once.
func testCancelNobodyAnswers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	const timeout = time.Second
	c, err := events.NewClient(e.nc, events.ClientConfig{CancelTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	dropped := devstack.StandInWorker(t, e.nc, e.names, nil)
	start := time.Now()
	reply, err := c.Cancel(ctx, "mute1", "stop")
	took := time.Since(start)
	if err != nil || reply != (events.CancelReply{RunID: "mute1", Result: events.CancelCancelling}) {
		t.Fatalf("reply %+v, err %v; want cancelling and no error", reply, err)
	}
	if took > timeout+time.Second {
		t.Fatalf("took %s, beyond the timeout %s", took, timeout)
	}
	if n := dropped.Load(); n < 2 {
		t.Fatalf("the request was sent %d times, want a retry", n)
	}
	if !storedCancel(t, ctx, e.res.Cancels, e.names, "mute1") {
		t.Fatal("the cancel is not on the cancels stream")
	}

	// A caller's earlier deadline bounds the call instead.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	reply, err = c.Cancel(short, "mute2", "")
	if err != nil || reply.Result != events.CancelCancelling {
		t.Fatalf("with a short ctx: %+v, %v", reply, err)
	}
	if took := time.Since(start); took > timeout {
		t.Fatalf("with a 300ms ctx the call took %s", took)
	}
}

// When the request goes unanswered, the run's record answers if it can:
// a finished run is already_finished with its terminal and Foundry's
// status, a cancelling one (or one with a cancel on record) cancelling.
func testCancelUnansweredReadsTheRecord(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	c, err := events.NewClient(e.nc, events.ClientConfig{CancelTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	devstack.StandInWorker(t, e.nc, e.names, nil)
	now := time.Now().UTC()
	for _, st := range []events.RunState{
		{RunID: "done1", Status: events.StatusCompleted, Terminal: events.TypeRunCompleted, UpstreamStatus: "completed"},
		{RunID: "cing1", Status: events.StatusCancelling, Owner: "w1", Cancel: &events.CancelRecord{Reason: events.ReasonRequested, At: now}},
		{RunID: "rec1", Status: events.StatusRunning, Owner: "w1", Cancel: &events.CancelRecord{Reason: events.ReasonRequested, At: now}},
	} {
		if _, err := e.store.Create(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		id   string
		want events.CancelReply
	}{
		{"done1", events.CancelReply{RunID: "done1", Result: events.CancelAlreadyFinished, Terminal: events.TypeRunCompleted, UpstreamStatus: "completed"}},
		{"cing1", events.CancelReply{RunID: "cing1", Result: events.CancelCancelling}},
		{"rec1", events.CancelReply{RunID: "rec1", Result: events.CancelCancelling}},
	} {
		start := time.Now()
		reply, err := c.Cancel(ctx, tt.id, "")
		if err != nil || reply != tt.want {
			t.Fatalf("%s: %+v, %v; want %+v", tt.id, reply, err, tt.want)
		}
		// Answered after the first unanswered request, not at the end.
		if took := time.Since(start); took > 2500*time.Millisecond {
			t.Errorf("%s: took %s; the record should answer after the first slice", tt.id, took)
		}
	}
}

// fullStore starts a server whose JetStream store is small, provisions it,
// and fills the store with a stream of its own until JetStream refuses
// writes.
func fullStore(t *testing.T) (*nats.Conn, events.Names, consumer.Resources) {
	t.Helper()
	s := natsembed.StartT(t, natsembed.Config{InProcess: true, MaxStore: 2 << 20})
	nc, err := s.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	names := events.Names{}
	res, err := consumer.Provision(ctx, js, names, consumer.ProvisionConfig{})
	if err != nil {
		t.Fatalf("provision: %v", err)
	}
	testkit.FillStore(t, ctx, js)
	return nc, names, res
}

// JetStream's store is full, so the cancel cannot be stored: Cancel still
// sends the request and returns the worker's reply (unrecorded); with
// nobody to answer either it is an error that says so.
func testCancelStoreFull(t *testing.T) {
	t.Parallel()
	nc, names, res := fullStore(t)
	ctx := testCtx(t)
	c, err := events.NewClient(nc, events.ClientConfig{CancelTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("no worker", func(t *testing.T) {
		_, err := c.Cancel(ctx, "full0", "")
		if !errors.Is(err, events.ErrCancelUndelivered) || !strings.Contains(err.Error(), "FOUNDRYQ_CANCELS") {
			t.Fatalf("err = %v, want ErrCancelUndelivered naming the cancels stream", err)
		}
	})

	// Each subtest's stand-in leaves the queue group when it ends.
	t.Run("silent worker", func(t *testing.T) {
		devstack.StandInWorker(t, nc, names, nil)
		start := time.Now()
		_, err := c.Cancel(ctx, "full1", "")
		if !errors.Is(err, events.ErrCancelUndelivered) {
			t.Fatalf("err = %v, want ErrCancelUndelivered", err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("took %s with a 1s timeout", took)
		}
	})

	t.Run("answering worker", func(t *testing.T) {
		answered := devstack.StandInWorker(t, nc, names, &events.CancelReply{Result: events.CancelCancelling, Unrecorded: true})
		reply, err := c.Cancel(ctx, "full2", "stop")
		if err != nil || reply != (events.CancelReply{RunID: "full2", Result: events.CancelCancelling, Unrecorded: true}) {
			t.Fatalf("reply %+v, err %v; want the worker's unrecorded cancelling", reply, err)
		}
		if answered.Load() != 1 {
			t.Fatalf("the worker got %d requests", answered.Load())
		}
		if storedCancel(t, ctx, res.Cancels, names, "full2") {
			t.Fatal("a cancel was stored in a full store")
		}
	})
}

// The cancels stream at its max_bytes (discard new) refuses the record
// with the same error code as a cancel already on record (10077); Cancel
// must not take it for one: it still asks the workers, and with none
// answering it reports the cancel undelivered instead of cancelling.
func testCancelStreamMaxBytes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	capStream(t, ctx, e.js, e.res.Cancels, 4<<10)
	// Large records first, then empty ones until not even an empty cancel
	// fits.
	for _, size := range []int{512, 0} {
		for i := 0; ; i++ {
			if i > 1000 {
				t.Fatal("the cancels stream never filled up")
			}
			if _, err := e.js.Publish(ctx, e.names.CancelRecordSubject(fmt.Sprintf("fill%d-%d", size, i)), make([]byte, size)); err != nil {
				t.Logf("cancels stream full after %d records of %d bytes: %v", i, size, err)
				break
			}
		}
	}
	c, err := events.NewClient(e.nc, events.ClientConfig{CancelTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx, "mb1", ""); !errors.Is(err, events.ErrCancelUndelivered) {
		t.Fatalf("no worker: err = %v, want ErrCancelUndelivered", err)
	}
	devstack.StandInWorker(t, e.nc, e.names, &events.CancelReply{Result: events.CancelCancelling, Unrecorded: true})
	reply, err := c.Cancel(ctx, "mb2", "")
	if err != nil || !reply.Unrecorded || reply.Result != events.CancelCancelling {
		t.Fatalf("with a worker: %+v, %v", reply, err)
	}
}

// Client.Cancel when workers stay silent or JetStream is full: one timeout, no error once the cancel is on record.
func TestClientCancelPastSilence(t *testing.T) {
	t.Run("a silent queue member", testCancelSilentQueueMember)
	t.Run("nobody answers", testCancelNobodyAnswers)
	t.Run("an unanswered request reads the record", testCancelUnansweredReadsTheRecord)
	t.Run("the store is full", testCancelStoreFull)
	t.Run("the cancels stream is at its max_bytes", testCancelStreamMaxBytes)
}

// capStream sets a stream's max_bytes (it discards new messages past it),
// so that a test can fill it with a few writes.
func capStream(t *testing.T, ctx context.Context, js jetstream.JetStream, s jetstream.Stream, maxBytes int64) {
	t.Helper()
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	cfg.MaxBytes = maxBytes
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}
