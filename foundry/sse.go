package foundry

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// MaxLineSize is the longest SSE line the stream reader accepts (32 MiB, as in
// openai-go). A longer line ends the stream with ErrLineTooLong.
const MaxLineSize = 32 << 20

// sseReader splits a text/event-stream into events: "event:" and "data:" fields,
// several data lines joined with "\n", comments (":"), "id:" and "retry:" ignored,
// a blank line dispatches. Lines end in LF, CRLF or CR. An event cut off by the
// end of the stream (no blank line after it) is dropped, as the SSE spec says.
type sseReader struct {
	sc   *bufio.Scanner
	data []byte // data of the event being assembled (reused)
	name []byte // event name of the event being assembled (reused)
}

// sseReadBuffer is the initial read buffer of a stream. A run holds one for
// its whole life, so it is small: delta frames are a few hundred bytes, and
// the buffer grows (up to MaxLineSize) for a longer line, such as the final
// response object.
const sseReadBuffer = 4 << 10

func newSSEReader(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, sseReadBuffer), MaxLineSize)
	sc.Split(scanSSELines)
	return &sseReader{sc: sc}
}

// next returns the next event's name and data, valid until the following call.
// It returns io.EOF at a clean end of stream, or the read error.
func (r *sseReader) next() (name, data []byte, err error) {
	r.data = r.data[:0]
	r.name = r.name[:0]
	hasData := false
	for r.sc.Scan() {
		line := r.sc.Bytes()
		if len(line) == 0 {
			if !hasData {
				r.name = r.name[:0]
				continue
			}
			return r.name, r.data, nil
		}
		field, value, found := bytes.Cut(line, []byte{':'})
		if found && len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		switch string(field) {
		case "": // comment
		case "data":
			if hasData {
				r.data = append(r.data, '\n')
			}
			r.data = append(r.data, value...)
			hasData = true
		case "event":
			r.name = append(r.name[:0], value...)
		}
	}
	if err := r.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, nil, fmt.Errorf("%w: a line exceeds %d bytes", ErrLineTooLong, MaxLineSize)
		}
		return nil, nil, err
	}
	return nil, nil, io.EOF
}

// scanSSELines is bufio.ScanLines for the three SSE line endings (LF, CRLF, CR).
func scanSSELines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if atEOF && len(data) == 0 {
		return 0, nil, nil
	}
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		if data[i] == '\n' {
			return i + 1, data[:i], nil
		}
		// CR: a following LF belongs to the same line ending.
		if i+1 < len(data) {
			if data[i+1] == '\n' {
				return i + 2, data[:i], nil
			}
			return i + 1, data[:i], nil
		}
		if atEOF {
			return i + 1, data[:i], nil
		}
		return 0, nil, nil // need one more byte to tell CR from CRLF
	}
	if atEOF {
		return len(data), data, nil
	}
	return 0, nil, nil
}
