package foundrytest

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Handler is the emulator as an http.Handler, for serving it on any
// listener (`foundryq emulator`). It owns the generation goroutines; Close
// stops them. The zero value is not usable: use NewHandler.
type Handler struct {
	cfg   Config
	mux   *http.ServeMux
	stats counters

	mu            sync.Mutex
	closed        bool
	responses     map[string]*response
	runs          map[string]*runInfo
	lastSweep     time.Time
	throttleUntil time.Time     // creates answer 429 until then (Throttle)
	throttleRetry time.Duration // the wait they ask for
	quota         quotaState    // the running token counts (Config.TokensPerMinute)
	// Process-wide cancel faults (FailCancels, HangCancels): cancel calls
	// answer 500, or hang then answer 504, until then.
	cancelFailUntil time.Time
	cancelHangUntil time.Time
	hangWake        chan struct{} // closed when cancelHangUntil changes
	closing         chan struct{} // closed by Close: hanging cancel calls end

	genWG sync.WaitGroup // generation goroutines
	reqWG sync.WaitGroup // ServeHTTP calls in flight
}

// runInfo is what the emulator remembers per metadata.run_id.
type runInfo struct {
	created  int64
	bodies   []json.RawMessage
	response []*response
}

// NewHandler returns an emulator handler. It panics if cfg.Validate fails:
// validate configuration from flags with Config.Validate first.
func NewHandler(cfg Config) *Handler {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	h := &Handler{
		cfg:       cfg.withDefaults(),
		responses: make(map[string]*response),
		runs:      make(map[string]*runInfo),
		closing:   make(chan struct{}),
	}
	mux := http.NewServeMux()
	// The same API under both endpoint forms: an Azure OpenAI resource and a
	// Foundry project (which differ in the Entra ID audience they accept).
	for _, base := range []string{"/openai/v1", "/api/projects/{project}/openai/v1"} {
		mux.HandleFunc("POST "+base+"/responses", h.authed(h.handleCreate))
		mux.HandleFunc("GET "+base+"/responses/{id}", h.authed(h.handleGet))
		mux.HandleFunc("DELETE "+base+"/responses/{id}", h.authed(h.handleDelete))
		mux.HandleFunc("POST "+base+"/responses/{id}/cancel", h.authed(h.handleCancel))
	}
	mux.HandleFunc("GET /_emulator/stats", h.handleStats)
	mux.HandleFunc("GET /_emulator/records", h.handleRecords)
	mux.HandleFunc("/_emulator/throttle", h.handleThrottle)
	mux.HandleFunc("/_emulator/faults", h.handleFaults)
	mux.HandleFunc("/", h.handleUnknown)
	h.mux = mux
	return h
}

// ServeHTTP serves the emulator's routes, under /openai/v1 and under
// /api/projects/{project}/openai/v1:
//
//	POST   /openai/v1/responses
//	GET    /openai/v1/responses/{id}            (JSON, or SSE with ?stream=true[&starting_after=N])
//	POST   /openai/v1/responses/{id}/cancel
//	DELETE /openai/v1/responses/{id}
//	GET    /_emulator/stats                     (Stats as JSON; never needs the key)
//	GET    /_emulator/records?run_prefix=P      (RecordsByPrefix as JSON; no key)
//	POST   /_emulator/throttle?for=D&retry_after=R (see Throttle; GET, DELETE too; no key)
//	POST   /_emulator/faults?cancel_fail_for=D&cancel_hang_for=D (see FailCancels, HangCancels; GET, DELETE too; no key)
func (h *Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	setRequestIDs(w)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		(&apiError{status: http.StatusServiceUnavailable, typ: "server_error",
			message: "The emulator is shutting down."}).write(w)
		return
	}
	h.reqWG.Add(1)
	h.mu.Unlock()
	defer h.reqWG.Done()
	h.mux.ServeHTTP(w, req)
}

// setRequestIDs gives an answer the x-request-id and apim-request-id
// headers every Azure answer carries, which Azure support asks for
// (Microsoft Q&A "X-Request-Id"; OpenAI API reference, "Debugging
// requests"; Azure/azure-sdk-for-go#23936).
func setRequestIDs(w http.ResponseWriter) {
	h := w.Header()
	h.Set("X-Request-Id", newUUID())
	h.Set("Apim-Request-Id", newUUID())
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	x := hex.EncodeToString(b[:])
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:]
}

// Close stops every generation at once (responses in progress keep their
// status; their streams end after the last event emitted) and waits for the
// generation goroutines. Later requests get 503. Close does not wait for the
// requests being served: when serving with an http.Server, call Close first,
// then Shutdown (every stream ends once Close returns, so Shutdown does not
// wait on them). Server.Close does both. Close is idempotent.
func (h *Handler) Close() {
	h.mu.Lock()
	if !h.closed {
		close(h.closing)
	}
	h.closed = true
	all := make([]*response, 0, len(h.responses))
	for _, r := range h.responses {
		all = append(all, r)
	}
	h.mu.Unlock()
	for _, r := range all {
		r.mu.Lock()
		r.stopLocked()
		r.closeLogLocked()
		r.mu.Unlock()
	}
	h.genWG.Wait()
}

// waitRequests waits for the ServeHTTP calls in flight.
func (h *Handler) waitRequests() { h.reqWG.Wait() }

// authed wraps next with the credential check, and counts the request by
// its protocol (Stats.RequestsHTTP1, RequestsHTTP2).
func (h *Handler) authed(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		if req.ProtoMajor >= 2 {
			h.stats.requestsHTTP2.Add(1)
		} else {
			h.stats.requestsHTTP1.Add(1)
		}
		if aerr := h.authorize(req); aerr != nil {
			aerr.write(w)
			return
		}
		next(w, req)
	}
}

// authorize accepts "api-key: <key>" or "Authorization: Bearer <key>" with
// Config.APIKey, and with Config.EntraKeys a bearer token for the audience of
// the request's endpoint form. It returns the 401 to answer otherwise.
func (h *Handler) authorize(req *http.Request) *apiError {
	key := h.cfg.APIKey
	entra := len(h.cfg.EntraKeys) > 0
	if key == "" && !entra {
		return nil
	}
	if got := req.Header.Get("Api-Key"); key != "" && got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(key)) == 1 {
		return nil
	}
	auth := req.Header.Get("Authorization")
	const bearer = "Bearer "
	var tok string
	if len(auth) > len(bearer) && strings.EqualFold(auth[:len(bearer)], bearer) {
		tok = auth[len(bearer):]
	}
	if tok != "" && key != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(key)) == 1 {
		return nil
	}
	if entra {
		auds := audiencesFor(req.URL.Path)
		if tok != "" && checkEntraToken(tok, h.cfg.EntraKeys, auds, h.cfg.Clock()) {
			return nil
		}
		if tok != "" || key == "" {
			return errTokenRejected(auds[0])
		}
	}
	return errUnauthorized()
}

// handleUnknown answers paths and methods the emulator does not serve.
func (h *Handler) handleUnknown(w http.ResponseWriter, req *http.Request) {
	p := req.URL.Path
	if strings.HasPrefix(p, "/openai/") || strings.HasPrefix(p, "/api/projects/") {
		if aerr := h.authorize(req); aerr != nil {
			aerr.write(w)
			return
		}
	}
	known := knownRoute(p)
	if known {
		e := &apiError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error",
			message: "Method " + req.Method + " is not allowed for this resource."}
		e.write(w)
		return
	}
	(&apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "404",
		message: "Resource not found"}).write(w)
}

// knownRoute reports whether p is one of the emulator's /responses paths
// (so that a wrong method gets 405 rather than 404).
func knownRoute(p string) bool {
	if project, ok := strings.CutPrefix(p, "/api/projects/"); ok {
		name, rest, found := strings.Cut(project, "/")
		if !found || name == "" {
			return false
		}
		p = "/" + rest
	}
	rest, ok := strings.CutPrefix(p, "/openai/v1/responses")
	switch {
	case !ok:
		return false
	case rest == "":
		return true
	case !strings.HasPrefix(rest, "/"):
		return false
	}
	parts := strings.Split(rest[1:], "/")
	return parts[0] != "" && (len(parts) == 1 || (len(parts) == 2 && parts[1] == "cancel"))
}

// handleStats serves Stats as JSON.
func (h *Handler) handleStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, h.Stats())
}

// writeJSON answers status with v encoded as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var data []byte
	switch v := v.(type) {
	case json.RawMessage:
		data = v
	default:
		var err error
		if data, err = json.Marshal(v); err != nil {
			(&apiError{status: http.StatusInternalServerError, typ: "server_error", message: err.Error()}).write(w)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

// newID returns a fresh hex id body, like the 48 hex digits of real ids.
func newID() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// lookup returns the stored response id, or nil when it is unknown,
// deleted or was created with store=false (the real API keeps nothing then).
func (h *Handler) lookup(id string) *response {
	h.mu.Lock()
	r := h.responses[id]
	h.mu.Unlock()
	if r == nil || !r.req.store {
		return nil
	}
	return r
}

// register stores a new response and starts its generation. It returns
// false when the Handler is closed.
func (h *Handler) register(r *response) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.sweepLocked(r.createdAt)
	h.responses[r.id] = r
	if r.runID != "" {
		ri := h.runLocked(r.runID)
		ri.created++
		ri.response = append(ri.response, r)
	}
	h.stats.created.Add(1)
	h.stats.active.Add(1)
	h.genWG.Add(1)
	go h.run(r)
	return true
}

func (h *Handler) runLocked(runID string) *runInfo {
	ri := h.runs[runID]
	if ri == nil {
		ri = &runInfo{}
		h.runs[runID] = ri
	}
	return ri
}

// sweepLocked forgets responses finished more than Retention ago. It runs
// at most every Retention/4, so its cost is spread over creates.
func (h *Handler) sweepLocked(now time.Time) {
	ret := h.cfg.Retention
	if ret <= 0 || now.Sub(h.lastSweep) < ret/4 {
		return
	}
	h.lastSweep = now
	for id, r := range h.responses {
		r.mu.Lock()
		expired := r.closed && !r.finishedAt.IsZero() && now.Sub(r.finishedAt) > ret
		if expired {
			r.releaseLocked()
		}
		r.mu.Unlock()
		if expired {
			delete(h.responses, id)
		}
	}
}

// remove forgets r (DELETE).
func (h *Handler) remove(r *response) {
	h.mu.Lock()
	delete(h.responses, r.id)
	h.mu.Unlock()
}

// Stats returns a snapshot of the counters and of every response's status.
func (h *Handler) Stats() Stats {
	s := &h.stats
	st := Stats{
		ResponsesCreated:                  s.created.Load(),
		CreatesRejected:                   s.rejected.Load(),
		CreatesThrottled:                  s.throttled.Load(),
		CreatesOverQuota:                  s.overQuota.Load(),
		CancelsReceived:                   s.cancels.Load(),
		ResponsesCancelled:                s.cancelled.Load(),
		TokensGenerated:                   s.tokens.Load(),
		TokensAfterCancel:                 s.tokensAfterCancel.Load(),
		TokensAfterDisconnect:             s.tokensAfterDisconnect.Load(),
		ToolCallsStarted:                  s.toolStarted.Load(),
		ToolCallsCompleted:                s.toolCompleted.Load(),
		ToolCallsCompletedAfterCancel:     s.toolAfterCancel.Load(),
		ToolCallsCompletedAfterDisconnect: s.toolAfterDisconnect.Load(),
		ToolCallsAborted:                  s.toolAborted.Load(),
		ActiveGenerations:                 s.active.Load(),
		OpenStreams:                       s.openStreams.Load(),
		PeakOpenStreams:                   s.peakStreams.Load(),
		RequestsHTTP1:                     s.requestsHTTP1.Load(),
		RequestsHTTP2:                     s.requestsHTTP2.Load(),
		ResponsesByRun:                    map[string]int64{},
		Statuses:                          map[string]string{},
	}
	h.mu.Lock()
	all := make([]*response, 0, len(h.responses))
	for _, r := range h.responses {
		all = append(all, r)
	}
	for id, ri := range h.runs {
		if ri.created > 0 {
			st.ResponsesByRun[id] = ri.created
		}
	}
	h.mu.Unlock()
	for _, r := range all {
		r.mu.Lock()
		st.Statuses[r.id] = r.status
		r.mu.Unlock()
	}
	return st
}

// Response returns the response object id as GET /responses/{id} would,
// whatever its store flag; false if the id is unknown or deleted.
func (h *Handler) Response(id string) (json.RawMessage, bool) {
	h.mu.Lock()
	r := h.responses[id]
	h.mu.Unlock()
	if r == nil {
		return nil, false
	}
	return r.snapshot(), true
}

// Record returns the emulator's record of response id.
func (h *Handler) Record(id string) (ResponseRecord, bool) {
	h.mu.Lock()
	r := h.responses[id]
	h.mu.Unlock()
	if r == nil {
		return ResponseRecord{}, false
	}
	return r.record(), true
}

// Records returns the records of the responses created for metadata.run_id
// runID, oldest first (deleted ones included).
func (h *Handler) Records(runID string) []ResponseRecord {
	h.mu.Lock()
	var rs []*response
	if ri := h.runs[runID]; ri != nil {
		rs = append(rs, ri.response...)
	}
	h.mu.Unlock()
	out := make([]ResponseRecord, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.record())
	}
	return out
}

// CreateRequests returns the raw bodies of every create request received
// with metadata.run_id == runID, oldest first, including those answered with
// an error (emu_create_status, validation), so tests can check what reached
// "Foundry" and how often.
func (h *Handler) CreateRequests(runID string) []json.RawMessage {
	h.mu.Lock()
	defer h.mu.Unlock()
	ri := h.runs[runID]
	if ri == nil {
		return nil
	}
	out := make([]json.RawMessage, len(ri.bodies))
	copy(out, ri.bodies)
	return out
}

// createsReceived is the number of create requests received so far for
// runID (this one included, once recorded).
func (h *Handler) createsReceived(runID string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ri := h.runs[runID]; ri != nil {
		return len(ri.bodies)
	}
	return 0
}

// recordCreate remembers a create body received for runID.
func (h *Handler) recordCreate(runID string, body []byte) {
	if runID == "" {
		return
	}
	h.mu.Lock()
	ri := h.runLocked(runID)
	ri.bodies = append(ri.bodies, json.RawMessage(body))
	h.mu.Unlock()
}

// logEnd logs a response's final status (r.mu held).
func (h *Handler) logEnd(r *response) {
	h.cfg.Logger.Debug().Str("response_id", r.id).Str("run_id", r.runID).
		Str("status", r.status).Int("tokens", r.tokens).Msg("foundrytest: response finished")
}
