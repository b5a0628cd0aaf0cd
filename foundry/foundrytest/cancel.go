package foundrytest

import "net/http"

// handleCancel serves POST /openai/v1/responses/{id}/cancel.
//
// Only background responses can be cancelled: 400 "Cannot cancel a
// synchronous response." otherwise (also for a hosted agent's response,
// which reports background false). A response already cancelled is
// returned unchanged (200: cancelling is idempotent). A response that
// finished otherwise is refused with 400 invalid_request_error, param
// response_id: "Cannot cancel a completed response." (BerriAI/litellm#39617
// quotes it from a live run; Azure/azure-dev's azd agents extension checks
// for this exact body), "Cannot cancel a failed response.", "Cannot cancel a
// response in terminal state." for incomplete (the wording of
// azure-ai-agentserver-responses, _CANCEL_TERMINAL_ERRORS). Otherwise the
// generation stops at once, a tool call in flight is aborted, the status
// becomes "cancelled" with the usage so far, no further event is emitted and
// every stream following it ends after the last event already emitted: there
// is no terminal event (the Responses stream has no "response.cancelled"
// event); clients learn the outcome from the object this call returns or
// from GET.
//
// With emu_complete_despite_cancel=1 the reply says "cancelled" but the
// generation goes on and the response ends "completed", as Azure has been
// seen to do. With emu_get_404_ms the response answers 404 for that long
// after it was created.
//
// Faults come first, whatever the response's state: within an
// emu_cancel_fail_ms window (or FailCancels) the call answers 500
// server_error, within an emu_cancel_hang_ms window (or HangCancels) it
// hangs until the window ends or the client gives up, then answers 504
// GatewayTimeout; either cancels nothing (see faults.go).
func (h *Handler) handleCancel(w http.ResponseWriter, req *http.Request) {
	h.stats.cancels.Add(1)
	id := req.PathValue("id")
	r := h.lookup(id)
	if r != nil {
		r.cancelCallStarted()
		defer r.cancelCallEnded()
	}
	if aerr := h.cancelFault(req.Context(), r); aerr != nil {
		aerr.write(w)
		return
	}
	if r == nil || r.notYetVisible() {
		notFound(id).write(w)
		return
	}
	r.mu.Lock()
	if !r.req.background {
		r.mu.Unlock()
		cancelRefused("Cannot cancel a synchronous response.").write(w)
		return
	}
	if msg, ok := cancelTerminalErrors[r.status]; ok {
		r.mu.Unlock()
		cancelRefused(msg).write(w)
		return
	}
	if r.status != statusCancelled {
		r.cancelLocked()
	}
	obj := r.snapshotLocked()
	r.mu.Unlock()
	writeJSON(w, http.StatusOK, obj)
}

// cancelTerminalErrors are the refusals of a cancel per final status;
// "cancelled" is missing on purpose (idempotent, 200).
var cancelTerminalErrors = map[string]string{
	statusCompleted:  "Cannot cancel a completed response.",
	statusFailed:     "Cannot cancel a failed response.",
	statusIncomplete: "Cannot cancel a response in terminal state.",
}

// cancelRefused is the 400 of a cancel that cannot apply.
func cancelRefused(msg string) *apiError {
	return invalidRequest("response_id", "invalid_request_error", "%s", msg)
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
	if r.createdObj == nil {
		// Cancelled before response.created went out (emu_created_ms): the
		// creator still learns the id, with the final status.
		r.createdObj = r.snapshotLocked()
		r.appendEventLocked(evCreated, lifecycleEvent{Type: evCreated, SequenceNumber: r.seqLocked(), Response: r.createdObj})
	}
	r.stopLocked()
	r.closeLogLocked()
	h.cfg.Logger.Debug().Str("response_id", r.id).Str("run_id", r.runID).Msg("foundrytest: response cancelled")
}
