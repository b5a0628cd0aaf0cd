package conformance

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// frame is one SSE frame as it came over the wire: its event: line and the
// type and sequence_number of its data: JSON.
type frame struct {
	event  string
	typ    string
	seq    int64
	hasSeq bool
	data   json.RawMessage
}

// terminal reports whether the frame ends a response stream.
func (f frame) terminal() bool {
	switch f.typ {
	case "response.completed", "response.failed", "response.incomplete", "error":
		return true
	}
	return false
}

// maxFrameLine bounds one SSE line; a longer one is a broken stream.
const maxFrameLine = 4 << 20

// frameReader reads SSE frames: "event:" and "data:" lines, a blank line
// dispatching the frame; comment lines (":") and other fields are skipped.
// Several data lines are joined with "\n", as the SSE specification says.
type frameReader struct {
	sc *bufio.Scanner
}

func newFrameReader(r io.Reader) *frameReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxFrameLine)
	return &frameReader{sc: sc}
}

// next returns the next frame, io.EOF at a clean end between frames, or
// the reason the stream could not be read.
func (fr *frameReader) next() (frame, error) {
	var f frame
	var data []string
	seen := false
	for fr.sc.Scan() {
		line := strings.TrimSuffix(fr.sc.Text(), "\r")
		if line == "" {
			if !seen {
				continue
			}
			return decodeFrame(f, data)
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "event":
			f.event, seen = value, true
		case "data":
			data, seen = append(data, value), true
		}
	}
	if err := fr.sc.Err(); err != nil {
		return frame{}, err
	}
	if seen {
		return frame{}, io.ErrUnexpectedEOF
	}
	return frame{}, io.EOF
}

func decodeFrame(f frame, data []string) (frame, error) {
	f.data = json.RawMessage(strings.Join(data, "\n"))
	var head struct {
		Type string           `json:"type"`
		Seq  *json.RawMessage `json:"sequence_number"`
	}
	if len(bytes.TrimSpace(f.data)) == 0 {
		return f, fmt.Errorf("a frame (event %q) without data", f.event)
	}
	if err := json.Unmarshal(f.data, &head); err != nil {
		return f, fmt.Errorf("a frame (event %q) whose data is not a JSON object: %.80q", f.event, f.data)
	}
	f.typ = head.Type
	if head.Seq != nil {
		if err := json.Unmarshal(*head.Seq, &f.seq); err == nil {
			f.hasSeq = true
		}
	}
	return f, nil
}

// readAll reads frames up to and including the first terminal one, or to
// the end of the stream.
func (fr *frameReader) readAll() ([]frame, error) { return fr.read(true) }

// readToEnd reads every frame to the end of the stream, past a terminal
// one: on the service an error event can follow response.failed.
func (fr *frameReader) readToEnd() ([]frame, error) { return fr.read(false) }

func (fr *frameReader) read(stopAtTerminal bool) ([]frame, error) {
	var out []frame
	for {
		f, err := fr.next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, f)
		if stopAtTerminal && f.terminal() {
			return out, nil
		}
	}
}

// str returns the string field key of the frame's data, and whether it is
// one (absent, null or another kind: false).
func (f frame) str(key string) (string, bool) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(f.data, &fields) != nil {
		return "", false
	}
	var s string
	if raw, ok := fields[key]; !ok || json.Unmarshal(raw, &s) != nil || string(bytes.TrimSpace(raw)) == "null" {
		return "", false
	}
	return s, true
}
