package consumer

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
)

func TestNewEventMsg(t *testing.T) {
	n := events.Names{}
	ev := events.RunEvent{RunID: "r1", Seq: 7, Type: events.TypeTextDelta, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Text: "hi"}
	m, err := newEventMsg(n, ev, 42)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "foundryq.events.r1" || m.Header.Get(jetstream.MsgIDHeader) != "r1:7" || msgID("r1", 7) != "r1:7" ||
		m.Header.Get(events.HeaderType) != "text.delta" || m.Header.Get(events.HeaderUpstreamSeq) != "42" {
		t.Fatalf("msg %s %v", m.Subject, m.Header)
	}
	if up, ok := upstreamSeqOf(m.Header); !ok || up != 42 {
		t.Errorf("upstream seq = %d %v", up, ok)
	}
	want := `{"run_id":"r1","seq":7,"type":"text.delta","time":"2026-01-02T03:04:05Z","text":"hi"}`
	if string(m.Data) != want {
		t.Errorf("body %s\nwant %s", m.Data, want)
	}
	if m, _ := newEventMsg(n, ev, -1); m.Header.Get(events.HeaderUpstreamSeq) != "" {
		t.Error("upstream seq header set for -1")
	}
	if _, err := newEventMsg(n, events.RunEvent{RunID: "r1"}, 0); err == nil {
		t.Error("seq 0 accepted")
	}
	if _, err := newEventMsg(n, events.RunEvent{RunID: "a b", Seq: 1}, 0); !errors.Is(err, events.ErrBadRunID) {
		t.Errorf("bad run id: %v", err)
	}
}

func BenchmarkNewEventMsg(b *testing.B) {
	n := events.Names{}
	ev := events.RunEvent{RunID: "run_0123456789abcdefghij", Seq: 42, Type: events.TypeTextDelta, Time: time.Now(), Text: "a few coalesced tokens"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := newEventMsg(n, ev, 99); err != nil {
			b.Fatal(err)
		}
	}
}
