package gateway

import (
	"errors"
	"net/http"

	"github.com/foundryq/foundryq/events"
)

// cancelRun serves POST /v1/runs/{id}/cancel with an optional JSON body
// {"reason": "..."}, answering 200 with the events.CancelReply (cancelling:
// the cancel is recorded, or with unrecorded delivered to the run's owner,
// and the outcome follows on the run's events; cancelled;
// already_finished), 404 for a run this tenant does not have, 502 when
// the worker that answered reports an error, 503 when the cancel could be
// neither stored nor delivered. The run is looked up first, so that a
// cancel of an unknown id leaves no cancel record behind for a later run
// of that id. The events client's Cancel bounds the call
// (Config.CancelTimeout) and answers cancelling, never an error, once the
// cancel is on record.
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
	case errors.Is(err, events.ErrCancelUndelivered):
		e := apiErr(http.StatusServiceUnavailable, CodeUnavailable, "cancel run %s: %v; send it again", id, err)
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
