package foundry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
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
// end of the stream, on an error, once ctx is done, or when the stream has
// received nothing at all (keepalive frames count) for Config.StreamIdleTimeout
// while Next waited for it. A stream is read by one
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
	requestID  string // x-request-id (else apim-request-id) of the answer that opened the stream
	rateLimit  RateLimit

	closeOnce sync.Once
	closed    atomic.Bool // Close was called

	// The idle timeout (Config.StreamIdleTimeout): one timer per stream,
	// re-armed lazily by itself rather than reset on every read.
	idle      time.Duration // <= 0: none
	idleTimer *time.Timer
	idleStop  atomic.Bool  // the stream finished: the timer must not re-arm
	base      time.Time    // origin of readSince (monotonic)
	readSince atomic.Int64 // 0, or 1 + the time since base when the pending body read began
	idleFor   atomic.Int64 // how long the stream was silent when the timer closed the body
}

// newStream takes ownership of res.Body. The body is closed when ctx is done so
// that a blocked read returns even with transports that ignore the context, and
// when a read has waited idle (> 0) for a frame.
func newStream(ctx context.Context, res *http.Response, responseID string, after int64, idle time.Duration) *Stream {
	s := &Stream{ctx: ctx, body: res.Body, responseID: responseID, requestID: headerRequestID(res.Header),
		rateLimit: parseRateLimit(res.Header)}
	wake := s.wake // one func value for both callbacks: one allocation less
	if idle > 0 {
		s.idle, s.base = idle, time.Now()
		s.sse = newSSEReader((*idleReader)(s))
		// Armed once assigned: the callback reads s.idleTimer.
		s.idleTimer = time.AfterFunc(time.Duration(1<<63-1), wake)
		s.idleTimer.Reset(idle)
	} else {
		s.sse = newSSEReader(res.Body)
	}
	if after >= 0 {
		s.lastSeq, s.hasSeq = after, true
	}
	s.stopAfter = context.AfterFunc(ctx, wake)
	return s
}

// wake is the callback of ctx's end and of the idle timer: once ctx is done
// it closes the body, so that a blocked read returns even with transports
// that ignore the context; otherwise it is the idle timer's check.
func (s *Stream) wake() {
	if s.ctx.Err() != nil {
		_ = s.closeBody()
		return
	}
	s.idleCheck()
}

// idleReader reads a stream's body, noting when each read starts waiting.
// Only the time spent waiting for the server counts as silence: a consumer
// slow to call Next is not an idle stream.
type idleReader Stream

func (r *idleReader) Read(p []byte) (int, error) {
	r.readSince.Store(int64(time.Since(r.base)) + 1)
	n, err := r.body.Read(p)
	r.readSince.Store(0)
	return n, err
}

// idleCheck runs when the idle timer fires: it closes the body if the
// pending read has waited s.idle for a byte (the read then fails and Next
// reports ErrStreamIdle), and otherwise re-arms the timer for the rest.
func (s *Stream) idleCheck() {
	if s.idleStop.Load() {
		return
	}
	since := s.readSince.Load()
	if since == 0 { // not waiting on the server: the consumer has the stream
		s.idleTimer.Reset(s.idle)
		return
	}
	silent := time.Since(s.base) - time.Duration(since-1)
	if silent < s.idle {
		s.idleTimer.Reset(s.idle - silent)
		return
	}
	s.idleFor.Store(int64(silent))
	_ = s.closeBody()
}

// stopIdle stops the idle timer for good.
func (s *Stream) stopIdle() {
	if s.idleTimer != nil {
		s.idleStop.Store(true)
		s.idleTimer.Stop()
	}
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
			apiErr.RequestID = s.requestID
			s.finish(apiErr)
		} else {
			s.finish(fmt.Errorf("foundry: stream%s: %w", idSuffix(s.responseID), err))
		}
		return false
	}
	if s.ev.Type == EventError || (s.ev.Type == EventFailed && s.ev.Response.Error == nil) {
		s.completeFailure()
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

// TrailingFrameWait bounds how long a stream waits, after an error event or
// a response.failed without an error, for the frame that completes the
// failure (completeFailure).
const TrailingFrameWait = 2 * time.Second

// completeFailure reads the frame that may complete a failure, and merges
// the two into one terminal event: response.failed with its error. Azure
// ends a content-filtered stream with response.failed whose error is null,
// then an error frame with the reason (code content_policy_violation;
// maximhq/bifrost#6419); a stream can also open with an error frame (e.g.
// insufficient_quota), then response.failed carrying the error and the
// response id (maximhq/bifrost#5040). It waits at most TrailingFrameWait,
// or until the stream ends; keepalives are skipped, anything else read is
// dropped (the stream ends after a terminal event either way).
func (s *Stream) completeFailure() {
	first := s.ev
	first.Raw = append([]byte(nil), s.ev.Raw...) // the next read may reuse the buffer
	next, ok := s.peekFailure()
	switch {
	case ok && first.Type == EventError && next.Type == EventFailed:
		if next.Response.Error == nil {
			next.Response.Error = &ResponseError{Code: first.Code, Message: first.Message}
		}
		s.ev = next
	case ok && first.Type == EventFailed && next.Type == EventError:
		first.Response.Error = &ResponseError{Code: next.Code, Message: next.Message}
		s.ev = first
	default:
		s.ev = first
	}
}

// peekFailure reads the next frame other than a keepalive, for at most
// TrailingFrameWait: an error event (a top-level {"error": ...} frame
// counts as one) or a response.failed. ok is false for anything else, a
// read error or the end of the wait, which closes the body.
func (s *Stream) peekFailure() (Event, bool) {
	stop := time.AfterFunc(TrailingFrameWait, func() { _ = s.closeBody() })
	defer stop.Stop()
	var ev Event
	var w wireEvent
	for {
		name, data, err := s.sse.next()
		if err != nil || isDone(data) {
			return Event{}, false
		}
		err = decodeEventInto(name, data, &ev, &w)
		var apiErr *APIError
		switch {
		case errors.As(err, &apiErr):
			return Event{Type: EventError, Code: apiErr.Code, Message: apiErr.Message}, true
		case err != nil:
			return Event{}, false
		case ev.Type == EventKeepalive:
			continue
		case ev.Type == EventError || ev.Type == EventFailed:
			ev.Raw = append([]byte(nil), ev.Raw...)
			return ev, true
		}
		return Event{}, false
	}
}

// RequestID returns the x-request-id (else the apim-request-id) of the
// answer that opened the stream, or "": what Azure support asks for.
func (s *Stream) RequestID() string { return s.requestID }

// headerRequestID reads x-request-id, else apim-request-id.
func headerRequestID(h http.Header) string {
	if id := h.Get("X-Request-Id"); id != "" {
		return id
	}
	return h.Get("Apim-Request-Id")
}

// Event returns the current event. It is valid until the next call to Next.
func (s *Stream) Event() *Event { return &s.ev }

// Err returns why the stream ended: nil after a terminal event (or before the
// end, or after Close); an error wrapping ErrStreamTruncated (and the network
// error, if any) when it ended without one; the context's cause when ctx ended
// it; an error wrapping ErrStreamIdle when nothing arrived for
// Config.StreamIdleTimeout; an *APIError for an {"error": ...} frame;
// ErrMalformedEvent or ErrLineTooLong for data that cannot be read.
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
	s.stopIdle()
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
	s.stopIdle()
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
	if d := s.idleFor.Load(); d > 0 {
		return s.idleError(time.Duration(d))
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
	where := s.where()
	if cause != nil {
		return fmt.Errorf("%w (%s): %w", ErrStreamTruncated, where, cause)
	}
	return fmt.Errorf("%w (%s)", ErrStreamTruncated, where)
}

// idleError is the error of a stream the idle timeout ended.
func (s *Stream) idleError(silent time.Duration) error {
	return fmt.Errorf("%w: nothing received for %s, idle timeout %s (%s)", ErrStreamIdle,
		silent.Round(time.Millisecond), s.idle, s.where())
}

// where says where the stream is, for errors.
func (s *Stream) where() string {
	where := "before any sequence number"
	if s.hasSeq {
		where = fmt.Sprintf("after sequence number %d", s.lastSeq)
	}
	if s.responseID != "" {
		where = "response " + s.responseID + ", " + where
	}
	return where
}

func idSuffix(id string) string {
	if id == "" {
		return ""
	}
	return " " + id
}
