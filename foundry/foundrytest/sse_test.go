package foundrytest

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestDeltaFrameMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for i := 0; i < 200; i++ {
		frame := appendDeltaFrame(nil, i*7, "msg_abc", i%3, 42, i)
		want := appendFrame(nil, evTextDelta, mustJSON(t, struct {
			Type           string `json:"type"`
			SequenceNumber int    `json:"sequence_number"`
			ItemID         string `json:"item_id"`
			OutputIndex    int    `json:"output_index"`
			ContentIndex   int    `json:"content_index"`
			Delta          string `json:"delta"`
			Logprobs       []any  `json:"logprobs"`
		}{evTextDelta, i * 7, "msg_abc", i % 3, 0, string(appendToken(nil, 42, i)), []any{}}))
		if !bytes.Equal(frame, want) {
			t.Fatalf("token %d:\n got %q\nwant %q", i, frame, want)
		}
	}
}

func TestFramesParse(t *testing.T) {
	t.Parallel()
	var buf []byte
	buf = appendFrame(buf, evCreated, mustJSON(t, lifecycleEvent{Type: evCreated, SequenceNumber: 0, Response: &responseObject{ID: "resp_1"}}))
	buf = appendDeltaFrame(buf, 1, "msg_1", 0, 1, 0)
	s := newSSEReader(bytes.NewReader(buf))
	for i, typ := range []string{evCreated, evTextDelta} {
		ev, err := s.next()
		if err != nil || ev.Type != typ || *ev.SequenceNumber != i {
			t.Fatalf("event %d: %+v %v", i, ev, err)
		}
	}
}

func TestVocabularyNeedsNoEscaping(t *testing.T) {
	t.Parallel()
	for _, w := range words {
		if data, _ := json.Marshal(w); string(data) != `"`+w+`"` || strings.ContainsAny(w, " \n") {
			t.Fatalf("word %q needs escaping", w)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
