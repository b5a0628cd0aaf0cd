package consumer

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
)

// A JetStream cluster answers a listing of the queue's consumers only
// once every consumer's leader has answered, or after 4 s when one has
// none: a lane's consumer just created (a new fairness key, or one the
// server removed while idle) or between leaders. Measured on the bench's
// three-node cluster: every worker's listing took 4.0 s right after the
// first lane was created, and every run of the first load started 4.2 s
// after its submit. A worker must not hold the runs of the lanes it knows
// for a listing that late.
func TestLateLaneListingDoesNotHoldRuns(t *testing.T) {
	t.Parallel()
	_, client := lateListingWorker(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := client.Submit(ctx, events.RunRequest{RunID: "late-listing-1", Model: "m", Input: json.RawMessage(`"hi"`)}); err != nil {
		t.Fatal(err)
	}
	startedAt(ctx, t, client, "late-listing-1")
}

// lateListingWorker runs a worker of the given concurrency (0: the
// default) whose every listing of the lanes is as late as the server's
// bound, and later.
func lateListingWorker(t *testing.T, concurrency int) (*Worker, *events.Client) {
	t.Helper()
	_, nc := natsembed.RunTest(t)
	emu := foundrytest.NewServer(foundrytest.Config{APIKey: "k"})
	t.Cleanup(emu.Close)
	up, err := foundry.New(foundry.Config{BaseURL: emu.BaseURL(), APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(nc, up, Config{WorkerID: "late-listing", Concurrency: concurrency})
	if err != nil {
		t.Fatal(err)
	}
	list := w.sched.listConsumers
	w.sched.listConsumers = func(ctx context.Context) jetstream.ConsumerInfoLister {
		select {
		case <-ctx.Done():
		case <-time.After(30 * time.Second):
		}
		return list(ctx)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the worker did not stop")
		}
	})
	client, err := events.NewClient(nc, events.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return w, client
}

// A lane another worker filled while the listing is late is one this
// worker has not heard of. It must not start runs of a lower priority
// while runs wait in a higher one: it asks the queue stream, whose leader
// answers at once, which lanes of a higher priority hold runs.
func TestLateListingTakesHigherLanesFirst(t *testing.T) {
	t.Parallel()
	w, client := lateListingWorker(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Another worker moved a high-priority run to its lane and created
	// the lane's consumer.
	high := events.Fairness{Priority: events.PriorityHigh, Key: "other"}
	js := w.js
	body, err := json.Marshal(events.RunRequest{RunID: "late-high", Model: "m", Input: json.RawMessage(`"hi"`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, w.names.LaneSubject(high.Priority, high.Key, "late-high"), body); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, w.names.QueueStream(), events.LaneConsumerConfig(w.names, w.cfg.Provision, high)); err != nil {
		t.Fatal(err)
	}
	// This worker moves a low-priority run itself, so it knows that lane.
	if _, err := client.Submit(ctx, events.RunRequest{RunID: "late-low", Model: "m", Input: json.RawMessage(`"hi"`), Priority: events.PriorityLow}); err != nil {
		t.Fatal(err)
	}

	highStart := startedAt(ctx, t, client, "late-high")
	lowStart := startedAt(ctx, t, client, "late-low")
	if lowStart.Before(highStart) {
		t.Fatalf("the low-priority run started at %s, before the high-priority run waiting since before it (%s)",
			lowStart.Format(time.RFC3339Nano), highStart.Format(time.RFC3339Nano))
	}
}

// startedAt waits for run id's run.started and returns its time.
func startedAt(ctx context.Context, t *testing.T, client *events.Client, id string) time.Time {
	t.Helper()
	watch := client.Watch(ctx, id, events.WatchOptions{})
	defer watch.Close()
	for {
		ev, err := watch.Next(ctx)
		if err != nil {
			t.Fatalf("no run.started for %s while the lanes' listing is late: %v", id, err)
		}
		if ev.Type == events.TypeRunStarted {
			return ev.Time
		}
	}
}

// While the listing is late, a poll lists the subjects of the lanes of a
// higher priority only when a run newer than those it added came, or a
// listing came since: otherwise one message get per priority above.
func TestHigherLanesListedOnlyWhenNewRunsCame(t *testing.T) {
	t.Parallel()
	w := relayWorker(t)
	w.log = zerolog.Nop()
	s := newScheduler(w)
	lists := 0
	list := s.listSubjects
	s.listSubjects = func(ctx context.Context, filter string) (map[string]uint64, error) {
		lists++
		return list(ctx, filter)
	}
	low := events.Fairness{Priority: events.PriorityLow, Key: "mine"}
	known := []waitingLane{{lane: low, name: w.names.LaneConsumer(low), waiting: 3, rank: low.Priority.Rank()}}
	s.lastWaiting = slices.Clone(known)
	queue := func(f events.Fairness, runID string) {
		t.Helper()
		if _, err := w.js.Publish(t.Context(), w.names.LaneSubject(f.Priority, f.Key, runID), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	waiting := func(f events.Fairness) int {
		t.Helper()
		i := laneIndex(s.lastWaiting, w.names.LaneConsumer(f))
		if i < 0 {
			t.Fatalf("lane %v not among the known lanes: %+v", f, s.lastWaiting)
		}
		return s.lastWaiting[i].waiting
	}
	check := func(what string, wantLists int) {
		t.Helper()
		s.higherLanes(t.Context())
		if lists != wantLists {
			t.Fatalf("%s: %d listings of the higher lanes' subjects, want %d", what, lists, wantLists)
		}
	}

	check("no run of a higher priority", 0)
	a := events.Fairness{Priority: events.PriorityHigh, Key: "a"}
	queue(a, "h1")
	queue(a, "h2")
	check("two runs in a new high lane", 1)
	if got := waiting(a); got != 2 {
		t.Fatalf("lane %v: %d waiting, want 2", a, got)
	}
	s.tookKnown(w.names.LaneConsumer(a), 2, 0) // taken by others meanwhile
	check("nothing new", 1)
	if got := waiting(a); got != 0 {
		t.Fatalf("lane %v found empty by a take: %d waiting, want 0", a, got)
	}
	b := events.Fairness{Priority: events.PriorityNormal, Key: "b"}
	queue(b, "n1")
	check("a run in a new normal lane", 3) // both priorities above low hold runs
	if waiting(a) != 2 || waiting(b) != 1 {
		t.Fatalf("after a new run: lanes %v %d and %v %d waiting, want 2 and 1", a, waiting(a), b, waiting(b))
	}
	s.listed(&listing{gen: 1, waiting: slices.Clone(known)})
	check("a listing came", 5)
}

// A lane asked for no runs is not fetched from: a pull of none is an
// error (nats: batch size must be at least 1), and a failed fetch costs
// the poll a pause. probe asked its last due lanes for none once the first
// had filled the slots: after a NATS restart, with many lanes' jobs due
// again, each poll paused for each of them, and runs of a lower priority
// started first meanwhile (chaos: 7 runs out of order by up to 1.5 s).
func TestTakeOfNoneFetchesNothing(t *testing.T) {
	t.Parallel()
	w := relayWorker(t)
	names := w.names
	var logs strings.Builder
	w.log = zerolog.New(&logs)
	f := events.Fairness{Priority: events.PriorityNormal, Key: "k"}
	if _, err := w.res.Queue.CreateOrUpdateConsumer(t.Context(), events.LaneConsumerConfig(names, ProvisionConfig{}, f)); err != nil {
		t.Fatal(err)
	}
	s := newScheduler(w)
	start := time.Now()
	if got := s.take(t.Context(), names.LaneConsumer(f), 0); got != 0 {
		t.Fatalf("take of none started %d runs", got)
	}
	if took := time.Since(start); logs.Len() > 0 || took >= 250*time.Millisecond {
		t.Fatalf("take of none took %s and logged %q", took, logs.String())
	}
}
