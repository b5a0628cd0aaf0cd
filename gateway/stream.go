package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/foundryq/foundryq/events"
)

// streamEvents serves GET /v1/runs/{id}/events as Server-Sent Events: one
// frame per RunEvent (id: its seq, event: its type, data: its JSON), from
// the start or after the seq in Last-Event-ID (or ?after=N), ending after
// the terminal event. A comment line goes out whenever the stream has been
// silent for SSEHeartbeat. With ?cancel_on_disconnect=1 the gateway sends
// watcher heartbeats for the run while, and only while, the client stays
// connected, so a run submitted with cancel_on_disconnect_seconds is
// cancelled server-side once its last client goes away.
func (g *Gateway) streamEvents(w http.ResponseWriter, r *http.Request) {
	t := tenantOf(r)
	id, err := runIDParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	after, err := resumePoint(r)
	if err != nil {
		writeError(w, err)
		return
	}
	heartbeats := false
	switch v := r.URL.Query().Get("cancel_on_disconnect"); v {
	case "", "0", "false":
	case "1", "true":
		heartbeats = true
	default:
		writeError(w, badParam("cancel_on_disconnect", "%q: want 1 or 0", v))
		return
	}
	release, ok := g.limits.openStream(limitKeyOf(r), time.Now())
	if !ok {
		tooMany(w, time.Second, "too many event streams open with this token (at most %d)", g.cfg.MaxStreamsPerToken)
		return
	}
	defer release()
	st, err := t.lookup(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	if st.End != nil && after >= st.End.Seq {
		// Resuming after the terminal event: nothing more will come. 204
		// also tells an EventSource to stop reconnecting.
		w.WriteHeader(http.StatusNoContent)
		return
	}

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(g.streams, cancel) // the gateway shuts down
	defer stop()
	f := &follower{g: g, t: t, id: id, next: after + 1, end: st.End, heartbeats: heartbeats}
	if err := f.start(ctx); err != nil {
		writeError(w, err)
		return
	}
	defer f.close()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	f.sw = &sseWriter{w: w, rc: http.NewResponseController(w), timeout: g.cfg.WriteTimeout}
	if err := f.sw.comment("foundryq run " + id); err != nil {
		return
	}
	if err := f.run(ctx); err != nil && ctx.Err() == nil {
		g.log.Warn().Err(err).Str("run_id", id).Str("tenant", t.cfg.Name).Msg("event stream ended by an error")
		_ = f.sw.errorEvent(err)
	}
}

// resumePoint returns the seq to resume after: the Last-Event-ID header
// (sent by an EventSource when it reconnects), else ?after=N, else 0.
func resumePoint(r *http.Request) (uint64, error) {
	field, v := "Last-Event-ID", r.Header.Get("Last-Event-ID")
	if v == "" {
		field, v = "after", r.URL.Query().Get("after")
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, badParam(field, "%q: want the seq of the last event received (a number)", v)
	}
	return n, nil
}

// sseWriter writes Server-Sent Events frames, each flushed at once and
// bounded by a write deadline.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     bytes.Buffer
}

// event writes a RunEvent built here (the terminal event of a state
// record).
func (s *sseWriter) event(ev events.RunEvent) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return s.raw(ev.Seq, ev.Type, data)
}

// raw writes an event as stored: its JSON goes out byte for byte, so that
// fields added to the contract later reach clients through any gateway.
func (s *sseWriter) raw(seq uint64, typ events.EventType, data []byte) error {
	s.buf.Reset()
	s.buf.WriteString("id: ")
	s.buf.WriteString(strconv.FormatUint(seq, 10))
	s.buf.WriteString("\nevent: ")
	s.buf.WriteString(oneLine(string(typ)))
	s.buf.WriteString("\ndata: ")
	if bytes.ContainsAny(data, "\r\n") {
		// Whitespace between JSON tokens would end the data line; inside
		// strings newlines are escaped, so compacting removes them all.
		if err := json.Compact(&s.buf, data); err != nil {
			return err
		}
	} else {
		s.buf.Write(data)
	}
	s.buf.WriteString("\n\n")
	return s.flush()
}

// errorEvent ends a stream that failed: event "error" with an error object
// (an EventSource also fires its error handler, then reconnects with
// Last-Event-ID).
func (s *sseWriter) errorEvent(err error) error {
	data, _ := json.Marshal(ErrorBody{Error: *apiErr(http.StatusServiceUnavailable, CodeUnavailable, "%s", oneLine(err.Error()))})
	s.buf.Reset()
	fmt.Fprintf(&s.buf, "event: error\ndata: %s\n\n", data)
	return s.flush()
}

func (s *sseWriter) comment(text string) error {
	s.buf.Reset()
	s.buf.WriteString(": ")
	s.buf.WriteString(oneLine(text))
	s.buf.WriteString("\n\n")
	return s.flush()
}

func (s *sseWriter) flush() error {
	if s.timeout > 0 {
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	}
	if _, err := s.w.Write(s.buf.Bytes()); err != nil {
		return err
	}
	return s.rc.Flush()
}

// oneLine keeps text on one SSE line.
func oneLine(s string) string {
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
}
