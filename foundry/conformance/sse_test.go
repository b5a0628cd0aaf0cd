package conformance

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestFrameReader(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		in    string
		types []string
		err   error // nil: a clean end
	}{
		{"two frames", "event: a\ndata: {\"type\":\"a\",\"sequence_number\":0}\n\nevent: b\ndata: {\"type\":\"b\",\"sequence_number\":1}\n\n", []string{"a", "b"}, nil},
		{"CRLF and comments", ": keepalive\r\nevent: a\r\ndata: {\"type\":\"a\"}\r\n\r\n", []string{"a"}, nil},
		{"data over two lines", "event: a\ndata: {\"type\":\ndata: \"a\"}\n\n", []string{"a"}, nil},
		{"blank lines between frames", "\n\n\nevent: a\ndata: {\"type\":\"a\"}\n\n\n", []string{"a"}, nil},
		{"no space after the colon", "event:a\ndata:{\"type\":\"a\"}\n\n", []string{"a"}, nil},
		{"other fields ignored", "id: 7\nretry: 10\nevent: a\ndata: {\"type\":\"a\"}\n\n", []string{"a"}, nil},
		{"cut inside a frame", "event: a\ndata: {\"type\":\"a\"}\n", nil, io.ErrUnexpectedEOF},
		{"data not JSON", "event: a\ndata: hello\n\n", nil, errAny},
		{"event without data", "event: a\n\n", nil, errAny},
		{"empty", "", nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fr := newFrameReader(strings.NewReader(tt.in))
			var types []string
			var err error
			for {
				var f frame
				f, err = fr.next()
				if err != nil {
					break
				}
				types = append(types, f.typ)
			}
			if strings.Join(types, ",") != strings.Join(tt.types, ",") {
				t.Errorf("types %q, want %q", types, tt.types)
			}
			switch {
			case tt.err == nil && err != io.EOF:
				t.Errorf("err %v, want a clean end", err)
			case tt.err == errAny && (err == nil || err == io.EOF):
				t.Errorf("err %v, want an error", err)
			case tt.err != nil && tt.err != errAny && !errors.Is(err, tt.err):
				t.Errorf("err %v, want %v", err, tt.err)
			}
		})
	}
}

var errAny = errors.New("any error")

// A line longer than maxFrameLine ends the stream with an error instead of
// growing without bound.
func TestFrameReaderLineTooLong(t *testing.T) {
	t.Parallel()
	in := "event: a\ndata: \"" + strings.Repeat("x", maxFrameLine) + "\"\n\n"
	_, err := newFrameReader(strings.NewReader(in)).next()
	if !errors.Is(err, bufio.ErrTooLong) {
		t.Fatalf("err %v, want bufio.ErrTooLong", err)
	}
}

// readAll stops at the first terminal event, whatever follows.
func TestReadAllStopsAtTheTerminalEvent(t *testing.T) {
	t.Parallel()
	in := "event: response.completed\ndata: {\"type\":\"response.completed\"}\n\nevent: x\ndata: garbage\n\n"
	frames, err := newFrameReader(strings.NewReader(in)).readAll()
	if err != nil || len(frames) != 1 {
		t.Fatalf("frames %d, err %v", len(frames), err)
	}
}

// readToEnd goes past the terminal event (an error event can follow
// response.failed) and still reports a broken frame after it.
func TestReadToEndReadsPastTheTerminalEvent(t *testing.T) {
	t.Parallel()
	failed := "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"error\":null}}\n\n"
	trailing := "event: error\ndata: {\"type\":\"error\",\"code\":\"content_policy_violation\"}\n\n"
	frames, err := newFrameReader(strings.NewReader(failed + trailing)).readToEnd()
	if err != nil || len(frames) != 2 {
		t.Fatalf("frames %d, err %v", len(frames), err)
	}
	if got, want := failedThen(frames), "response.failed, error null; then error code=content_policy_violation"; got != want {
		t.Errorf("failedThen: %q, want %q", got, want)
	}
	if _, err := newFrameReader(strings.NewReader(failed + "event: x\ndata: garbage\n\n")).readToEnd(); err == nil {
		t.Error("a broken frame after the terminal event: no error")
	}
}

// str reads string fields only: absent, null and other kinds are not one.
func TestFrameStr(t *testing.T) {
	t.Parallel()
	f := frame{data: []byte(`{"a":"x","b":null,"c":3,"d":""}`)}
	for _, tt := range []struct {
		key  string
		want string
		ok   bool
	}{{"a", "x", true}, {"b", "", false}, {"c", "", false}, {"d", "", true}, {"e", "", false}} {
		if got, ok := f.str(tt.key); got != tt.want || ok != tt.ok {
			t.Errorf("str(%q) = %q, %t; want %q, %t", tt.key, got, ok, tt.want, tt.ok)
		}
	}
	if _, ok := (frame{data: []byte(`[1]`)}).str("a"); ok {
		t.Error("str on a non-object: ok")
	}
}

func FuzzFrameReader(f *testing.F) {
	f.Add("event: a\ndata: {\"type\":\"a\",\"sequence_number\":0}\n\n")
	f.Add("data: {\"sequence_number\":\"x\"}\n\n:c\n")
	f.Add("event: a\ndata: [1,2]\n\n")
	f.Fuzz(func(t *testing.T, in string) {
		frames, _ := newFrameReader(strings.NewReader(in)).readAll()
		obs := orderObservation(frames)
		if obs == "" {
			t.Fatal("empty observation")
		}
		for _, fr := range frames {
			_ = fr.snapshot()
		}
		_ = deltaText(frames)
	})
}

func testFrames(spec ...string) []frame {
	var out []frame
	for i := 0; i+2 < len(spec); i += 3 {
		f := frame{event: spec[i], typ: spec[i+1]}
		if spec[i+2] != "-" {
			f.hasSeq = true
			for _, c := range spec[i+2] {
				f.seq = f.seq*10 + int64(c-'0')
			}
		}
		out = append(out, f)
	}
	return out
}

func TestOrderObservation(t *testing.T) {
	t.Parallel()
	const (
		created   = "response.created"
		delta     = "response.output_text.delta"
		completed = "response.completed"
	)
	good := "event = type on every frame; sequence_number from 0 without a gap; one terminal event, last: response.completed"
	for _, tt := range []struct {
		name   string
		frames []frame
		want   string
	}{
		{"in order", testFrames(created, created, "0", delta, delta, "1", completed, completed, "2"), good},
		{"none", nil, "no frame"},
		{"from 1", testFrames(created, created, "1", completed, completed, "2"), "sequence_number from 1"},
		{"a gap", testFrames(created, created, "0", delta, delta, "2"), "sequence_number 2 after 0"},
		{"a repeat", testFrames(created, created, "0", created, created, "0"), "sequence_number 0 after 0"},
		{"event is not type", testFrames(created, created, "0", "delta", delta, "1"), `frame 1: event "delta" but type "response.output_text.delta"`},
		{"no number", testFrames(created, created, "0", delta, delta, "-"), "frame 1 (response.output_text.delta) has no sequence_number"},
		{"no terminal", testFrames(created, created, "0", delta, delta, "1"), "ends without a terminal event (last: response.output_text.delta)"},
		{"two terminals", testFrames(created, created, "0", "error", "error", "1", completed, completed, "2"),
			"event = type on every frame; sequence_number from 0 without a gap; 2 terminal events, last: response.completed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := orderObservation(tt.frames); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}
