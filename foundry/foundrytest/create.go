package foundrytest

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
)

// handleCreate serves POST /openai/v1/responses.
func (h *Handler) handleCreate(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		h.stats.rejected.Add(1)
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			(&apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error",
				message: "The request body is too large."}).write(w)
			return
		}
		invalidRequest("", "", "Could not read the request body.").write(w)
		return
	}
	h.recordCreate(peekRunID(body), body)
	if aerr := h.throttled(); aerr != nil {
		h.stats.rejected.Add(1)
		h.stats.throttled.Add(1)
		aerr.write(w)
		return
	}
	cr, aerr := parseCreateOpts(body, parseOptions{acceptAgentField: h.cfg.AcceptDeprecatedAgentField})
	if aerr != nil {
		h.stats.rejected.Add(1)
		aerr.write(w)
		return
	}
	if cr.followUp != nil {
		if cr.approved, aerr = h.resolveFollowUp(cr.followUp); aerr != nil {
			h.stats.rejected.Add(1)
			aerr.write(w)
			return
		}
	}
	sc, aerr := parseScenario(cr.metadata, h.cfg)
	if aerr != nil {
		h.stats.rejected.Add(1)
		aerr.write(w)
		return
	}
	if sc.createStatus != 0 && (sc.createStatusTimes == noLimit || h.createsReceived(cr.metadata["run_id"]) <= sc.createStatusTimes) {
		h.stats.rejected.Add(1)
		e := statusError(sc.createStatus)
		if sc.shouldRetry != "" {
			// openai-go honours it over the status
			// (internal/requestconfig/requestconfig.go, shouldRetry).
			e.header = http.Header{"X-Should-Retry": {sc.shouldRetry}}
		}
		e.write(w)
		return
	}
	if sc.contentFilter == filterPrompt {
		h.stats.rejected.Add(1)
		errContentFilter().write(w)
		return
	}
	if sc.hosted && cr.agentField == "" {
		h.stats.rejected.Add(1)
		invalidRequest("metadata."+KeyHostedAgent, "invalid_value",
			"Invalid value for 'metadata.%s': a hosted agent needs an agent reference, not a model.", KeyHostedAgent).write(w)
		return
	}
	if cr.agentField != "" && strings.HasPrefix(cr.agentName, HostedAgentPrefix) {
		sc.hosted = true
	}
	if sc.hosted {
		// A hosted agent drops background=true: the response reports
		// background false and lives like a foreground one
		// (Azure/azure-sdk-for-python#46015).
		cr.background = false
	}

	quotaHeader, aerr := h.chargeQuota(cr, sc)
	if aerr != nil {
		h.stats.rejected.Add(1)
		h.stats.overQuota.Add(1)
		aerr.write(w)
		return
	}
	for k, v := range quotaHeader {
		w.Header()[k] = v
	}
	r := h.newResponse(cr, sc)
	r.proto = req.Proto
	if !h.register(r) {
		(&apiError{status: http.StatusServiceUnavailable, typ: "server_error",
			message: "The emulator is shutting down."}).write(w)
		return
	}
	h.cfg.Logger.Debug().Str("response_id", r.id).Str("run_id", r.runID).
		Bool("background", cr.background).Bool("stream", cr.stream).Msg("foundrytest: response created")

	ctx := req.Context()
	switch {
	case cr.stream:
		// The headers go out at once, before response.created, which can
		// take minutes under load (keepalive events come meanwhile).
		setSSEHeaders(w)
		w.WriteHeader(http.StatusOK)
		r.attach()
		if http.NewResponseController(w).Flush() != nil {
			r.detach(true, true)
			return
		}
		limit := sc.dropAfter
		if sc.errorAfter != noLimit && (limit == noLimit || sc.errorAfter < limit) {
			limit = sc.errorAfter
		}
		end := r.follow(ctx, w, 0, limit)
		if end == endCut && limit == sc.errorAfter && limit != sc.dropAfter {
			// emu_error_after: an "error" event ends this stream; the
			// response goes on (or fails, with emu_error_fail) on the
			// server, and GET or resume tell which (BerriAI/litellm#39617).
			end = writeErrorEvent(w, sc.errorAfter)
			r.detach(true, true)
			return
		}
		r.detach(end != endComplete, true)
		if end == endCut {
			cutConnection(w)
		}
	case cr.background:
		// Answer as soon as the response exists for clients (response.created).
		if !r.waitCreated(ctx) {
			return
		}
		r.mu.Lock()
		obj := r.createdObj
		r.mu.Unlock()
		if obj == nil { // closed before response.created (Close, DELETE)
			writeJSON(w, http.StatusOK, r.snapshot())
			return
		}
		writeJSON(w, http.StatusOK, obj)
	default:
		select {
		case <-r.done:
			writeJSON(w, http.StatusOK, r.snapshot())
		case <-ctx.Done():
			r.clientGone()
		}
	}
}

// newResponse builds the response for an accepted create.
func (h *Handler) newResponse(cr *createRequest, sc scenario) *response {
	hexID := newID()
	r := &response{
		h:         h,
		hexID:     hexID,
		hosted:    sc.hosted,
		id:        "resp_" + hexID,
		msgID:     "msg_" + hexID,
		mcpID:     "mcp_" + hexID,
		runID:     cr.metadata["run_id"],
		req:       cr,
		sc:        sc,
		seed:      requestSeed(cr),
		createdAt: h.cfg.Clock(),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		status:    statusInProgress,
	}
	if cr.background {
		r.status = statusQueued
	}
	// Size the event log for the scripted tokens (capped), so that a fast
	// generation does not spend its time growing it.
	tokens := sc.tokens
	if cr.maxOutput > 0 && cr.maxOutput < tokens {
		tokens = cr.maxOutput
	}
	r.buf = make([]byte, 0, min(8<<10+tokens*(len(deltaFrameOverhead)+len(r.msgID)+16), 4<<20))
	r.ends = make([]int, 0, min(tokens+16, 1<<16))
	var instr []byte
	if cr.instructions != nil {
		instr = []byte(*cr.instructions)
	}
	r.inputTokens = estimateTokens(cr.input, instr)
	return r
}

// peekRunID extracts metadata.run_id from a body that may be invalid.
func peekRunID(body []byte) string {
	var v struct {
		Metadata struct {
			RunID json.RawMessage `json:"run_id"`
		} `json:"metadata"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	var id string
	if json.Unmarshal(v.Metadata.RunID, &id) != nil {
		return ""
	}
	return id
}
