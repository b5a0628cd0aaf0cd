package events

import "strings"

// Function tools served over NATS: a function tool named N is served by a
// NATS service (nats.go's micro package; the tools package in Go) on
// <prefix>.tools.N, which the worker calls with the model's arguments
// instead of asking the caller. Every instance of every tool service
// listens on <prefix>.tools.cancel.* for the worker's "stop this call".

// kindTools is the token after the prefix of the tool subjects, and
// toolCancel the one after it on cancel messages.
const (
	kindTools  = "tools"
	toolCancel = "cancel"
)

// MaxToolNameLen is the longest valid function tool name.
const MaxToolNameLen = 64

// ValidToolName reports whether name is a valid function tool name of the
// Responses API, [A-Za-z0-9_-]{1,64}: a valid NATS subject token, so that
// it can end a tool's subject.
func ValidToolName(name string) bool {
	return len(name) >= 1 && len(name) <= MaxToolNameLen && validToken(name)
}

// ToolSubject is the service endpoint of function tool name:
// <prefix>.tools.<name>. A call is a request there (headers
// HeaderToolRunID, HeaderToolCallID, HeaderToolName, HeaderToolDeadline;
// body: the call's arguments). A tool named "cancel" is served on
// <prefix>.tools.cancel, one token shorter than any cancel message.
func (n Names) ToolSubject(name string) string { return n.subject(kindTools, name) }

// ToolCancelSubject is where the worker says "stop call X of run runID"
// (core NATS, header HeaderToolCallID, empty body):
// <prefix>.tools.cancel.<run_id>.
func (n Names) ToolCancelSubject(runID string) string {
	return n.subject(kindTools, toolCancel) + "." + runID
}

// ToolCancelWildcard matches every ToolCancelSubject: every instance of
// every tool service subscribes to it (not in a queue group).
func (n Names) ToolCancelWildcard() string { return n.ToolCancelSubject("*") }

// RunIDFromToolCancelSubject returns the run id of a ToolCancelSubject
// under this prefix, and false if subject is not one or the id is not a
// valid run id.
func (n Names) RunIDFromToolCancelSubject(subject string) (string, bool) {
	id, ok := strings.CutPrefix(subject, n.ToolCancelSubject(""))
	if !ok || !ValidRunID(id) {
		return "", false
	}
	return id, true
}

// Header names of tool calls (requests on ToolSubject, their replies, and
// cancel messages).
const (
	HeaderToolRunID  = "Foundryq-Run-Id"  // request: the run the call belongs to
	HeaderToolCallID = "Foundryq-Call-Id" // request and cancel message: the function_call's call_id
	HeaderToolName   = "Foundryq-Tool"    // request: the tool's name
	// HeaderToolDeadline is when the worker gives the call up (RFC 3339
	// with nanoseconds, UTC).
	HeaderToolDeadline = "Foundryq-Deadline"
	// HeaderToolStatus marks a progress reply (ToolStatusWorking). A reply
	// without it, or with ToolStatusDone, is the call's final answer.
	HeaderToolStatus = "Foundryq-Tool-Status"
	// HeaderToolInstance names, on the first progress reply, the service
	// instance (micro instance id) that took the call.
	HeaderToolInstance = "Foundryq-Tool-Instance"
)

// Values of HeaderToolStatus.
const (
	ToolStatusWorking = "working" // a progress reply: the call is running
	ToolStatusDone    = "done"    // the final answer (the same as no status)
)
