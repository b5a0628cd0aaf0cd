package events_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
)

func TestEventTypes(t *testing.T) {
	t.Parallel()
	terminal := map[events.EventType]bool{
		events.TypeRunStarted: false, events.TypeTextDelta: false, events.TypeToolStarted: false,
		events.TypeToolCompleted: false, events.TypeToolFailed: false,
		events.TypeRunCompleted: true, events.TypeRunFailed: true, events.TypeRunCancelled: true,
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

func TestNewEventMsg(t *testing.T) {
	t.Parallel()
	n := events.Names{}
	ev := events.RunEvent{RunID: "r1", Seq: 7, Type: events.TypeTextDelta, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Text: "hi"}
	m, err := events.NewEventMsg(n, ev, 42)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "foundryq.events.r1" || m.Header.Get(jetstream.MsgIDHeader) != "r1:7" || events.MsgID("r1", 7) != "r1:7" ||
		m.Header.Get(events.HeaderType) != "text.delta" || m.Header.Get(events.HeaderUpstreamSeq) != "42" {
		t.Fatalf("msg %s %v", m.Subject, m.Header)
	}
	if up, ok := events.UpstreamSeq(m.Header); !ok || up != 42 {
		t.Errorf("UpstreamSeq = %d %v", up, ok)
	}
	want := `{"run_id":"r1","seq":7,"type":"text.delta","time":"2026-01-02T03:04:05Z","text":"hi"}`
	if string(m.Data) != want {
		t.Errorf("body %s\nwant %s", m.Data, want)
	}
	back, err := events.DecodeRunEvent(m.Data)
	if err != nil || back != ev {
		t.Fatalf("decode: %+v %v", back, err)
	}
	if m, _ := events.NewEventMsg(n, ev, -1); m.Header.Get(events.HeaderUpstreamSeq) != "" {
		t.Error("upstream seq header set for -1")
	}
	if _, err := events.NewEventMsg(n, events.RunEvent{RunID: "r1"}, 0); err == nil {
		t.Error("seq 0 accepted")
	}
	if _, err := events.NewEventMsg(n, events.RunEvent{RunID: "a b", Seq: 1}, 0); !errors.Is(err, events.ErrBadRunID) {
		t.Errorf("bad run id: %v", err)
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
