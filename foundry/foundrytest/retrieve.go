package foundrytest

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// handleGet serves GET /openai/v1/responses/{id}: the stored object as JSON,
// or with ?stream=true its events as SSE, replayed after starting_after and
// then followed live until the end.
func (h *Handler) handleGet(w http.ResponseWriter, req *http.Request) {
	id := req.PathValue("id")
	r := h.lookup(id)
	if r == nil || r.notYetVisible() {
		notFound(id).write(w)
		return
	}
	q := req.URL.Query()
	stream := false
	if v := q.Get("stream"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			invalidRequest("stream", "invalid_type",
				"Invalid value for 'stream': expected a boolean, but got %q instead.", v).write(w)
			return
		}
		stream = b
	}
	if !stream {
		if r.hosted {
			writeJSON(w, http.StatusOK, r.hostedSnapshot())
			return
		}
		writeJSON(w, http.StatusOK, r.snapshot())
		return
	}
	from := 0
	if v := q.Get("starting_after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < -1 {
			invalidRequest("starting_after", "invalid_value",
				"Invalid value for 'starting_after': expected an integer >= -1, but got %q instead.", v).write(w)
			return
		}
		from = int(n) + 1
	}
	switch {
	case r.hosted:
		// Azure/azure-sdk-for-python#46015 (the wire code and param are not
		// reported there; those of the other stream refusals are used).
		invalidRequest("stream", "", "Streaming is not enabled for this response").write(w)
		return
	case !r.req.background:
		invalidRequest("stream", "", "This response cannot be streamed because it was not created with background=true.").write(w)
		return
	case !r.req.stream:
		invalidRequest("stream", "", "This response cannot be streamed because it was not created with stream=true.").write(w)
		return
	case h.cfg.Clock().Sub(r.createdAt) > h.cfg.ResumeWindow:
		invalidRequest("stream", "",
			"This response can no longer be streamed because it is more than %s old.", humanDuration(h.cfg.ResumeWindow)).write(w)
		return
	}
	setSSEHeaders(w)
	w.WriteHeader(http.StatusOK)
	r.attach()
	// The headers go out at once, as on a create, even when no event
	// follows soon (a stalled response).
	if http.NewResponseController(w).Flush() != nil {
		r.detach(true, false)
		return
	}
	end := r.follow(req.Context(), w, from, -1)
	r.detach(end != endComplete, false)
}

// notYetVisible reports whether the response is inside its emu_get_404_ms
// window: on Azure's /openai/v1, GET right after a streamed create answered
// 404 for up to 32.7 s, then 200 (dotnet/extensions#7704); the emulator
// answers GET, resume and cancel with 404 for that long after creation.
func (r *response) notYetVisible() bool {
	return r.sc.get404 > 0 && r.h.cfg.Clock().Sub(r.createdAt) < r.sc.get404
}

// humanDuration writes d the way the API's messages do: "5 minutes".
func humanDuration(d time.Duration) string {
	unit := func(n int64, name string) string {
		if n == 1 {
			return "1 " + name
		}
		return fmt.Sprintf("%d %ss", n, name)
	}
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return unit(int64(d/time.Hour), "hour")
	case d >= time.Minute && d%time.Minute == 0:
		return unit(int64(d/time.Minute), "minute")
	case d >= time.Second && d%time.Second == 0:
		return unit(int64(d/time.Second), "second")
	}
	return d.String()
}

// handleDelete serves DELETE /openai/v1/responses/{id}. Deleting a response
// still generating stops its generation (it is not counted as a cancel).
func (h *Handler) handleDelete(w http.ResponseWriter, req *http.Request) {
	id := req.PathValue("id")
	r := h.lookup(id)
	if r == nil {
		notFound(id).write(w)
		return
	}
	r.mu.Lock()
	r.deleted = true
	r.stopLocked()
	r.closeLogLocked()
	r.releaseLocked()
	r.mu.Unlock()
	h.remove(r)
	writeJSON(w, http.StatusOK, deletedObject{ID: id, Object: "response", Deleted: true})
}
