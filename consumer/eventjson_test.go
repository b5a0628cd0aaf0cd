package consumer

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/foundryq/foundryq/events"
)

// TestTextDeltaJSONMatchesEncodingJSON: the fast path writes exactly the
// bytes encoding/json writes, for texts with every kind of character that
// needs escaping, invalid UTF-8, and random bytes.
func TestTextDeltaJSONMatchesEncodingJSON(t *testing.T) {
	texts := []string{"", " hello", "Once upon a time", "<b>&amp;</b>", "quote \" backslash \\ slash /",
		"\b\f\n\r\t\x00\x01\x1f\x7f", "héllo wörld €𝄞", "line\u2028sep\u2029para", "bad \xff\xfe utf8 \xc3", "\xe2\x82"}
	rng := rand.New(rand.NewPCG(7, 11))
	for range 2000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		texts = append(texts, string(b))
	}
	times := []time.Time{time.Date(2026, 12, 3, 4, 5, 6, 789000000, time.UTC), time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 1, time.FixedZone("x", 3600)), {}}
	for i, text := range texts {
		ev := events.RunEvent{RunID: "run_0123-abc", Seq: uint64(i + 1), Type: events.TypeTextDelta, Time: times[i%len(times)], Text: text}
		want, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendTextDeltaJSON(nil, &ev)
		if !ok || string(got) != string(want) {
			t.Fatalf("text %q:\n got %s\nwant %s", text, got, want)
		}
	}
	// Anything but a bare text.delta takes the general encoder.
	for _, ev := range []events.RunEvent{
		{RunID: "r", Seq: 1, Type: events.TypeRunStarted},
		{RunID: "r", Seq: 1, Type: events.TypeTextDelta, Text: "x", Status: "s"},
		{RunID: "r", Seq: 1, Type: events.TypeTextDelta, Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		if out, ok := appendTextDeltaJSON(nil, &ev); ok || len(out) != 0 {
			t.Errorf("%+v took the fast path", ev)
		}
	}
}
