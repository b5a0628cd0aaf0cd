package gateway

import (
	"errors"
	"net/http"

	"github.com/foundryq/foundryq/events"
)

// answerRun serves POST /v1/runs/{id}/input: an answer (events.InputAnswer)
// to what a waiting run asks, passed to the workers as the NATS API does.
// 200 with the reply for accepted and already_answered; 404 when the run
// does not wait for the id; 409 when it has ended; 400 for a malformed
// answer; 503 when no worker answered, or the answer could not be stored
// (the answers stream full: with Retry-After).
func (g *Gateway) answerRun(w http.ResponseWriter, r *http.Request) {
	t := tenantOf(r)
	id, err := runIDParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	body, err := g.readJSONBody(w, r, true)
	if err != nil {
		writeError(w, err)
		return
	}
	a, err := events.DecodeInputAnswer(body)
	if err != nil {
		writeError(w, &APIError{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: err.Error(), RunID: id})
		return
	}
	if _, err := t.lookup(r.Context(), id); err != nil {
		writeError(w, err)
		return
	}
	reply, err := t.client.Answer(traceContext(r), id, a)
	var e *APIError
	switch {
	case errors.Is(err, events.ErrBadAnswer):
		e = apiErr(http.StatusBadRequest, CodeInvalidRequest, "%s", reply.Error)
	case errors.Is(err, events.ErrInputsFull):
		w.Header().Set("Retry-After", "5")
		e = apiErr(http.StatusServiceUnavailable, CodeUnavailable, "%s", reply.Error)
	case errors.Is(err, events.ErrAnswerUndelivered):
		e = apiErr(http.StatusServiceUnavailable, CodeUnavailable, "answer run %s: %v; send it again", id, err)
	case err != nil:
		writeError(w, natsError(err, "answer run "+id))
		return
	case reply.Result == events.InputUnknownID:
		e = apiErr(http.StatusNotFound, CodeNotFound, "run %s does not wait for %s", id, a.ID)
	case reply.Result == events.InputRunFinished:
		e = apiErr(http.StatusConflict, CodeRunFinished, "run %s has ended; the answer changes nothing", id)
	default:
		writeJSON(w, http.StatusOK, struct {
			RunID string `json:"run_id"`
			events.InputReply
		}{id, reply})
		return
	}
	e.RunID = id
	writeError(w, e)
}
