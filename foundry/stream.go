package foundry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
)

// Stream reads the events of one response stream (from Create or Resume).
//
//	for s.Next() {
//		ev := s.Event()
//		...
//	}
//	if err := s.Err(); err != nil { ... } // ErrStreamTruncated: resume from s.LastSeq()
//
// Next returns false after the terminal event (the body is closed then), at the
// end of the stream, on an error, or once ctx is done. A stream is read by one
// goroutine; Close may be called from any goroutine and makes a blocked Next return.
type Stream struct {
	ctx       context.Context
	body      io.ReadCloser
	sse       *sseReader
	stopAfter func() bool // stops the context.AfterFunc that closes body

	ev         Event
	wire       wireEvent // decode scratch
	err        error
	done       bool
	terminal   bool
	lastSeq    int64
	hasSeq     bool
	responseID string

	closeOnce sync.Once
	closed    atomic.Bool // Close was called
}

// newStream takes ownership of res.Body. The body is closed when ctx is done so
// that a blocked read returns even with transports that ignore the context.
func newStream(ctx context.Context, res *http.Response, responseID string, after int64) *Stream {
	s := &Stream{ctx: ctx, body: res.Body, sse: newSSEReader(res.Body), responseID: responseID}
	if after >= 0 {
		s.lastSeq, s.hasSeq = after, true
	}
	s.stopAfter = context.AfterFunc(ctx, func() { _ = s.closeBody() })
	return s
}

// Next advances to the next event and reports whether there is one.
func (s *Stream) Next() bool {
	if s.done {
		return false
	}
	if s.closed.Load() {
		s.finish(nil)
		return false
	}
	if s.ctx.Err() != nil {
		s.finish(context.Cause(s.ctx))
		return false
	}
	name, data, err := s.sse.next()
	if err != nil {
		s.finish(s.endError(err))
		return false
	}
	if isDone(data) {
		s.finish(s.truncated(nil))
		return false
	}
	if (len(name) == 0 || string(name) == EventOutputTextDelta) && decodeDelta(data, &s.ev) {
		// the hot path: a plain text delta
	} else if err := decodeEventInto(name, data, &s.ev, &s.wire); err != nil {
		var apiErr *APIError
		if errors.As(err, &apiErr) {
			apiErr.ResponseID = s.responseID
			s.finish(apiErr)
		} else {
			s.finish(fmt.Errorf("foundry: stream%s: %w", idSuffix(s.responseID), err))
		}
		return false
	}
	if s.ev.HasSeq && s.ev.Type != EventKeepalive && s.ev.Type != EventError {
		// Keepalive and error events carry no response state, and whether
		// their numbers belong to the replayable sequence is not documented:
		// resuming after the last real event is always safe.
		s.lastSeq, s.hasSeq = s.ev.SequenceNumber, true
	}
	if r := s.ev.Response; r != nil && r.ID != "" && s.responseID == "" {
		s.responseID = r.ID
	}
	if s.ev.Terminal() {
		s.terminal = true
		s.finish(nil)
	}
	return true
}

// Event returns the current event. It is valid until the next call to Next.
func (s *Stream) Event() *Event { return &s.ev }

// Err returns why the stream ended: nil after a terminal event (or before the
// end, or after Close); an error wrapping ErrStreamTruncated (and the network
// error, if any) when it ended without one; the context's cause when ctx ended
// it; an *APIError for an {"error": ...} frame; ErrMalformedEvent or
// ErrLineTooLong for data that cannot be read.
func (s *Stream) Err() error { return s.err }

// Terminal reports whether a terminal event was read.
func (s *Stream) Terminal() bool { return s.terminal }

// LastSeq returns the last sequence number seen (for a resumed stream, initially
// the starting_after it was opened with) and whether there is one: the
// cursor for Resume. The numbers of keepalive and error events do not count.
func (s *Stream) LastSeq() (int64, bool) { return s.lastSeq, s.hasSeq }

// ResponseID returns the response id: the one Resume was called with, or the
// one from the first event that carried a response (response.created).
func (s *Stream) ResponseID() string { return s.responseID }

// Close releases the connection. It does not cancel the response on the server
// (use Client.Cancel). It is safe to call more than once and from any goroutine.
func (s *Stream) Close() error {
	s.closed.Store(true)
	s.stopAfter()
	return s.closeBody()
}

func (s *Stream) closeBody() error {
	var err error
	s.closeOnce.Do(func() { err = s.body.Close() })
	return err
}

func (s *Stream) finish(err error) {
	s.done = true
	s.err = err
	s.stopAfter()
	_ = s.closeBody()
}

// endError maps a read error (or io.EOF) to the stream's final error.
func (s *Stream) endError(err error) error {
	if s.ctx.Err() != nil {
		return context.Cause(s.ctx)
	}
	if s.closed.Load() {
		return nil
	}
	if errors.Is(err, ErrLineTooLong) {
		return fmt.Errorf("foundry: stream%s: %w", idSuffix(s.responseID), err)
	}
	if err == io.EOF {
		return s.truncated(nil)
	}
	return s.truncated(err)
}

func (s *Stream) truncated(cause error) error {
	where := "before any sequence number"
	if s.hasSeq {
		where = fmt.Sprintf("after sequence number %d", s.lastSeq)
	}
	if s.responseID != "" {
		where = "response " + s.responseID + ", " + where
	}
	if cause != nil {
		return fmt.Errorf("%w (%s): %w", ErrStreamTruncated, where, cause)
	}
	return fmt.Errorf("%w (%s)", ErrStreamTruncated, where)
}

func idSuffix(id string) string {
	if id == "" {
		return ""
	}
	return " " + id
}
