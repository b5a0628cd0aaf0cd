package events_test

import (
	"errors"
	"testing"

	"github.com/foundryq/foundryq/events"
)

// Events returns what is stored now, for a running run as for a finished
// one, and returns without waiting for more.
func TestEvents(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)

	none, err := e.client.Events(ctx, "nothing-yet")
	if err != nil || len(none) != 0 {
		t.Fatalf("a run without events: %v, %v", none, err)
	}
	if _, err := e.client.Events(ctx, "bad id"); !errors.Is(err, events.ErrBadRunID) {
		t.Fatalf("a bad run id: %v", err)
	}

	p := &publisher{t: t, e: e, runID: "hist"}
	want := []events.RunEvent{p.publish(events.RunEvent{Type: events.TypeRunStarted, ResponseID: "resp_1", Attempt: 1}), p.text("a"), p.text("b")}
	got, err := e.client.Events(ctx, "hist")
	if err != nil || !sameEvents(got, want) {
		t.Fatalf("a running run: %v, %v; want %v", got, err, want)
	}
	want = append(want, p.publish(events.RunEvent{Type: events.TypeRunCompleted, Status: "completed", Usage: &events.Usage{TotalTokens: 3}}))
	got, err = e.client.Events(ctx, "hist")
	if err != nil || !sameEvents(got, want) {
		t.Fatalf("a finished run: %v, %v; want %v", got, err, want)
	}
}
