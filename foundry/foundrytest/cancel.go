package foundrytest

import "net/http"

// handleCancel serves POST /openai/v1/responses/{id}/cancel.
//
// Only background responses can be cancelled (400 otherwise). A response
// already in a final state is returned unchanged, so cancelling is
// idempotent. Otherwise the generation stops at once, a tool call in flight
// is aborted, the status becomes "cancelled" with the usage so far, no
// further event is emitted and every stream following it ends after the
// last event already emitted: there is no terminal event (the Responses
// stream has no "response.cancelled" event); clients learn the outcome from
// the object this call returns or from GET.
//
// With emu_complete_despite_cancel=1 the reply says "cancelled" but the
// generation goes on and the response ends "completed", as Azure has been
// seen to do.
func (h *Handler) handleCancel(w http.ResponseWriter, req *http.Request) {
	h.stats.cancels.Add(1)
	id := req.PathValue("id")
	r := h.lookup(id)
	if r == nil {
		notFound(id).write(w)
		return
	}
	r.mu.Lock()
	if !r.req.background {
		r.mu.Unlock()
		invalidRequest("", "", "Cannot cancel a synchronous response.").write(w)
		return
	}
	if !terminalStatus(r.status) {
		r.cancelLocked()
	}
	obj := r.snapshotLocked()
	r.mu.Unlock()
	writeJSON(w, http.StatusOK, obj)
}

// cancelLocked applies an accepted cancel to a response not yet final.
func (r *response) cancelLocked() {
	h := r.h
	r.cancelledAt = h.cfg.Clock()
	h.stats.cancelled.Add(1)
	if r.sc.completeDespiteCancel {
		r.status = statusCancelled
		return
	}
	if r.toolRunning {
		r.toolRunning = false
		h.stats.toolAborted.Add(1)
	}
	r.finishLocked(statusCancelled)
	if len(r.ends) == 0 {
		// Cancelled before response.created went out (emu_created_ms): the
		// creator still learns the id, with the final status.
		r.createdObj = r.snapshotLocked()
		r.appendEventLocked(evCreated, lifecycleEvent{Type: evCreated, SequenceNumber: 0, Response: r.createdObj})
	}
	r.stopLocked()
	r.closeLogLocked()
	h.cfg.Logger.Debug().Str("response_id", r.id).Str("run_id", r.runID).Msg("foundrytest: response cancelled")
}
