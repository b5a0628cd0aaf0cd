package consumer

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
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
func testStore(t testing.TB) *stateStore {
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

// TestStateStoreWritesOnItsLastWrite: a run's owner writes its record
// several times in a row; after its first write it compares-and-sets
// against what it wrote instead of asking the stream leader again, and a
// record someone else wrote meanwhile is read and kept.
func TestStateStoreWritesOnItsLastWrite(t *testing.T) {
	t.Parallel()
	s := testStore(t)
	other, nc := newStateStore(s.kv, s.nc), s.nc
	// Channel subscriptions: the connection's reader delivers to them
	// before it reads the flush's answer, so that after a flush every
	// request sent before it is in the channel (an asynchronous handler
	// may not have run yet: counting in one made this test flaky).
	reads, direct := make(chan *nats.Msg, 64), make(chan *nats.Msg, 64)
	for subject, ch := range map[string]chan *nats.Msg{"$JS.API.STREAM.MSG.GET.>": reads, "$JS.API.DIRECT.GET.>": direct} {
		sub, err := nc.ChanSubscribe(subject, ch)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	ctx := t.Context()
	// sent counts the requests that ch holds and empties it.
	sent := func(ch chan *nats.Msg) (n int) {
		for {
			select {
			case <-ch:
				n++
			default:
				return n
			}
		}
	}
	// readsBy runs f and returns how many leader reads it sent.
	readsBy := func(f func()) int {
		t.Helper()
		sent(reads)
		f()
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		return sent(reads)
	}
	update := func(s *stateStore, fn func(*events.RunState) error) events.RunState {
		t.Helper()
		st, err := s.Update(ctx, "w1", fn)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	if _, err := s.Create(ctx, events.RunState{RunID: "w1", Status: events.StatusQueued}); err != nil {
		t.Fatal(err)
	}
	n := readsBy(func() {
		for range 3 {
			update(s, func(st *events.RunState) error { st.Attempt++; return nil })
		}
	})
	if d := sent(direct); n != 0 || d != 1 {
		t.Fatalf("three updates in a row sent %d leader reads and %d direct gets, want 0 and 1 (the first)", n, d)
	}
	if st, _, err := s.Get(ctx, "w1"); err != nil || st.Attempt != 3 {
		t.Fatalf("stored after three updates: %+v %v", st, err)
	}

	// Another writer's change is kept: the revision check fails and the
	// update reads the record.
	update(other, func(st *events.RunState) error { st.Owner = "other"; return nil })
	var got events.RunState
	if n := readsBy(func() { got = update(s, func(st *events.RunState) error { st.Attempt++; return nil }) }); n != 1 {
		t.Fatalf("an update after another writer's sent %d leader reads, want 1", n)
	}
	if got.Owner != "other" || got.Attempt != 4 {
		t.Fatalf("update after another writer's: %+v", got)
	}

	// A decision not to write is taken on the record as read: here the
	// last write says "owned" (skip), the record says nobody owns it.
	update(s, func(st *events.RunState) error { st.Owner = "x"; return nil })
	update(other, func(st *events.RunState) error { st.Owner = ""; return nil })
	got = update(s, func(st *events.RunState) error {
		if st.Owner != "" {
			return errSkipUpdate
		}
		st.Owner = "me"
		return nil
	})
	if got.Owner != "me" {
		t.Fatalf("skipped on its own last write instead of the record: %+v", got)
	}
	if st, _, err := s.Get(ctx, "w1"); err != nil || st.Owner != "me" {
		t.Fatalf("stored: %+v %v", st, err)
	}

	// A finished record is not kept, nor a run the worker forgot.
	update(s, func(st *events.RunState) error { st.Status = events.StatusCompleted; return nil })
	if _, _, ok := s.last.get("w1"); ok {
		t.Fatal("a finished run's record is still kept")
	}
	if _, err := s.Create(ctx, events.RunState{RunID: "w2", Status: events.StatusQueued}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, "w2", func(st *events.RunState) error { st.Attempt = 1; return nil }); err != nil {
		t.Fatal(err)
	}
	s.forget("w2")
	if _, _, ok := s.last.get("w2"); ok {
		t.Fatal("a forgotten run's record is still kept")
	}
}
