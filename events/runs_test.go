package events_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/events"
)

func TestRuns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	base := time.Now().UTC().Add(-time.Hour)
	for i, st := range []events.RunState{
		{RunID: "a", Status: events.StatusCompleted},
		{RunID: "b", Status: events.StatusRunning},
		{RunID: "c", Status: events.StatusFailed},
		{RunID: "d", Status: events.StatusRunning},
		{RunID: "e", Status: events.StatusCancelling},
	} {
		st.UpdatedAt = base.Add(time.Duration(i) * time.Minute)
		if _, err := e.store.Create(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.res.State.Put(ctx, "junk", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	list := func(f events.RunFilter) []string {
		t.Helper()
		var ids []string
		for st, err := range e.client.Runs(ctx, f) {
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, st.RunID)
		}
		return ids
	}
	eq := func(got []string, want ...string) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("got %v, want %v", got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("got %v, want %v", got, want)
			}
		}
	}
	eq(list(events.RunFilter{}), "e", "d", "c", "b", "a")
	eq(list(events.RunFilter{Status: []events.RunStatus{events.StatusRunning}}), "d", "b")
	eq(list(events.RunFilter{UpdatedSince: base.Add(90 * time.Second)}), "e", "d", "c")
	eq(list(events.RunFilter{Limit: 1}), "e")
	eq(list(events.RunFilter{Status: []events.RunStatus{events.StatusCancelling}}), "e")
	eq(list(events.RunFilter{Status: []events.RunStatus{events.StatusCancelling, events.StatusRunning}}), "e", "d", "b")
	eq(list(events.RunFilter{Status: []events.RunStatus{events.StatusCancelled}}))

	for _, err := range e.client.Runs(ctx, events.RunFilter{Status: []events.RunStatus{"paused"}}) {
		if err == nil || !strings.Contains(err.Error(), "cancelling") {
			t.Fatalf("unknown status: %v, want an error listing the statuses", err)
		}
	}
	for _, s := range events.RunStatuses() {
		if err := (events.RunFilter{Status: []events.RunStatus{s}}).Validate(); err != nil {
			t.Errorf("status %s: %v", s, err)
		}
	}
	if got, want := events.StatusList(), "queued, running, waiting, cancelling, completed, failed or cancelled"; got != want {
		t.Errorf("StatusList() = %q, want %q", got, want)
	}
	for _, err := range e.client.Runs(ctx, events.RunFilter{Limit: -1}) {
		if err == nil || errors.Is(err, events.ErrStateNotFound) {
			t.Fatalf("negative limit: %v", err)
		}
	}
}
