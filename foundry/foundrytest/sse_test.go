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
		obfuscate := i%2 == 0
		frame := appendDeltaFrame(nil, i*7, "msg_abc", i%3, 42, i, obfuscate)
		var obfuscation string
		if obfuscate {
			// The field's value is random: take it from the frame, check its shape.
			_, after, _ := bytes.Cut(frame, []byte(`"obfuscation":"`))
			v, _, _ := bytes.Cut(after, []byte(`"`))
			if len(v) < 4 || len(v) > 19 || strings.Trim(string(v), obfuscationAlphabet) != "" {
				t.Fatalf("token %d: obfuscation %q", i, v)
			}
			obfuscation = string(v)
		}
		want := appendFrame(nil, evTextDelta, mustJSON(t, struct {
			Type           string `json:"type"`
			SequenceNumber int    `json:"sequence_number"`
			ItemID         string `json:"item_id"`
			OutputIndex    int    `json:"output_index"`
			ContentIndex   int    `json:"content_index"`
			Delta          string `json:"delta"`
			Logprobs       []any  `json:"logprobs"`
			Obfuscation    string `json:"obfuscation,omitempty"`
		}{evTextDelta, i * 7, "msg_abc", i % 3, 0, string(appendToken(nil, 42, i)), []any{}, obfuscation}))
		if !bytes.Equal(frame, want) {
			t.Fatalf("token %d:\n got %q\nwant %q", i, frame, want)
		}
	}
}

func TestFramesParse(t *testing.T) {
	t.Parallel()
	var buf []byte
	buf = appendFrame(buf, evCreated, mustJSON(t, lifecycleEvent{Type: evCreated, SequenceNumber: 0, Response: &responseObject{ID: "resp_1"}}))
	buf = appendDeltaFrame(buf, 1, "msg_1", 0, 1, 0, true)
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
