package foundrytest

import (
	"context"
	"encoding/json"
	"sync"
	"time"
)

// response is one response held by the emulator: its request, its scenario,
// its state and its append-only event log. The generation goroutine is the
// only writer of events; followers (SSE streams) read the log.
type response struct {
	h           *Handler
	id          string
	hexID       string // the id's hex part, shared by the item ids
	hosted      bool   // a hosted agent: background ignored, GET stuck in_progress, no resume
	msgID       string
	mcpID       string
	runID       string
	req         *createRequest
	sc          scenario
	seed        uint64
	createdAt   time.Time
	proto       string // the create request's protocol (http.Request.Proto)
	inputTokens int
	stop        chan struct{} // closed when the generation must stop at once
	done        chan struct{} // closed when the event log is complete

	mu         sync.Mutex
	status     string
	createdObj *responseObject // the object sent with response.created
	// The event log: buf[ends[i-1]:ends[i]] is the encoded SSE frame of the
	// event with sequence number i. Frames are encoded once, when appended;
	// buf is only ever appended to, so a follower may keep a slice of it
	// after unlocking.
	buf         []byte
	ends        []int
	events      int           // len(ends), kept after the log is released
	wake        chan struct{} // made by a waiting follower, closed by the next append
	closed      bool          // the log is complete
	stopped     bool          // emit nothing more (cancel, delete, failure, close)
	stopClosed  bool
	deleted     bool
	output      []any // *messageItem or *mcpCallItem, in output order
	msg         *messageItem
	msgIndex    int
	partAdded   bool
	tool        *mcpCallItem
	fcalls      []*functionCallItem
	toolIndex   int
	toolRunning bool
	text        []byte
	tokens      int
	errObj      *errorDetail
	incomplete  *incompleteDetails
	usage       *usageObject
	completedAt time.Time
	finishedAt  time.Time
	cancelledAt time.Time
	// Streams: attached counts connected SSE followers; detached is set when
	// a follower went away before the end and none is attached, so the work
	// done meanwhile is work done "after a client disconnect".
	attached       int
	detached       bool
	disconnectedAt time.Time
	writeFailed    bool // non-background: the client went away, the next write fails

	tokensAfterCancel     int
	tokensAfterDisconnect int

	// Cancel calls received for this response (faults.go).
	cancelCalls       int
	cancelInFlight    int
	cancelMaxInFlight int
	cancelFaulted     int
	firstCancelCall   time.Time

	// With Config.RecordTimes: when each token was generated (Unix ns) and
	// the length of the text once it is appended; the tool calls.
	tokenTimes []int64
	tokenEnds  []int
	toolCalls  []ToolCallRecord
}

// seqLocked is the sequence number of the next event.
func (r *response) seqLocked() int { return len(r.ends) }

// appendEventLocked encodes v as the next SSE frame of type typ.
func (r *response) appendEventLocked(typ string, v any) {
	data, err := json.Marshal(v)
	if err != nil { // cannot happen with the emulator's own types
		panic("foundrytest: encode " + typ + ": " + err.Error())
	}
	r.buf = appendFrame(r.buf, typ, data)
	r.endEventLocked()
}

// endEventLocked records that buf now ends with a complete frame and wakes
// the followers.
func (r *response) endEventLocked() {
	r.ends = append(r.ends, len(r.buf))
	r.events++
	r.notifyLocked()
}

func (r *response) notifyLocked() {
	if r.wake != nil {
		close(r.wake)
		r.wake = nil
	}
}

// closeLogLocked marks the log complete: followers end after the last frame.
func (r *response) closeLogLocked() {
	if r.closed {
		return
	}
	r.closed = true
	close(r.done)
	r.notifyLocked()
}

// releaseLocked drops the event log of a forgotten response (its record
// stays, for Records). Followers still writing keep their own slice of it.
func (r *response) releaseLocked() {
	r.buf, r.ends = nil, nil
	r.createdObj = nil
}

// stopLocked makes the generation stop at its next step and interrupts its
// current wait (token delay or tool call).
func (r *response) stopLocked() {
	r.stopped = true
	if !r.stopClosed {
		r.stopClosed = true
		close(r.stop)
	}
}

// usageLocked is the usage so far.
func (r *response) usageLocked() *usageObject {
	return &usageObject{
		InputTokens:  r.inputTokens,
		OutputTokens: r.tokens,
		TotalTokens:  r.inputTokens + r.tokens,
	}
}

// finishLocked sets a final status and the usage.
func (r *response) finishLocked(status string) {
	now := r.h.cfg.Clock()
	r.status = status
	r.usage = r.usageLocked()
	r.finishedAt = now
	if status == statusCompleted {
		r.completedAt = now
	}
	r.markOpenItemsLocked(statusIncomplete)
}

// markOpenItemsLocked gives every item still in progress the status s.
func (r *response) markOpenItemsLocked(s string) {
	if r.msg != nil && r.msg.Status == statusInProgress {
		r.msg.Status = s
	}
	if r.tool != nil && r.tool.Status == statusInProgress {
		r.tool.Status = s
	}
	for _, f := range r.fcalls {
		if f.Status == statusInProgress {
			f.Status = s
		}
	}
}

// messageLocked is a copy of the message item with its text so far.
func (r *response) messageLocked() *messageItem {
	m := *r.msg
	m.Content = []any{}
	if r.partAdded {
		m.Content = []any{r.partLocked()}
	}
	return &m
}

// partLocked is the message's content part with the text so far: a
// refusal part when the model refuses (emu_refusal).
func (r *response) partLocked() any {
	if r.sc.refusal {
		return refusalPart{Type: "refusal", Refusal: string(r.text)}
	}
	return newOutputText(string(r.text))
}

// toolLocked is a copy of the mcp_call item.
func (r *response) toolLocked() *mcpCallItem {
	t := *r.tool
	return &t
}

// snapshotLocked is the Response object as it stands. It shares nothing
// mutable with r, so it can be encoded after unlocking.
func (r *response) snapshotLocked() *responseObject {
	req := r.req
	obj := &responseObject{
		ID:                r.id,
		Object:            "response",
		CreatedAt:         r.createdAt.Unix(),
		Status:            r.status,
		Background:        req.background,
		Error:             r.errObj,
		IncompleteDetails: r.incomplete,
		Instructions:      req.instructions,
		Model:             req.model,
		Output:            make([]any, 0, len(r.output)),
		ParallelToolCalls: true,
		Store:             req.store,
		Temperature:       1,
		TopP:              1,
		ToolChoice:        "auto",
		Tools:             req.tools,
		Truncation:        "disabled",
		Usage:             r.usage,
		Metadata:          req.metadata,
	}
	if obj.Tools == nil {
		obj.Tools = []json.RawMessage{}
	}
	if req.maxOutput > 0 {
		n := req.maxOutput
		obj.MaxOutputTokens = &n
	}
	switch req.agentField {
	case "agent_reference":
		obj.AgentReference = req.agentRaw
	case "agent":
		obj.Agent = req.agentRaw
	}
	if !r.completedAt.IsZero() {
		t := r.completedAt.Unix()
		obj.CompletedAt = &t
	}
	for _, it := range r.output {
		switch it := it.(type) {
		case *messageItem:
			obj.Output = append(obj.Output, r.messageLocked())
		case *mcpCallItem:
			obj.Output = append(obj.Output, r.toolLocked())
		case *mcpListToolsItem:
			c := *it
			obj.Output = append(obj.Output, &c)
		case *functionCallItem:
			c := *it
			obj.Output = append(obj.Output, &c)
		default: // immutable items (mcp_approval_request)
			obj.Output = append(obj.Output, it)
		}
	}
	return obj
}

// hostedSnapshot is what GET shows of a hosted agent's response: stuck at
// in_progress with no output, even after the agent completed
// (Azure/azure-sdk-for-python#46015).
func (r *response) hostedSnapshot() json.RawMessage {
	r.mu.Lock()
	obj := r.snapshotLocked()
	r.mu.Unlock()
	obj.Status, obj.Output, obj.Usage, obj.CompletedAt, obj.Error, obj.IncompleteDetails = statusInProgress, []any{}, nil, nil, nil, nil
	data, _ := json.Marshal(obj)
	return data
}

// snapshot is snapshotLocked encoded as JSON.
func (r *response) snapshot() json.RawMessage {
	r.mu.Lock()
	obj := r.snapshotLocked()
	r.mu.Unlock()
	data, _ := json.Marshal(obj)
	return data
}

// attach registers a connected stream.
func (r *response) attach() {
	r.mu.Lock()
	r.attached++
	r.detached = false
	r.mu.Unlock()
	r.h.stats.streamOpened()
}

// detach unregisters a stream; lost reports that it went away before the end
// of the log (client disconnect, write error or emu_drop_after).
func (r *response) detach(lost, createStream bool) {
	r.mu.Lock()
	r.attached--
	if lost {
		r.lostLocked(createStream)
	}
	r.mu.Unlock()
	r.h.stats.openStreams.Add(-1)
}

// lostLocked records that a client went away before the end. createStream
// says it was the create's own connection.
func (r *response) lostLocked(createStream bool) {
	if r.closed {
		return
	}
	if r.disconnectedAt.IsZero() {
		r.disconnectedAt = r.h.cfg.Clock()
	}
	if r.attached == 0 {
		r.detached = true
	}
	if createStream && !r.req.background {
		// A foreground response lives on its connection: its next write fails.
		r.writeFailed = true
	}
}

// record is the exported view of r.
func (r *response) record() ResponseRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return ResponseRecord{
		ID:                     r.id,
		RunID:                  r.runID,
		PreviousResponseID:     r.req.previousID(),
		Status:                 r.status,
		Proto:                  r.proto,
		Background:             r.req.background,
		Stream:                 r.req.stream,
		Store:                  r.req.store,
		CreatedAt:              r.createdAt,
		FinishedAt:             r.finishedAt,
		CancelledAt:            r.cancelledAt,
		DisconnectedAt:         r.disconnectedAt,
		Events:                 r.events,
		Tokens:                 r.tokens,
		TokensAfterCancel:      r.tokensAfterCancel,
		TokensAfterDisconnect:  r.tokensAfterDisconnect,
		StreamsAttached:        r.attached,
		CancelCalls:            r.cancelCalls,
		CancelCallsMaxInFlight: r.cancelMaxInFlight,
		CancelCallsFaulted:     r.cancelFaulted,
		FirstCancelCallAt:      r.firstCancelCall,
		Text:                   string(r.text),
		TokenTimes:             append([]int64(nil), r.tokenTimes...),
		TokenEnds:              append([]int(nil), r.tokenEnds...),
		ToolCalls:              append([]ToolCallRecord(nil), r.toolCalls...),
	}
}

// waitEvents waits until the log holds n events or is complete; false if
// ctx ended first.
func (r *response) waitEvents(ctx context.Context, n int) bool {
	for {
		r.mu.Lock()
		if len(r.ends) >= n || r.closed {
			r.mu.Unlock()
			return true
		}
		if r.wake == nil {
			r.wake = make(chan struct{})
		}
		wake := r.wake
		r.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return false
		}
	}
}

// waitCreated waits until response.created was emitted (keepalives may come
// first) or the log is complete; false if ctx ended first.
func (r *response) waitCreated(ctx context.Context) bool {
	for {
		r.mu.Lock()
		if r.createdObj != nil || r.closed {
			r.mu.Unlock()
			return true
		}
		if r.wake == nil {
			r.wake = make(chan struct{})
		}
		wake := r.wake
		r.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return false
		}
	}
}

// clientGone records that the client of a foreground, non-streamed create
// went away: like a stream's, its response ends at the next "write".
func (r *response) clientGone() {
	r.mu.Lock()
	r.lostLocked(true)
	r.mu.Unlock()
}
