package events_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/foundryq/foundryq/events"
)

func TestEventTypes(t *testing.T) {
	t.Parallel()
	terminal := map[events.EventType]bool{
		events.TypeRunStarted: false, events.TypeTextDelta: false, events.TypeToolStarted: false,
		events.TypeToolCompleted: false, events.TypeToolFailed: false,
		events.TypeRunCompleted: true, events.TypeRunFailed: true, events.TypeRunCancelled: true,
		events.TypeInputRequired: false, events.TypeInputReceived: false, events.TypeStepStarted: false,
	}
	for typ, want := range terminal {
		if typ.Terminal() != want || !typ.Known() {
			t.Errorf("%s: Terminal=%v Known=%v", typ, typ.Terminal(), typ.Known())
		}
	}
	if events.EventType("run.paused").Known() {
		t.Error("unknown type is Known")
	}
}

func TestDecodeRunEvent(t *testing.T) {
	t.Parallel()
	ev := events.RunEvent{RunID: "r1", Seq: 7, Type: events.TypeTextDelta, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Text: "hi"}
	back, err := events.DecodeRunEvent([]byte(`{"run_id":"r1","seq":7,"type":"text.delta","time":"2026-01-02T03:04:05Z","text":"hi"}`))
	if err != nil || !reflect.DeepEqual(back, ev) {
		t.Fatalf("decode: %+v %v", back, err)
	}
	for _, bad := range []string{`{`, `{"run_id":"r1","type":"text.delta"}`, `[]`} {
		if _, err := events.DecodeRunEvent([]byte(bad)); !errors.Is(err, events.ErrBadEvent) {
			t.Errorf("DecodeRunEvent(%s): %v", bad, err)
		}
	}
	// Unknown fields are ignored: the contract grows additively.
	if _, err := events.DecodeRunEvent([]byte(`{"run_id":"r1","seq":1,"type":"run.started","future":1}`)); err != nil {
		t.Errorf("unknown event field: %v", err)
	}
}
