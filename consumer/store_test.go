package consumer

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
)

func TestStateStore(t *testing.T) {
	t.Parallel()
	s := testStore(t)
	ctx := t.Context()

	if _, _, err := s.Get(ctx, "s1"); !errors.Is(err, events.ErrStateNotFound) {
		t.Fatalf("Get missing: %v", err)
	}
	if _, err := s.Update(ctx, "s1", func(*events.RunState) error { return nil }); !errors.Is(err, events.ErrStateNotFound) {
		t.Fatalf("Update missing: %v", err)
	}
	rev, err := s.Create(ctx, events.RunState{RunID: "s1", Status: events.StatusQueued})
	if err != nil || rev == 0 {
		t.Fatalf("Create: %d %v", rev, err)
	}
	if _, err := s.Create(ctx, events.RunState{RunID: "s1"}); !errors.Is(err, events.ErrStateExists) {
		t.Fatalf("second Create: %v", err)
	}
	st, gotRev, err := s.Get(ctx, "s1")
	if err != nil || gotRev != rev || st.Status != events.StatusQueued || st.CreatedAt.IsZero() {
		t.Fatalf("Get: %+v %d %v", st, gotRev, err)
	}

	// fn errors are returned and nothing is written.
	boom := errors.New("boom")
	if _, err := s.Update(ctx, "s1", func(st *events.RunState) error { st.Owner = "x"; return boom }); !errors.Is(err, boom) {
		t.Fatalf("fn error: %v", err)
	}
	if st, _, _ := s.Get(ctx, "s1"); st.Owner != "" {
		t.Fatalf("failed update was written: %+v", st)
	}
	if st, err := s.Update(ctx, "s1", func(*events.RunState) error { return errSkipUpdate }); err != nil || st.Status != events.StatusQueued {
		t.Fatalf("skip: %+v %v", st, err)
	}

	// Concurrent read-modify-write loses no update.
	const writers = 16
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			_, err := s.Update(ctx, "s1", func(st *events.RunState) error {
				st.Attempt++
				st.Owner = fmt.Sprintf("w%d", i)
				return nil
			})
			if err != nil {
				t.Errorf("writer %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	st, _, _ = s.Get(ctx, "s1")
	if st.Attempt != writers {
		t.Fatalf("Attempt = %d after %d concurrent increments", st.Attempt, writers)
	}

	// Upsert creates once under a concurrent race.
	for i := range writers {
		wg.Go(func() {
			_, err := s.Upsert(ctx, "s2", func(st *events.RunState, exists bool) error {
				if !exists {
					st.Status = events.StatusQueued
				}
				st.Attempt++
				return nil
			})
			if err != nil {
				t.Errorf("upsert %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	st, _, _ = s.Get(ctx, "s2")
	if st.Attempt != writers || st.Status != events.StatusQueued || st.RunID != "s2" {
		t.Fatalf("after concurrent upserts: %+v", st)
	}
	if _, _, err := s.Get(ctx, "bad id"); !errors.Is(err, events.ErrBadRunID) {
		t.Errorf("bad id: %v", err)
	}
}

func TestRunStateFinished(t *testing.T) {
	t.Parallel()
	for s, want := range map[events.RunStatus]bool{
		events.StatusQueued: false, events.StatusRunning: false,
		events.StatusCompleted: true, events.StatusFailed: true, events.StatusCancelled: true,
	} {
		if (events.RunState{Status: s}).Finished() != want {
			t.Errorf("%s: Finished != %v", s, want)
		}
	}
}

// testStore is a state store over a fresh bucket on an embedded server.
func testStore(t *testing.T) *stateStore {
	t.Helper()
	_, nc := natsembed.RunTest(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Provision(t.Context(), js, events.Names{}, ProvisionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return newStateStore(res.State, nc)
}
