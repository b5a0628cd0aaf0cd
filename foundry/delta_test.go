package foundry

import (
	"reflect"
	"testing"
)

var deltaCases = []struct {
	name, data string
	fast       bool
}{
	{"plain", `{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi ","logprobs":[],"sequence_number":7}`, true},
	{"escapes", `{"type":"response.output_text.delta","delta":"a\"b\n\u00e9\\","sequence_number":8}`, true},
	{"unicode", `{"type":"response.output_text.delta","delta":"héllo ✓","sequence_number":9,"obfuscation":"xyz"}`, true},
	{"nested skip", `{"type":"response.output_text.delta","delta":"x","logprobs":[{"token":"x","bytes":[1,2],"top":[{"a":null}]}],"sequence_number":1}`, true},
	{"no sequence number", `{"type":"response.output_text.delta","delta":"x"}`, true},
	{"spaces", " { \"type\" : \"response.output_text.delta\" , \"delta\" : \"x\" , \"sequence_number\" : 3 } ", true},
	{"other type", `{"type":"response.output_text.done","text":"x","sequence_number":1}`, false},
	{"duplicate delta", `{"type":"response.output_text.delta","delta":"a","delta":"b"}`, false},
	{"top-level error", `{"type":"response.output_text.delta","delta":"a","error":{"message":"boom"}}`, false},
	{"float sequence", `{"type":"response.output_text.delta","delta":"a","sequence_number":1.5}`, false},
	{"trailing garbage", `{"type":"response.output_text.delta","delta":"a"}x`, false},
	{"invalid utf8", "{\"type\":\"response.output_text.delta\",\"delta\":\"\xff\"}", false},
	{"escaped key", `{"type":"response.output_text.delta","del\u0074a":"a"}`, false},
	{"null delta", `{"type":"response.output_text.delta","delta":null}`, false},
}

// The fast path agrees with the general decoder wherever it answers.
func TestDecodeDeltaMatchesGeneralDecoder(t *testing.T) {
	for _, tc := range deltaCases {
		t.Run(tc.name, func(t *testing.T) {
			var fast Event
			ok := decodeDelta([]byte(tc.data), &fast)
			if ok != tc.fast {
				t.Fatalf("fast path took it: %v, want %v", ok, tc.fast)
			}
			if ok {
				checkSameAsGeneral(t, []byte(tc.data), fast)
			}
		})
	}
}

func checkSameAsGeneral(t *testing.T, data []byte, fast Event) {
	t.Helper()
	var slow Event
	var w wireEvent
	if err := decodeEventInto(nil, data, &slow, &w); err != nil {
		t.Fatalf("fast path accepted %q, general decoder says %v", data, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("decoders differ on %q:\nfast    %+v\ngeneral %+v", data, fast, slow)
	}
}

func FuzzDecodeDelta(f *testing.F) {
	for _, tc := range deltaCases {
		f.Add([]byte(tc.data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast Event
		if decodeDelta(data, &fast) {
			checkSameAsGeneral(t, data, fast)
		}
	})
}
