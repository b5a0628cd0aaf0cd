package foundrytest

import (
	"fmt"
	"strings"
)

// Ways a response ends that are neither a completion nor a scripted
// server_error: Azure's content filter, an error before anything else, a
// failed MCP tool listing; and the model's refusal, which completes.

// contentPolicyCode and quotaCode are the codes of the error events the
// service sends for a filtered stream and for an exhausted quota.
const (
	contentPolicyCode = "content_policy_violation"
	quotaCode         = "insufficient_quota"
	quotaMessage      = "You exceeded your current quota, please check your plan and billing details."
	filteredMessage   = "The response was filtered due to the prompt triggering Azure OpenAI's content management policy."
)

// contentPolicyEvent is the error event that follows the response.failed
// (error null) of a stream Azure's content filter stopped
// (emu_content_filter=stream; maximhq/bifrost#6419 and PR #6652).
func contentPolicyEvent(seq int) any {
	code := contentPolicyCode
	return errorEvent{Type: evError, SequenceNumber: seq, Code: &code, Message: filteredMessage}
}

// fail ends the response failed: response.failed with errObj as its error
// (nil is sent as null), then, when trailing is set, the error event it
// builds with the next sequence number.
func (g *generator) fail(errObj *errorDetail, trailing func(seq int) any) {
	r := g.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if !g.canEmitLocked() {
		return
	}
	r.finishLocked(statusFailed)
	r.errObj = errObj
	r.appendEventLocked(evFailed, lifecycleEvent{Type: evFailed, SequenceNumber: r.seqLocked(), Response: r.snapshotLocked()})
	if trailing != nil {
		r.appendEventLocked(evError, trailing(r.seqLocked()))
	}
	r.stopLocked()
	r.closeLogLocked()
	g.h.logEnd(r)
}

// errorFirst opens the stream with an error event insufficient_quota
// (sequence number 0), then response.failed carrying the error and the
// response id, and nothing else (emu_error_first; maximhq/bifrost#5040).
func (g *generator) errorFirst() {
	ok := g.emit(evError, func(r *response, seq int) any {
		code := quotaCode
		return errorEvent{Type: evError, SequenceNumber: seq, Code: &code, Message: quotaMessage}
	})
	if ok {
		g.fail(&errorDetail{Code: quotaCode, Message: quotaMessage}, nil)
	}
}

// listToolsFailed emits an mcp_list_tools item whose listing failed as
// output item index (output_item.added, mcp_list_tools.in_progress,
// mcp_list_tools.failed, output_item.done with the error), then fails the
// response with an empty error (emu_list_tools_fail;
// RageAgainstThePixel/OpenAI-DotNet#486: the item carries the reason, the
// response's error says nothing).
func (g *generator) listToolsFailed(index int, label string) {
	id := fmt.Sprintf("mcpl_%s%02x", g.r.hexID, index)
	msg := fmt.Sprintf("Error retrieving tool list from MCP server: '%s'. Http status code: 424 (Failed Dependency)", label)
	item := &mcpListToolsItem{ID: id, Type: "mcp_list_tools", ServerLabel: label, Tools: []mcpToolInfo{}}
	ok := g.emit(evItemAdded, func(r *response, seq int) any {
		r.output = append(r.output, item)
		c := *item
		return itemEvent{Type: evItemAdded, SequenceNumber: seq, OutputIndex: index, Item: &c}
	}) && g.emit(evListInProgress, func(r *response, seq int) any {
		return mcpEvent{Type: evListInProgress, SequenceNumber: seq, ItemID: id, OutputIndex: index}
	}) && g.emit(evListFailed, func(r *response, seq int) any {
		item.Error = &msg
		return mcpEvent{Type: evListFailed, SequenceNumber: seq, ItemID: id, OutputIndex: index}
	}) && g.emit(evItemDone, func(r *response, seq int) any {
		c := *item
		return itemEvent{Type: evItemDone, SequenceNumber: seq, OutputIndex: index, Item: &c}
	})
	if ok {
		g.fail(nil, nil)
	}
}

// refusalText is what the emulated model says when it refuses
// (emu_refusal), streamed a word at a time.
const refusalText = "I'm sorry, but I can't help with that request."

// refusalPieces are the deltas of refusalText.
var refusalPieces = strings.SplitAfter(refusalText, " ")

// refusalToken emits the i-th piece of the refusal as a
// response.refusal.delta event (openai-go v3.98.0
// ResponseRefusalDeltaEvent: item_id, output_index, content_index, delta).
func (g *generator) refusalToken(i int) bool {
	return g.emit(evRefusalDelta, func(r *response, seq int) any {
		piece := refusalPieces[i]
		r.text = append(r.text, piece...)
		r.tokens++
		g.h.stats.tokens.Add(1)
		return refusalDeltaEvent{Type: evRefusalDelta, SequenceNumber: seq, ItemID: r.msgID, OutputIndex: r.msgIndex, Delta: piece}
	})
}
