package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
)

// CreateResponse is the answer to POST /v1/runs: 201 for a new run, 200
// when the run id already ran this very request (a retry).
type CreateResponse struct {
	RunID  string           `json:"run_id"`
	Status events.RunStatus `json:"status"`
	// Existing is true when nothing new was submitted: the run id already
	// belongs to a run with the same request, and Status is that run's.
	Existing    bool   `json:"existing"`
	CallbackURL string `json:"callback_url,omitempty"`
}

// RunList is the answer to GET /v1/runs.
type RunList struct {
	Runs []events.RunState `json:"runs"`
}

// Run is the answer of GET /v1/runs/{id}: the run's state and, while it
// is queued, where it waits as a worker tells it (absent when no worker
// answered in time).
type Run struct {
	events.RunState
	Queue *events.QueuePosition `json:"queue,omitempty"`
}

// positionWait bounds how long GET /v1/runs/{id} waits for a worker to
// tell a queued run's place; past it the run is shown without.
const positionWait = 2 * time.Second

// createRun serves POST /v1/runs.
func (g *Gateway) createRun(w http.ResponseWriter, r *http.Request) {
	t := tenantOf(r)
	body, err := g.readJSONBody(w, r, true)
	if err != nil {
		writeError(w, err)
		return
	}
	cr, err := decodeCreate(body)
	if err != nil {
		writeError(w, validationError(err))
		return
	}
	req := cr.req
	if cr.callbackURL != "" {
		if t.cb == nil {
			writeError(w, invalidField(req.RunID, CallbackURLField, "callbacks are not enabled on this gateway (no callback secret is set)"))
			return
		}
		if err := t.cb.checkURL(cr.callbackURL); err != nil {
			writeError(w, invalidField(req.RunID, CallbackURLField, err.Error()))
			return
		}
		if err := t.cb.register(r.Context(), req.RunID, req.Digest(), cr.callbackURL); err != nil {
			writeError(w, err)
			return
		}
	}
	if req.FairnessKey == "" {
		// A run names who it is for, or else the tenant it came through.
		req.FairnessKey = t.cfg.Name
	}
	res, err := t.client.Submit(traceContext(r), req)
	var used *events.RunIDUsedError
	switch {
	case err == nil:
	case errors.As(err, &used):
		e := apiErr(http.StatusConflict, CodeRunIDUsed, "run id %s already belongs to a run with a different request (it is %s)", req.RunID, used.Status)
		e.RunID, e.RunStatus = req.RunID, string(used.Status)
		writeError(w, e)
		return
	case errors.Is(err, events.ErrAlreadyQueued):
		e := apiErr(http.StatusConflict, CodeRunQueued, "a request with run id %s is still waiting in the queue", req.RunID)
		e.RunID = req.RunID
		writeError(w, e)
		return
	case errors.Is(err, events.ErrInvalidRequest):
		writeError(w, validationError(err))
		return
	case errors.Is(err, events.ErrQueueFull):
		w.Header().Set("Retry-After", "5")
		e := apiErr(http.StatusServiceUnavailable, CodeUnavailable, "the run queue is full; try again later")
		e.RunID = req.RunID
		writeError(w, e)
		return
	default:
		writeError(w, natsError(err, "submit run "+req.RunID))
		return
	}
	if cr.callbackURL != "" && res.Existing && res.Status.Finished() {
		// The run had ended before this callback was registered: the
		// notifier saw its end already, so hand it the delivery now.
		if err := t.cb.enqueueFinished(r.Context(), req.RunID); err != nil {
			writeError(w, natsError(err, "queue the callback of run "+req.RunID))
			return
		}
	}
	status := http.StatusCreated
	if res.Existing {
		status = http.StatusOK
	}
	w.Header().Set("Location", "/v1/runs/"+req.RunID)
	writeJSON(w, status, CreateResponse{RunID: req.RunID, Status: res.Status, Existing: res.Existing, CallbackURL: cr.callbackURL})
}

// getRun serves GET /v1/runs/{id}: the run's state record, or
// {"run_id", "status": "queued"} for a run that waits for a worker; a
// queued run's answer says where it waits ("queue").
func (g *Gateway) getRun(w http.ResponseWriter, r *http.Request) {
	t := tenantOf(r)
	id, err := runIDParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	st, err := t.lookup(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	run := Run{RunState: st}
	if st.Status == events.StatusQueued {
		ctx, cancel := context.WithTimeout(r.Context(), positionWait)
		defer cancel()
		if pos, err := t.client.QueuePosition(ctx, id); err == nil {
			run.Queue = &pos
		}
	}
	writeJSON(w, http.StatusOK, run)
}

// listRuns serves GET /v1/runs?status=a,b&since=T&limit=N.
func (g *Gateway) listRuns(w http.ResponseWriter, r *http.Request) {
	t := tenantOf(r)
	filter, err := g.parseFilter(r)
	if err != nil {
		writeError(w, err)
		return
	}
	list := RunList{Runs: []events.RunState{}}
	for st, err := range t.client.Runs(r.Context(), filter) {
		if err != nil {
			writeError(w, natsError(err, "list runs"))
			return
		}
		list.Runs = append(list.Runs, st)
	}
	writeJSON(w, http.StatusOK, list)
}

// parseFilter maps the listing's query parameters onto events.RunFilter:
// status (comma-separated, repeatable), since (RFC 3339 time, or a
// duration such as 15m meaning that long ago), limit (1..1000).
func (g *Gateway) parseFilter(r *http.Request) (events.RunFilter, error) {
	q := r.URL.Query()
	f := events.RunFilter{Limit: g.cfg.ListLimit}
	for _, v := range q["status"] {
		for s := range strings.SplitSeq(v, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			st := events.RunStatus(s)
			if !st.Known() {
				return f, badParam("status", "unknown status %q (want %s)", s, events.StatusList())
			}
			f.Status = append(f.Status, st)
		}
	}
	if v := q.Get("since"); v != "" {
		if ts, err := time.Parse(time.RFC3339Nano, v); err == nil {
			f.UpdatedSince = ts
		} else if d, err := time.ParseDuration(v); err == nil && d > 0 {
			f.UpdatedSince = time.Now().Add(-d)
		} else {
			return f, badParam("since", "%q is neither an RFC 3339 time (2026-01-02T15:04:05Z) nor a positive duration (15m)", v)
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			return f, badParam("limit", "%q: want a number from 1 to %d", v, MaxListLimit)
		}
		f.Limit = n
	}
	return f, nil
}

// lookup returns a run's state: the record in the state bucket, or a
// queued stand-in while the request waits in the runs stream, or a 404.
// A worker records the state before it acks the request, so one of the
// two exists from the publish on; the state is read again last in case a
// whole run went by between the two reads.
func (t *tenant) lookup(ctx context.Context, id string) (events.RunState, error) {
	st, found, err := t.state(ctx, id)
	if err != nil || found {
		return st, err
	}
	queued, err := t.queued(ctx, id)
	if err != nil {
		return events.RunState{}, err
	}
	if queued != nil {
		return *queued, nil
	}
	st, found, err = t.state(ctx, id)
	if err != nil || found {
		return st, err
	}
	e := apiErr(http.StatusNotFound, CodeNotFound, "no run %s", id)
	e.RunID = id
	return events.RunState{}, e
}

func (t *tenant) state(ctx context.Context, id string) (events.RunState, bool, error) {
	st, _, err := t.client.State(ctx, id)
	switch {
	case err == nil:
		return st, true, nil
	case errors.Is(err, events.ErrStateNotFound):
		return events.RunState{}, false, nil
	case errors.Is(err, events.ErrStateCorrupt):
		return events.RunState{}, false, apiErr(http.StatusInternalServerError, CodeInternal, "the state record of run %s is unreadable", id)
	default:
		return events.RunState{}, false, natsError(err, "read the state of run "+id)
	}
}

// queued returns a queued stand-in state when the run's request waits in
// the runs stream, nil otherwise.
func (t *tenant) queued(ctx context.Context, id string) (*events.RunState, error) {
	js := t.js
	stream, err := js.Stream(ctx, t.names.RunsStream())
	if err != nil {
		return nil, natsError(err, "open stream "+t.names.RunsStream())
	}
	msg, err := stream.GetLastMsgForSubject(ctx, t.names.RunSubject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		// Or in its lane (docs/scheduling.md), if workers use lanes.
		if lanes, lerr := js.Stream(ctx, t.names.QueueStream()); lerr == nil {
			msg, err = lanes.GetLastMsgForSubject(ctx, t.names.LaneSubject("*", "*", id))
		}
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, natsError(err, "look up the queued request of run "+id)
	}
	return &events.RunState{RunID: id, Status: events.StatusQueued, CreatedAt: msg.Time.UTC(), UpdatedAt: msg.Time.UTC()}, nil
}

// readJSONBody reads a request body of at most MaxBodyBytes that must be
// JSON (required: an empty body is refused too).
func (g *Gateway) readJSONBody(w http.ResponseWriter, r *http.Request, required bool) ([]byte, error) {
	if r.ContentLength > g.cfg.MaxBodyBytes {
		return nil, tooLarge(g.cfg.MaxBodyBytes)
	}
	// A Content-Type that is not JSON is refused even on an empty body:
	// browsers send text/plain and form posts across origins without a
	// preflight.
	if ct := r.Header.Get("Content-Type"); ct != "" && !isJSON(ct) {
		return nil, apiErr(http.StatusUnsupportedMediaType, CodeUnsupportedMedia, "the body must be JSON (Content-Type: application/json), not %q", ct)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxBodyBytes))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, tooLarge(g.cfg.MaxBodyBytes)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, apiErr(http.StatusRequestTimeout, CodeRequestTimeout, "the body did not arrive within %s", g.cfg.ReadTimeout)
	}
	if err != nil {
		return nil, apiErr(http.StatusBadRequest, CodeBadParameter, "read the request body: %v", err)
	}
	// Read whole: the handler may now take its time (a cancel waits on
	// workers) without the server's background read hitting the deadline.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	if len(body) == 0 && !required {
		return nil, nil
	}
	if !isJSON(r.Header.Get("Content-Type")) {
		return nil, apiErr(http.StatusUnsupportedMediaType, CodeUnsupportedMedia, "the body must be JSON (Content-Type: application/json), not %q", r.Header.Get("Content-Type"))
	}
	return body, nil
}

func tooLarge(limit int64) *APIError {
	return apiErr(http.StatusRequestEntityTooLarge, CodeTooLarge, "the body is larger than %d bytes", limit)
}

// runIDParam returns the {id} path value, or a 400 naming run_id.
func runIDParam(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !events.ValidRunID(id) {
		e := badParam("run_id", "%q is not a run id (want [A-Za-z0-9_-]{1,64})", id)
		return "", e
	}
	return id, nil
}

// validationError maps an *events.ValidationError to a 400 naming its field.
func validationError(err error) *APIError {
	var ve *events.ValidationError
	if errors.As(err, &ve) {
		return &APIError{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: ve.Error(), Field: ve.Field, Reason: ve.Reason}
	}
	return &APIError{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: err.Error()}
}

func invalidField(runID, field, reason string) *APIError {
	return &APIError{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Field: field, Reason: reason, RunID: runID,
		Message: "invalid run request: " + field + ": " + reason}
}

// natsError maps a failed NATS or JetStream call: a permission the tenant's
// NATS user lacks is 403, a message over the server's limit 413, anything
// else 503 (the server, or the workers' streams, cannot be reached).
func natsError(err error, what string) *APIError {
	var e *APIError
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, nats.ErrPermissionViolation), errors.Is(err, nats.ErrAuthorization):
		return apiErr(http.StatusForbidden, CodeForbidden, "%s: NATS refused the tenant's user: %v", what, err)
	case errors.Is(err, nats.ErrMaxPayload):
		return apiErr(http.StatusRequestEntityTooLarge, CodeTooLarge, "%s: larger than the NATS server accepts", what)
	case errors.Is(err, context.Canceled):
		return apiErr(http.StatusServiceUnavailable, CodeUnavailable, "%s: the request ended", what)
	default:
		return apiErr(http.StatusServiceUnavailable, CodeUnavailable, "%s: %v", what, err)
	}
}
