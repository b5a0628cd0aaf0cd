package foundrytest

import (
	"fmt"
	"time"
)

// generator runs one response's scenario. It runs on its own goroutine,
// started by the create handler and owned by the Handler, which waits for it
// in Close. It is the only writer of the response's event log.
type generator struct {
	r          *response
	h          *Handler
	timer      *time.Timer
	keepalives int // keepalive events emitted (at most maxKeepalives)
}

// run generates r to its end (or until it is stopped).
func (h *Handler) run(r *response) {
	defer h.genWG.Done()
	defer h.stats.active.Add(-1)
	g := &generator{r: r, h: h}
	defer g.end()
	g.generate()
}

// end closes the log whatever happened, so that followers always finish.
func (g *generator) end() {
	if g.timer != nil {
		g.timer.Stop()
	}
	r := g.r
	r.mu.Lock()
	r.closeLogLocked()
	r.mu.Unlock()
}

func (g *generator) generate() {
	r := g.r
	if r.sc.errorFirst {
		g.errorFirst()
		return
	}
	if !g.createdWait() {
		return
	}
	if !g.lifecycle(evCreated, "") {
		return
	}
	if r.req.background && !g.lifecycle(evQueued, "") {
		return
	}
	if r.req.background && !g.keepaliveWait(r.sc.queuedDelay) {
		// emu_queued_ms: the response stays queued, with keepalives and no
		// text ("Background: true, stream: true Response can be stuck in
		// queued after a near-instant client disconnect", OpenAI developer
		// community: stuck for 10 minutes and more).
		return
	}
	if !g.lifecycle(evInProgress, statusInProgress) {
		return
	}
	if r.req.followUp.answers() {
		// A follow-up: the approved MCP calls run, then the model answers;
		// the scripted call is not made again. The tools were listed by
		// the previous response, which is in context ("as long as the
		// mcp_list_tools item is present in the context … the API will
		// not fetch a list of tools from the MCP server again": OpenAI,
		// "Remote MCP" guide).
		index := 0
		for _, c := range r.req.approved {
			if !g.toolCall(index, c.label, c.name, c.requestID) {
				return
			}
			index++
		}
		g.message(index)
		return
	}
	index := 0
	servers := r.req.mcpServers
	if r.sc.listToolsFail && len(servers) == 0 {
		servers = []mcpServer{{label: defaultServerLabel}}
	}
	for i := range servers {
		if r.sc.listToolsFail && i == 0 {
			g.listToolsFailed(index, servers[i].label)
			return
		}
		if !g.listTools(index, &servers[i]) {
			return
		}
		index++
	}
	if r.sc.toolDelay != toolDisabled {
		call := r.req.call
		switch {
		case call == nil: // a scripted call with no tool in the request
			if !g.toolCall(index, defaultServerLabel, defaultToolName, "") {
				return
			}
			index++
		case call.function:
			// The model calls the function (emu_function_calls times, in
			// parallel, the request's function tools in turn): the response
			// ends waiting for the outputs, with no text.
			for k := range r.sc.functionCalls {
				if !g.functionCall(index+k, k, call.functionName(k)) {
					return
				}
			}
			g.finish(statusCompleted, evCompleted)
			return
		case call.approval:
			// The MCP call needs approval: the response ends with the
			// request, the call does not run, and no text follows.
			if g.approvalRequest(index, call) {
				g.finish(statusCompleted, evCompleted)
			}
			return
		default:
			if !g.toolCall(index, call.label, call.name, "") {
				return
			}
			index++
		}
	}
	g.message(index)
}

// maxKeepalives bounds the keepalive events of one response (a tiny
// emu_keepalive_ms with a long emu_created_ms must not grow the log without
// bound).
const maxKeepalives = 1000

// createdWait holds back response.created for emu_created_ms, sending a
// keepalive event every keepalive interval meanwhile (the headers went out
// at once): under load the service sends {"type":"keepalive"} frames about
// every 30 s before a response.created that comes minutes later
// (BerriAI/litellm#39617; openai/openai-node#1964).
func (g *generator) createdWait() bool { return g.keepaliveWait(g.r.sc.createdDelay) }

// keepaliveWait pauses for d, emitting a keepalive event every keepalive
// interval (emu_keepalive_ms) that ends before d does; it reports whether
// generation may go on. After maxKeepalives keepalives (for the whole
// response) the rest of a wait is silent.
func (g *generator) keepaliveWait(d time.Duration) bool {
	r := g.r
	left := d
	for left > 0 {
		step := min(left, r.sc.keepalive)
		if g.keepalives >= maxKeepalives {
			step = left // bounded: the rest of the wait is silent
		}
		if !g.wait(step) {
			return false
		}
		left -= step
		if left > 0 {
			g.keepalives++
			if !g.emit(evKeepalive, func(r *response, seq int) any {
				return keepaliveEvent{Type: evKeepalive, SequenceNumber: seq}
			}) {
				return false
			}
		}
	}
	return true
}

// silence is emu_silent_after: the generation pauses, emitting nothing (no
// keepalive either), for emu_silent_ms or, without it, until the response
// is stopped; every stream following it stays open and silent meanwhile
// ("Background: true, stream: true Response can be stuck in queued after a
// near-instant client disconnect", OpenAI developer community: a response
// can also go silent). It reports whether generation may go on.
func (g *generator) silence() bool {
	if g.r.sc.silentFor != silentForever {
		return g.wait(g.r.sc.silentFor)
	}
	<-g.r.stop
	return false
}

// wait pauses for d, or less if the response is stopped; it reports whether
// generation may go on. A zero d only checks for a stop.
func (g *generator) wait(d time.Duration) bool {
	if d <= 0 {
		select {
		case <-g.r.stop:
			return false
		default:
			return true
		}
	}
	if g.timer == nil {
		g.timer = time.NewTimer(d)
	} else {
		g.timer.Reset(d)
	}
	select {
	case <-g.timer.C:
		return true
	case <-g.r.stop:
		return false
	}
}

// canEmitLocked decides whether the next event may be emitted. It applies
// the end conditions that are checked "at the next write": a stop, a
// foreground client gone (the write fails: the response ends cancelled) and
// emu_fail_after.
func (g *generator) canEmitLocked() bool {
	r := g.r
	switch {
	case r.stopped:
		return false
	case r.writeFailed:
		r.finishLocked(statusCancelled)
		r.stopLocked()
		r.closeLogLocked()
		g.h.logEnd(r)
		return false
	case r.sc.failAfter >= 0 && len(r.ends) >= r.sc.failAfter:
		r.finishLocked(statusFailed)
		r.errObj = &errorDetail{Code: r.sc.failCode, Message: failCodes[r.sc.failCode]}
		r.appendEventLocked(evFailed, lifecycleEvent{Type: evFailed, SequenceNumber: r.seqLocked(), Response: r.snapshotLocked()})
		r.stopLocked()
		r.closeLogLocked()
		g.h.logEnd(r)
		return false
	}
	return true
}

// emit appends the event built by build (under the lock, with the event's
// sequence number) unless generation must stop.
func (g *generator) emit(typ string, build func(r *response, seq int) any) bool {
	r := g.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if !g.canEmitLocked() {
		return false
	}
	r.appendEventLocked(typ, build(r, r.seqLocked()))
	return true
}

// lifecycle emits a response.* event carrying the snapshot, after moving the
// status to status (unless a cancel already set it).
func (g *generator) lifecycle(typ, status string) bool {
	return g.emit(typ, func(r *response, seq int) any {
		if status != "" && r.cancelledAt.IsZero() {
			r.status = status
		}
		obj := r.snapshotLocked()
		if typ == evCreated {
			r.createdObj = obj
		}
		return lifecycleEvent{Type: typ, SequenceNumber: seq, Response: obj}
	})
}

// toolArguments are the scripted call's arguments.
func (r *response) toolArguments() string {
	return fmt.Sprintf(`{"query":"%s %s"}`, word(r.seed, 1<<20), word(r.seed, 1<<20+1))
}

// listTools emits the mcp_list_tools item of an MCP server as output item
// index: output_item.added, response.mcp_list_tools.in_progress and
// .completed, output_item.done with the tools (OpenAI API reference,
// streaming events; the service lists the tools of every MCP server of a
// request before the model can call one).
func (g *generator) listTools(index int, srv *mcpServer) bool {
	id := fmt.Sprintf("mcpl_%s%02x", g.r.hexID, index)
	var item *mcpListToolsItem
	return g.emit(evItemAdded, func(r *response, seq int) any {
		item = &mcpListToolsItem{ID: id, Type: "mcp_list_tools", ServerLabel: srv.label, Tools: []mcpToolInfo{}}
		r.output = append(r.output, item)
		c := *item
		return itemEvent{Type: evItemAdded, SequenceNumber: seq, OutputIndex: index, Item: &c}
	}) && g.emit(evListInProgress, func(r *response, seq int) any {
		return mcpEvent{Type: evListInProgress, SequenceNumber: seq, ItemID: id, OutputIndex: index}
	}) && g.emit(evListCompleted, func(r *response, seq int) any {
		tools := make([]mcpToolInfo, len(srv.tools))
		for i, name := range srv.tools {
			tools[i] = mcpToolInfo{Name: name, Description: "Emulated MCP tool.", InputSchema: toolInputSchema}
		}
		item.Tools = tools // replaced, never changed in place: snapshots share it
		return mcpEvent{Type: evListCompleted, SequenceNumber: seq, ItemID: id, OutputIndex: index}
	}) && g.emit(evItemDone, func(r *response, seq int) any {
		c := *item
		return itemEvent{Type: evItemDone, SequenceNumber: seq, OutputIndex: index, Item: &c}
	})
}

// toolInputSchema is the input schema of every emulated MCP tool.
var toolInputSchema = []byte(`{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`)

// approvalRequest emits an mcp_approval_request item as output item index:
// only output_item.added and .done (Azure.AI.AgentServer.Responses,
// ResponseEventStream.OutputItemMcpApprovalRequest: "MCP approval requests
// have no intermediate events").
func (g *generator) approvalRequest(index int, call *toolCallTarget) bool {
	item := &mcpApprovalItem{ID: "mcpr_" + g.r.hexID, Type: "mcp_approval_request", ServerLabel: call.label,
		Name: call.name, Arguments: g.r.toolArguments()}
	return g.emit(evItemAdded, func(r *response, seq int) any {
		r.output = append(r.output, item)
		return itemEvent{Type: evItemAdded, SequenceNumber: seq, OutputIndex: index, Item: item}
	}) && g.emit(evItemDone, func(r *response, seq int) any {
		return itemEvent{Type: evItemDone, SequenceNumber: seq, OutputIndex: index, Item: item}
	})
}

// functionCall emits function_call item k of the response as output item
// index: added, response.function_call_arguments.delta and .done, done.
func (g *generator) functionCall(index, k int, name string) bool {
	r := g.r
	args := r.toolArguments()
	id := fmt.Sprintf("fc_%s%02x", r.hexID[:46], k)
	callID := fmt.Sprintf("call_%s%02x", r.hexID[:22], k)
	var item *functionCallItem
	return g.emit(evItemAdded, func(r *response, seq int) any {
		item = &functionCallItem{ID: id, Type: "function_call", CallID: callID, Name: name, Status: statusInProgress}
		r.fcalls = append(r.fcalls, item)
		r.output = append(r.output, item)
		c := *item
		return itemEvent{Type: evItemAdded, SequenceNumber: seq, OutputIndex: index, Item: &c}
	}) && g.emit(evFuncArgsDelta, func(r *response, seq int) any {
		item.Arguments = args
		return functionArgsDeltaEvent{Type: evFuncArgsDelta, SequenceNumber: seq, ItemID: id, OutputIndex: index, Delta: args}
	}) && g.emit(evFuncArgsDone, func(r *response, seq int) any {
		return functionArgsDoneEvent{Type: evFuncArgsDone, SequenceNumber: seq, ItemID: id, OutputIndex: index, Name: name, Arguments: args}
	}) && g.emit(evItemDone, func(r *response, seq int) any {
		item.Status = statusCompleted
		c := *item
		return itemEvent{Type: evItemDone, SequenceNumber: seq, OutputIndex: index, Item: &c}
	})
}

// toolCall runs the scripted MCP tool call as output item index; approvalID
// is the mcp_approval_request that let it run, if any.
func (g *generator) toolCall(index int, label, name, approvalID string) bool {
	r := g.r
	args := r.toolArguments()
	ok := g.emit(evItemAdded, func(r *response, seq int) any {
		r.tool = &mcpCallItem{ID: r.mcpID, Type: "mcp_call", Name: name, ServerLabel: label, Status: statusInProgress}
		if approvalID != "" {
			r.tool.ApprovalRequestID = &approvalID
		}
		r.toolIndex = index
		r.output = append(r.output, r.tool)
		return itemEvent{Type: evItemAdded, SequenceNumber: seq, OutputIndex: index, Item: r.toolLocked()}
	}) && g.emit(evMCPInProgress, func(r *response, seq int) any {
		return mcpEvent{Type: evMCPInProgress, SequenceNumber: seq, ItemID: r.mcpID, OutputIndex: index}
	}) && g.emit(evMCPArgsDelta, func(r *response, seq int) any {
		r.tool.Arguments = args
		return mcpArgsDeltaEvent{Type: evMCPArgsDelta, SequenceNumber: seq, ItemID: r.mcpID, OutputIndex: index, Delta: args}
	}) && g.emit(evMCPArgsDone, func(r *response, seq int) any {
		r.toolRunning = true
		g.h.stats.toolStarted.Add(1)
		if g.h.cfg.RecordTimes {
			r.toolCalls = append(r.toolCalls, ToolCallRecord{StartedAt: time.Now()})
		}
		return mcpArgsDoneEvent{Type: evMCPArgsDone, SequenceNumber: seq, ItemID: r.mcpID, OutputIndex: index, Arguments: args}
	})
	if !ok {
		r.mu.Lock()
		r.toolRunning = false
		r.mu.Unlock()
		return false
	}

	// The call runs on the "MCP server": a cancel aborts it (and counts it,
	// see cancel); a client disconnect does not.
	finished := g.wait(r.sc.toolDelay)
	r.mu.Lock()
	if !finished || !r.toolRunning {
		r.toolRunning = false
		r.mu.Unlock()
		return false
	}
	r.toolRunning = false
	g.h.stats.toolCompleted.Add(1)
	if n := len(r.toolCalls); n > 0 {
		r.toolCalls[n-1].FinishedAt = time.Now()
	}
	if !r.cancelledAt.IsZero() {
		g.h.stats.toolAfterCancel.Add(1)
	}
	if r.detached || r.writeFailed {
		g.h.stats.toolAfterDisconnect.Add(1)
	}
	// The result exists once the call has run, whether or not the events
	// telling it can still be written.
	typ := evMCPCompleted
	if r.sc.toolFail {
		typ = evMCPFailed
		r.tool.Status = statusFailed
		r.tool.Error = &mcpError{Type: "mcp_protocol_error", Code: -32603, Message: toolFailedMessage}
	} else {
		r.tool.Status = statusCompleted
		out := fmt.Sprintf("Emulated result: %s %s %s.", word(r.seed, 1<<21), word(r.seed, 1<<21+1), word(r.seed, 1<<21+2))
		r.tool.Output = &out
	}
	r.mu.Unlock()

	return g.emit(typ, func(r *response, seq int) any {
		return mcpEvent{Type: typ, SequenceNumber: seq, ItemID: r.mcpID, OutputIndex: index}
	}) && g.emit(evItemDone, func(r *response, seq int) any {
		return itemEvent{Type: evItemDone, SequenceNumber: seq, OutputIndex: index, Item: r.toolLocked()}
	})
}

// message generates the assistant message as output item index, then the
// terminal event.
func (g *generator) message(index int) {
	r := g.r
	ok := g.emit(evItemAdded, func(r *response, seq int) any {
		r.msg = &messageItem{ID: r.msgID, Type: "message", Status: statusInProgress, Role: "assistant", Content: []any{}}
		r.msgIndex = index
		r.output = append(r.output, r.msg)
		return itemEvent{Type: evItemAdded, SequenceNumber: seq, OutputIndex: index, Item: r.messageLocked()}
	}) && g.emit(evPartAdded, func(r *response, seq int) any {
		r.partAdded = true
		return partEvent{Type: evPartAdded, SequenceNumber: seq, ItemID: r.msgID, OutputIndex: index, Part: r.partLocked()}
	})
	if !ok {
		return
	}
	limit, final, terminal := r.sc.tokens, statusCompleted, evCompleted
	if r.req.maxOutput > 0 && r.req.maxOutput < limit {
		limit, final, terminal = r.req.maxOutput, statusIncomplete, evIncomplete
	}
	if r.sc.contentFilter != "" {
		limit = (limit + 1) / 2 // the filter stops the text half way
	}
	if r.sc.refusal {
		limit = len(refusalPieces)
	}
	if !g.tokens(limit) {
		return
	}
	switch r.sc.contentFilter {
	case filterStream:
		g.fail(nil, contentPolicyEvent)
		return
	case filterIncomplete:
		final, terminal = statusIncomplete, evIncomplete
		r.mu.Lock()
		r.incomplete = &incompleteDetails{Reason: reasonFilter}
		r.mu.Unlock()
	}
	if g.textDone(index, final) {
		g.finish(final, terminal)
	}
}

// tokens generates limit text (or refusal) tokens, with a keepalive event
// after every emu_keepalive_every of them; it reports whether generation
// may go on.
func (g *generator) tokens(limit int) bool {
	r := g.r
	for i := 0; i < limit; i++ {
		if i == r.sc.silentAfter && !g.silence() {
			return false
		}
		if !g.wait(r.sc.tokenDelay) {
			return false
		}
		if ok := r.sc.refusal && g.refusalToken(i) || !r.sc.refusal && g.token(i); !ok {
			return false
		}
		if n := r.sc.keepaliveEvery; n > 0 && (i+1)%n == 0 && i+1 < limit && !g.keepalive() {
			return false
		}
	}
	return true
}

// keepalive emits a keepalive event. The service sends them mid-stream
// too, not only before response.created (openai/openai-node#1964).
func (g *generator) keepalive() bool {
	return g.emit(evKeepalive, func(r *response, seq int) any {
		return keepaliveEvent{Type: evKeepalive, SequenceNumber: seq}
	})
}

// textDone emits the end of the message's text: output_text.done (or
// refusal.done), content_part.done and output_item.done with status final.
func (g *generator) textDone(index int, final string) bool {
	var done bool
	if g.r.sc.refusal {
		done = g.emit(evRefusalDone, func(r *response, seq int) any {
			return refusalDoneEvent{Type: evRefusalDone, SequenceNumber: seq, ItemID: r.msgID, OutputIndex: index, Refusal: string(r.text)}
		})
	} else {
		done = g.emit(evTextDone, func(r *response, seq int) any {
			return textDoneEvent{Type: evTextDone, SequenceNumber: seq, ItemID: r.msgID, OutputIndex: index, Text: string(r.text), Logprobs: []any{}}
		})
	}
	return done && g.emit(evPartDone, func(r *response, seq int) any {
		return partEvent{Type: evPartDone, SequenceNumber: seq, ItemID: r.msgID, OutputIndex: index, Part: r.partLocked()}
	}) && g.emit(evItemDone, func(r *response, seq int) any {
		r.msg.Status = final
		return itemEvent{Type: evItemDone, SequenceNumber: seq, OutputIndex: index, Item: r.messageLocked()}
	})
}

// finish ends the response with status final and its terminal event. An
// incomplete response without a reason set stopped at max_output_tokens.
func (g *generator) finish(final, terminal string) {
	r := g.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if !g.canEmitLocked() {
		return
	}
	r.finishLocked(final)
	if final == statusIncomplete && r.incomplete == nil {
		r.incomplete = &incompleteDetails{Reason: reasonMaxTokens}
	}
	r.appendEventLocked(terminal, lifecycleEvent{Type: terminal, SequenceNumber: r.seqLocked(), Response: r.snapshotLocked()})
	r.closeLogLocked()
	g.h.logEnd(r)
}

// token generates text token i and appends its delta event. This is the hot
// path: the frame is encoded straight into the log, without reflection.
func (g *generator) token(i int) bool {
	r := g.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.writeFailed && !r.stopped {
		// The token is generated (and billed) but its write fails.
		g.countTokenLocked(i)
	}
	if !g.canEmitLocked() {
		return false
	}
	g.countTokenLocked(i)
	r.buf = appendDeltaFrame(r.buf, len(r.ends), r.msgID, r.msgIndex, r.seed, i, r.req.obfuscate)
	r.text = appendToken(r.text, r.seed, i)
	r.endEventLocked()
	return true
}

// countTokenLocked counts token i as generated (and, with
// Config.RecordTimes, records when).
func (g *generator) countTokenLocked(i int) {
	r, s := g.r, &g.h.stats
	r.tokens++
	if g.h.cfg.RecordTimes {
		r.tokenTimes = append(r.tokenTimes, time.Now().UnixNano())
		r.tokenEnds = append(r.tokenEnds, len(r.text)+tokenLen(r.seed, i))
	}
	s.tokens.Add(1)
	if !r.cancelledAt.IsZero() {
		r.tokensAfterCancel++
		s.tokensAfterCancel.Add(1)
	}
	if r.detached || r.writeFailed {
		r.tokensAfterDisconnect++
		s.tokensAfterDisconnect.Add(1)
	}
}
