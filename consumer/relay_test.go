package consumer

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/foundryq/foundryq/events"
)

// Text merged while a publish is held up (a NATS outage, a slow store) is
// split into events of at most maxEventText bytes, at rune boundaries, and
// only the part that ends an upstream delta carries its sequence number.
func TestRelaySplitsText(t *testing.T) {
	r := &relay{metrics: newMetrics(nil, nil), wake: make(chan struct{}, 1), maxText: eventTextLimit(1 << 20)}
	var want strings.Builder
	chunk := strings.Repeat("héllo wörld ", 700) // ~9.1 KB, multibyte runes
	for i := range 12 {
		r.add(events.RunEvent{Type: events.TypeTextDelta, Text: chunk}, int64(i))
		want.WriteString(chunk)
	}
	huge := strings.Repeat("€", r.maxText) // one upstream delta of 3 × maxText bytes
	r.add(events.RunEvent{Type: events.TypeTextDelta, Text: huge}, 99)
	want.WriteString(huge)

	var got strings.Builder
	for i, pe := range r.pending {
		if len(pe.ev.Text) > r.maxText {
			t.Fatalf("event %d holds %d bytes, more than %d", i, len(pe.ev.Text), r.maxText)
		}
		if !utf8.ValidString(pe.ev.Text) {
			t.Fatalf("event %d was cut inside a rune", i)
		}
		got.WriteString(pe.ev.Text)
	}
	if got.String() != want.String() {
		t.Fatal("the split text differs from what was added")
	}
	last := r.pending[len(r.pending)-1]
	if last.upstreamSeq != 99 {
		t.Fatalf("last part carries upstream seq %d, want 99", last.upstreamSeq)
	}
	for _, pe := range r.pending[len(r.pending)-3 : len(r.pending)-1] {
		if pe.upstreamSeq == 99 {
			t.Fatal("a part before the end of an upstream delta carries its sequence number: a new owner would skip the rest")
		}
	}
	if n := len(r.pending); n < 7 {
		t.Fatalf("%d events for %d bytes", n, want.Len())
	}
}

func TestEventTextLimit(t *testing.T) {
	for _, tt := range []struct {
		maxPayload int64
		want       int
	}{{1 << 20, maxEventText}, {64 << 10, 8 << 10}, {1024, 512}} {
		if got := eventTextLimit(tt.maxPayload); got != tt.want {
			t.Errorf("max payload %d: %d, want %d", tt.maxPayload, got, tt.want)
		}
	}
}
