package foundry

import (
	"bytes"
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
	r          io.Reader
	buf        []byte // buf[start:end] is read and not yet split into lines
	start, end int
	err        error  // the read error met, returned once buf is drained
	data       []byte // data of the event being assembled (reused)
	name       []byte // event name of the event being assembled (reused)
}

// sseReadBuffer is the read buffer of a stream. A run holds one for its
// whole life, so it is small: delta frames are a few hundred bytes. It grows
// (up to MaxLineSize) for a longer line, such as a response object, and
// shrinks back once that line is read: 5,000 streaming runs must not each
// keep the largest line they met.
const sseReadBuffer = 1 << 10

// maxEmptyReads is how many reads in a row may return nothing before the
// stream ends with io.ErrNoProgress (as bufio.Scanner does).
const maxEmptyReads = 100

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{r: r, buf: make([]byte, sseReadBuffer)}
}

// next returns the next event's name and data, valid until the following call.
// It returns io.EOF at a clean end of stream, or the read error.
func (r *sseReader) next() (name, data []byte, err error) {
	if cap(r.data) > sseReadBuffer {
		r.data = nil // the last event was long: do not keep its size
	}
	r.data = r.data[:0]
	r.name = r.name[:0]
	hasData := false
	for {
		line, err := r.line()
		if err != nil {
			return nil, nil, err
		}
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
}

// line returns the next line without its ending (LF, CRLF or CR), valid
// until the following call; at the end of the stream, the last line even
// without an ending, then io.EOF or the read error.
func (r *sseReader) line() ([]byte, error) {
	for {
		rest := r.buf[r.start:r.end]
		if i := bytes.IndexAny(rest, "\r\n"); i >= 0 {
			n := i + 1 // bytes consumed, ending included
			switch {
			case rest[i] == '\n':
			case i+1 < len(rest):
				if rest[i+1] == '\n' {
					n++ // CRLF
				}
			case r.err == nil:
				n = 0 // a CR last: one more byte tells CR from CRLF
			}
			if n > 0 {
				r.start += n
				return rest[:i], nil
			}
		} else if r.err != nil && len(rest) > 0 {
			r.start = r.end
			return rest, nil
		}
		if r.err != nil {
			return nil, r.err
		}
		if err := r.fill(); err != nil {
			return nil, err
		}
	}
}

// fill reads more of the stream into buf, keeping its unread part: buf
// grows for a line longer than it, and shrinks back to sseReadBuffer once
// what is left unread fits.
func (r *sseReader) fill() error {
	if r.start > 0 {
		r.end = copy(r.buf, r.buf[r.start:r.end])
		r.start = 0
	}
	switch {
	case r.end == len(r.buf):
		if len(r.buf) >= MaxLineSize {
			return fmt.Errorf("%w: a line exceeds %d bytes", ErrLineTooLong, MaxLineSize)
		}
		r.resize(min(2*len(r.buf), MaxLineSize))
	case len(r.buf) > sseReadBuffer && r.end <= sseReadBuffer/2:
		r.resize(sseReadBuffer)
	}
	for range maxEmptyReads {
		n, err := r.r.Read(r.buf[r.end:])
		r.end += n
		if err != nil {
			r.err = err
			return nil
		}
		if n > 0 {
			return nil
		}
	}
	r.err = io.ErrNoProgress
	return nil
}

func (r *sseReader) resize(size int) {
	b := make([]byte, size)
	r.end = copy(b, r.buf[:r.end])
	r.buf = b
}
