package gateway

import (
	"errors"
	"net/http"

	"github.com/foundryq/foundryq/events"
)

// cancelRun serves POST /v1/runs/{id}/cancel with an optional JSON body
// {"reason": "..."}: 200 with the workers' events.CancelReply (result
// cancelling, cancelled or already_finished), 404 for a run this tenant
// does not have. The run is looked up first, so that a cancel of an
// unknown id leaves no cancel record behind for a later run of that id.
func (g *Gateway) cancelRun(w http.ResponseWriter, r *http.Request) {
	t := tenantOf(r)
	id, err := runIDParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	body, err := g.readJSONBody(w, r, false)
	if err != nil {
		writeError(w, err)
		return
	}
	creq, err := events.DecodeCancelRequest(body)
	if err != nil {
		writeError(w, validationError(err))
		return
	}
	if _, err := t.lookup(r.Context(), id); err != nil {
		writeError(w, err)
		return
	}
	reply, err := t.client.Cancel(traceContext(r), id, creq.Reason)
	switch {
	case errors.Is(err, events.ErrCancelFailed):
		e := apiErr(http.StatusBadGateway, CodeCancelFailed, "the worker could not cancel run %s: %s", id, reply.Error)
		e.RunID = id
		writeError(w, e)
		return
	case err != nil:
		writeError(w, natsError(err, "cancel run "+id))
		return
	case reply.Result == events.CancelNotFound:
		e := apiErr(http.StatusNotFound, CodeNotFound, "no run %s", id)
		e.RunID = id
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, reply)
}
