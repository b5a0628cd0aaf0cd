package foundry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestSSEReader(t *testing.T) {
	t.Parallel()
	in := ": comment\n" +
		"event: a\ndata: 1\n\n" +
		"\n\n" + // blank lines without data dispatch nothing
		"data:2\ndata:  3\n\n" + // no space after colon; second space kept
		"event: ignored\n\n" + // name without data: reset
		"id: 5\nretry: 100\nfoo: bar\ndata\n\n" + // "data" without colon: empty value
		"data: cr\r\rdata: crlf\r\n\r\n" +
		"data: unterminated"
	r := newSSEReader(strings.NewReader(in))
	type ev struct{ name, data string }
	var got []ev
	for {
		name, data, err := r.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev{string(name), string(data)})
	}
	want := []ev{{"a", "1"}, {"", "2\n 3"}, {"", ""}, {"", "cr"}, {"", "crlf"}}
	if len(got) != len(want) {
		t.Fatalf("events = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d = %q, want %q", i, got[i], want[i])
		}
	}
}

// endless yields n bytes of 'a' and then EOF.
type endless struct{ n int }

func (e *endless) Read(p []byte) (int, error) {
	if e.n <= 0 {
		return 0, io.EOF
	}
	k := min(len(p), e.n)
	for i := range p[:k] {
		p[i] = 'a'
	}
	e.n -= k
	return k, nil
}

func TestStreamLineTooLong(t *testing.T) {
	t.Parallel()
	body := io.NopCloser(io.MultiReader(strings.NewReader("data: "), &endless{n: MaxLineSize + 1}))
	s := newStream(context.Background(), &http.Response{Body: body}, "resp_big", -1, 0)
	if s.Next() {
		t.Fatal("Next = true")
	}
	if !errors.Is(s.Err(), ErrLineTooLong) || errors.Is(s.Err(), ErrStreamTruncated) {
		t.Errorf("Err = %v, want ErrLineTooLong only", s.Err())
	}
}

// FuzzStream feeds arbitrary bytes to the SSE reader and event decoder: they must
// never panic, and a stream ends either with a terminal event and no error or
// with an error.
func FuzzStream(f *testing.F) {
	f.Add([]byte("event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"r\",\"status\":\"queued\",\"output\":[{\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"x\"}]}]}}\n\n"))
	f.Add([]byte("data: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"delta\":\"hi\"}\n\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":{\"id\":\"r\",\"status\":\"completed\",\"usage\":{\"input_tokens\":1}}}\n\n"))
	f.Add([]byte("data: {\"error\":{\"code\":1,\"message\":\"m\"}}\n\n"))
	f.Add([]byte("data: {\"type\":\"error\",\"code\":null,\"message\":\"m\",\"sequence_number\":3}\r\n\r\n"))
	f.Add([]byte("data: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"mcp_call\",\"error\":{\"m\":1},\"output\":[1]}}\n\n"))
	f.Add([]byte(": c\r\rdata: [DONE]\n\n"))
	f.Add([]byte("data: {\"type\":\"x\",\"sequence_number\":1e400}\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		res := &http.Response{Body: io.NopCloser(strings.NewReader(string(body)))}
		s := newStream(context.Background(), res, "", -1, 0)
		defer s.Close()
		for i := 0; s.Next(); i++ {
			ev := s.Event()
			if ev.Type == "" {
				t.Fatal("event without a type")
			}
			if _, ok := lifecycleStatus[ev.Type]; ok && ev.Response == nil {
				t.Fatalf("%s without Response", ev.Type)
			}
			if (ev.Type == EventOutputItemAdded || ev.Type == EventOutputItemDone) && ev.Item == nil {
				t.Fatalf("%s without Item", ev.Type)
			}
			if i > len(body) {
				t.Fatal("more events than bytes")
			}
		}
		if s.Terminal() != (s.Err() == nil) {
			t.Fatalf("Terminal = %v with Err = %v", s.Terminal(), s.Err())
		}
	})
}

func TestStreamStopsWithBufferedEvents(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("data: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"delta\":\"x\"}\n\n", 10)
	mk := func(ctx context.Context) *Stream {
		return newStream(ctx, &http.Response{Body: io.NopCloser(strings.NewReader(body))}, "resp_b", -1, 0)
	}

	s := mk(context.Background())
	if !s.Next() {
		t.Fatal(s.Err())
	}
	s.Close()
	if s.Next() || s.Err() != nil {
		t.Errorf("after Close: Next = true or Err = %v", s.Err())
	}

	cause := errors.New("stop")
	ctx, cancel := context.WithCancelCause(context.Background())
	s = mk(ctx)
	if !s.Next() {
		t.Fatal(s.Err())
	}
	cancel(cause)
	if s.Next() || !errors.Is(s.Err(), cause) {
		t.Errorf("after cancel: Err = %v", s.Err())
	}
}

func TestOptInt64(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]struct {
		v      int64
		ok, er bool
	}{
		"7": {7, true, false}, "null": {0, false, false}, "1.0": {1, true, false}, "2e3": {2000, true, false},
		"1.5": {0, false, true}, `"3"`: {0, false, true}, "1e300": {0, false, true},
	} {
		var o optInt64
		err := o.UnmarshalJSON([]byte(in))
		if o.V != want.v || o.OK != want.ok || (err != nil) != want.er {
			t.Errorf("%s → %+v, %v; want %+v", in, o, err, want)
		}
	}
}

// oneByte reads one byte at a time: every line ending, CR or CRLF, is
// split across reads.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:min(len(p), 1)]) }

func TestSSEReaderOneByteReads(t *testing.T) {
	t.Parallel()
	in := "event: a\r\ndata: 1\r\n\r\ndata: 2\r\rdata: 3\n\n"
	r := newSSEReader(oneByte{strings.NewReader(in)})
	var got []string
	for {
		_, data, err := r.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(data))
	}
	if strings.Join(got, ",") != "1,2,3" {
		t.Errorf("events = %q, want 1, 2, 3", got)
	}
}

// TestSSEReaderShrinksAfterLongLine: a long event (a response object)
// grows the read buffer and the data buffer; the short events after it do
// not keep them grown, so each streaming run holds about sseReadBuffer.
func TestSSEReaderShrinksAfterLongLine(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 20*sseReadBuffer)
	in := "data: " + long + "\n\n" + strings.Repeat("data: short\n\n", 200)
	r := newSSEReader(chunks{strings.NewReader(in), 300}) // as frames arrive over a network
	_, data, err := r.next()
	if err != nil || string(data) != long {
		t.Fatalf("first event: %d bytes, %v", len(data), err)
	}
	for range 200 {
		if _, data, err = r.next(); err != nil || string(data) != "short" {
			t.Fatalf("short event = %q, %v", data, err)
		}
	}
	if len(r.buf) > sseReadBuffer || cap(r.data) > sseReadBuffer {
		t.Errorf("buffers after the short events: read %d, data %d bytes; want <= %d", len(r.buf), cap(r.data), sseReadBuffer)
	}
}

// chunks reads at most n bytes at a time.
type chunks struct {
	r io.Reader
	n int
}

func (c chunks) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// noProgress returns nothing and no error for ever.
type noProgress struct{}

func (noProgress) Read([]byte) (int, error) { return 0, nil }

func TestSSEReaderNoProgress(t *testing.T) {
	t.Parallel()
	if _, _, err := newSSEReader(noProgress{}).next(); !errors.Is(err, io.ErrNoProgress) {
		t.Errorf("err = %v, want io.ErrNoProgress", err)
	}
}
