package foundry

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
)

// deltaData is a response.output_text.delta as Azure sends it (with logprobs and
// the obfuscation padding).
var deltaData = []byte(`{"type":"response.output_text.delta","content_index":0,"delta":" world","item_id":"msg_0a8b2c3d4e5f60718293a4b5c6d7e8f90123456789abcdef","logprobs":[],"obfuscation":"Xy3kq9Zb","output_index":0,"sequence_number":42}`)

var deltaFrame = append(append([]byte("event: response.output_text.delta\ndata: "), deltaData...), "\n\n"...)

// repeatReader yields frame over and over.
type repeatReader struct {
	frame []byte
	off   int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.frame[r.off:])
		n += c
		r.off = (r.off + c) % len(r.frame)
	}
	return n, nil
}

func (r *repeatReader) Close() error { return nil }

// BenchmarkDecodeDelta compares the hot path (one response.output_text.delta) of
// this package with openai-go's ssestream + ResponseStreamEventUnion, on the
// same bytes:
//
//	decode/*: the JSON decode of one event's data only (foundry: the
//	  delta fast path; foundry-general: the decoder for every other event);
//	stream/*: SSE framing + decode, reading an endless stream of that frame.
func BenchmarkDecodeDelta(b *testing.B) {
	b.Run("decode/foundry", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(deltaData)))
		var ev Event
		for b.Loop() {
			if !decodeDelta(deltaData, &ev) || ev.Delta != " world" || !ev.HasSeq {
				b.Fatal(ev)
			}
		}
	})
	b.Run("decode/foundry-general", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(deltaData)))
		var ev Event
		var w wireEvent
		for b.Loop() {
			if err := decodeEventInto(nil, deltaData, &ev, &w); err != nil || ev.Delta != " world" || !ev.HasSeq {
				b.Fatal(err, ev)
			}
		}
	})
	b.Run("decode/openai-go", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(deltaData)))
		for b.Loop() {
			var ev responses.ResponseStreamEventUnion
			if err := json.Unmarshal(deltaData, &ev); err != nil || ev.Delta != " world" || !ev.JSON.SequenceNumber.Valid() {
				b.Fatal(err)
			}
		}
	})
	b.Run("stream/foundry", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(deltaFrame)))
		res := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: &repeatReader{frame: deltaFrame}}
		s := newStream(b.Context(), res, "", -1, DefaultStreamIdleTimeout)
		defer s.Close()
		for b.Loop() {
			if !s.Next() || s.Event().Delta != " world" {
				b.Fatal(s.Err())
			}
		}
	})
	b.Run("stream/openai-go", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(deltaFrame)))
		res := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: &repeatReader{frame: deltaFrame}}
		s := ssestream.NewStream[responses.ResponseStreamEventUnion](ssestream.NewDecoder(res), nil)
		defer s.Close()
		for b.Loop() {
			if !s.Next() || s.Current().Delta != " world" {
				b.Fatal(s.Err())
			}
		}
	})
}

var _ io.ReadCloser = (*repeatReader)(nil)

// BenchmarkStreamPerRun is what one run's stream costs to open and read:
// a stream of 20 delta frames, opened and read to its end, per iteration.
// Its B/op is the reader's per-run memory (the read buffer dominates).
func BenchmarkStreamPerRun(b *testing.B) {
	body := bytes.Repeat(deltaFrame, 20)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		res := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(bytes.NewReader(body))}
		s := newStream(b.Context(), res, "", -1, DefaultStreamIdleTimeout)
		n := 0
		for s.Next() {
			n++
		}
		if n != 20 {
			b.Fatal(n, s.Err())
		}
		s.Close()
	}
}
