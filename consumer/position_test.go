package consumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/testkit"
)

// position asks the workers where run runID waits.
func (e *env) position(runID string) events.QueuePosition {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pos, err := e.client.QueuePosition(ctx, runID)
	if err != nil {
		e.t.Fatalf("queue position of %s: %v", runID, err)
	}
	return pos
}

// A worker answers where each queued run waits: its place among its
// lane's waiting runs, how many wait in its lane and at higher priority;
// a run a worker took is "taken", one never submitted "none".
func TestQueuePositions(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "pos", Concurrency: 1})
	e.block("blocker")
	normals := ids("n-", 4)
	for _, id := range normals {
		e.submit(quick(id, events.PriorityNormal, "acme"))
	}
	e.submit(quick("other", events.PriorityNormal, "globex"))
	e.submit(quick("hi", events.PriorityHigh, "acme"))
	e.submit(quick("lo", events.PriorityLow, "acme"))
	e.waitQueued(uint64(len(normals)) + 4)

	for i, id := range normals {
		pos := e.position(id)
		if pos.Where != events.WhereLane || pos.Position != i+1 || pos.LaneWaiting != len(normals) ||
			pos.HigherWaiting != 1 || pos.FairnessKey != "acme" || pos.Priority != events.PriorityNormal ||
			pos.SubmittedAt == nil || pos.PositionCapped {
			t.Fatalf("position of %s (the %d. of its lane) = %+v", id, i+1, pos)
		}
	}
	if pos := e.position("hi"); pos.Where != events.WhereLane || pos.Position != 1 || pos.HigherWaiting != 0 {
		t.Fatalf("position of the high run = %+v", pos)
	}
	// Every normal and high run waits before the low one.
	if pos := e.position("lo"); pos.Position != 1 || pos.HigherWaiting != len(normals)+2 {
		t.Fatalf("position of the low run = %+v", pos)
	}
	if pos := e.position("blocker"); pos.Where != events.WhereTaken || pos.FairnessKey == "" {
		t.Fatalf("position of the running run = %+v", pos)
	}
	if pos := e.position("never-submitted"); pos.Where != events.WhereNone {
		t.Fatalf("position of a run never submitted = %+v", pos)
	}

	// As runs start, the ones behind move up.
	e.cancel("blocker")
	e.waitEnded([]string{"hi", normals[0]}, 60*time.Second)
	testkit.Eventually(t, 60*time.Second, "the last normal run to move up or start", func() bool {
		pos := e.position(normals[3])
		return pos.Where == events.WhereTaken || pos.Where == events.WhereNone ||
			pos.Where == events.WhereLane && pos.Position < 4 && pos.HigherWaiting == 0
	})
}

// With no worker running, a position request says so at once.
func TestQueuePositionWithoutWorkers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := e.client.QueuePosition(ctx, "nobody-home")
	if !errors.Is(err, events.ErrNoWorker) {
		t.Fatalf("queue position with no worker: %v, want ErrNoWorker", err)
	}
	if _, err := e.client.QueuePosition(ctx, "not a run id"); !errors.Is(err, events.ErrBadRunID) {
		t.Fatalf("queue position of a bad run id: %v, want ErrBadRunID", err)
	}
}

// A worker counts a run's place up to MaxCountedPosition; a run further
// back is reported just past it, capped.
func TestQueuePositionCappedFarBack(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "far", Concurrency: 1})
	e.block("blocker")
	flood := ids("f-", events.MaxCountedPosition+2)
	for _, id := range flood {
		e.submit(quick(id, events.PriorityLow, "flood"))
	}
	e.waitQueued(uint64(len(flood)) + 1)
	if pos := e.position(flood[events.MaxCountedPosition-1]); pos.Position != events.MaxCountedPosition || pos.PositionCapped {
		t.Fatalf("position of the %d. run = %+v", events.MaxCountedPosition, pos)
	}
	last := e.position(flood[len(flood)-1])
	if last.Position != events.MaxCountedPosition+1 || !last.PositionCapped || last.LaneWaiting != len(flood) {
		t.Fatalf("position of the last of %d runs = %+v", len(flood), last)
	}
}
