package events

import (
	"encoding/json"
	"fmt"
	"time"
)

// EventType is the "type" of a RunEvent.
type EventType string

// Event types of the v1 contract.
const (
	TypeRunStarted EventType = "run.started" // response_id, attempt, worker
	TypeTextDelta  EventType = "text.delta"  // text
	// TypeRefusalDelta carries a piece of the model's refusal (text): the
	// model declined the request and says why; the run ends run.completed
	// with refusal true.
	TypeRefusalDelta  EventType = "refusal.delta"
	TypeToolStarted   EventType = "tool.started"   // tool
	TypeToolCompleted EventType = "tool.completed" // tool
	TypeToolFailed    EventType = "tool.failed"    // tool, error
	TypeRunCompleted  EventType = "run.completed"  // response_id, status, incomplete_reason?, usage (terminal)
	TypeRunFailed     EventType = "run.failed"     // error (terminal)
	TypeRunCancelled  EventType = "run.cancelled"  // reason, upstream_status, usage or usage_unknown (terminal)
	TypeInputRequired EventType = "input.required" // items: the run waits for their answers (input.go)
	TypeInputReceived EventType = "input.received" // input: one answer, as the next step starts
	TypeStepStarted   EventType = "step.started"   // response_id, step: a response after the first
)

// Terminal reports whether t ends a run (run.completed, run.failed, run.cancelled).
func (t EventType) Terminal() bool {
	return t == TypeRunCompleted || t == TypeRunFailed || t == TypeRunCancelled
}

// Known reports whether t is one of the v1 event types.
func (t EventType) Known() bool {
	switch t {
	case TypeRunStarted, TypeTextDelta, TypeRefusalDelta, TypeToolStarted, TypeToolCompleted, TypeToolFailed,
		TypeRunCompleted, TypeRunFailed, TypeRunCancelled,
		TypeInputRequired, TypeInputReceived, TypeStepStarted:
		return true
	}
	return false
}

// Cancel reasons carried by run.cancelled (and by CancelRecord).
const (
	ReasonRequested = "requested" // a cancel request
	ReasonTimeout   = "timeout"   // timeout_seconds (or the worker default) passed
	ReasonAbandoned = "abandoned" // no watcher heartbeat for cancel_on_disconnect_seconds
)

// Error codes foundryq itself puts in run.failed and tool.failed events and
// in dead letters (Foundry's own codes, such as server_error, pass through
// as Foundry sent them).
const (
	CodeInvalidRequest = "invalid_request" // the request broke a validation rule; error.message names the field
	CodeUpstreamError  = "upstream_error"  // Foundry refused the create (an HTTP 4xx), or a call failed for good
	CodeUpstreamFailed = "upstream_failed" // Foundry reported the response failed, without a code of its own
	CodeAuthError      = "auth_error"      // no token could be had for Foundry, or Foundry refused it (401/403)
	// CodeUpstreamLost: a create may have started a response whose id never
	// arrived; it is not created again. The message names metadata.run_id.
	CodeUpstreamLost = "upstream_lost"
	// CodeStreamLost: the response runs in the foreground (hosted agents
	// ignore background), its stream broke, and it cannot be re-attached.
	CodeStreamLost        = "stream_lost"
	CodeAttemptsExhausted = "attempts_exhausted" // every permitted attempt failed; the message says why the last did
	CodeStateUnreadable   = "state_unreadable"   // the run's state record could not be decoded
	CodeInternal          = "internal_error"     // the worker could not store the run's events
	// CodeInputTimeout: the run waited for its caller's answers
	// (input.required) longer than its input_timeout_seconds.
	CodeInputTimeout = "input_timeout"
	// CodeApprovalRequired and CodeFunctionCallUnsupported ended runs whose
	// response stopped at an approval request or a function call, before
	// runs could ask their caller (input.required). Workers since then no
	// longer send them; they stay defined for clients that read older runs.
	CodeApprovalRequired        = "approval_required"
	CodeFunctionCallUnsupported = "function_call_unsupported"
	CodeToolError               = "tool_error"       // tool.failed: the tool call failed without a code of its own
	CodeDuplicateRunID          = "duplicate_run_id" // dead letter only: a different request under a used run id
	// CodeUpstreamStalled: the response's stream sent nothing (not even a
	// keepalive) for the worker's idle timeout, twice (once more after a
	// re-attach), while Foundry still reported it unfinished; it was
	// cancelled upstream.
	CodeUpstreamStalled = "upstream_stalled"
	// CodeUpstreamQueued: Foundry kept the response queued for longer than
	// the worker's queued timeout; it was cancelled upstream.
	CodeUpstreamQueued = "upstream_queued"
	// CodeStoreFull: JetStream refused the run's events (its store is full)
	// for longer than the worker's store-full timeout; the response was
	// cancelled upstream so that no output nobody can receive is billed.
	// The event is stored as soon as anything can be written again.
	CodeStoreFull = "store_full"
	// CodeCancelUnconfirmed: in the error of a run.cancelled whose
	// upstream_status is "unconfirmed": Foundry never confirmed the cancel
	// within the worker's cancel bound; the message is the last upstream
	// error.
	CodeCancelUnconfirmed = "cancel_unconfirmed"
	// CodeContentFilter: Azure's content filter stopped the prompt or the
	// response (Foundry's content_filter, content_policy_violation or
	// ResponsibleAIPolicyViolation); the message says so, with the
	// categories and severities when Foundry names them.
	CodeContentFilter = "content_filter"
	// CodeMCPListToolsFailed: Foundry could not list an MCP server's tools
	// (the server failed, e.g. 424 Failed Dependency); the message is
	// Foundry's, naming the server.
	CodeMCPListToolsFailed = "mcp_list_tools_failed"
	// CodeUpstreamUnreachable: the create was never sent because the
	// Foundry endpoint's host name does not resolve (DNS: no such host);
	// not retried, nothing started upstream. Fix --foundry-endpoint.
	CodeUpstreamUnreachable = "upstream_unreachable"
	// CodeUpstreamTLS: the create was never sent because the Foundry
	// endpoint's TLS certificate could not be verified (unknown authority,
	// wrong host name, expired); not retried, nothing started upstream.
	CodeUpstreamTLS = "upstream_tls_error"
	// CodeDeploymentNotFound: Foundry refused the create with 404
	// DeploymentNotFound: the request's model names no deployment of the
	// resource; not retried.
	CodeDeploymentNotFound = "deployment_not_found"
	// CodeToolFailed: a function tool served over NATS failed (its service
	// answered an error, its output could not be used, or its service
	// stopped answering mid-call); on tool.failed and on the run.failed
	// that follows, whose message names the tool.
	CodeToolFailed = "tool_failed"
	// CodeToolTimeout: a function tool served over NATS did not answer
	// within the worker's tool timeout; the call was cancelled (tool.failed,
	// then run.failed naming the tool).
	CodeToolTimeout = "tool_timeout"
)

// Upstream statuses of run.cancelled (and of the state record) besides
// Foundry's own (cancelled, completed, incomplete, failed).
const (
	// UpstreamUnknown: a create was started but its response id never
	// arrived, so Foundry could not be asked.
	UpstreamUnknown = "unknown"
	// UpstreamUnconfirmed: the response exists, but Foundry answered no
	// cancel and no read with a final status within the worker's cancel
	// bound (a foreground response, which Foundry cannot cancel: no read
	// within 3 s of its stream being closed); error (code
	// cancel_unconfirmed) carries the last upstream error.
	UpstreamUnconfirmed = "unconfirmed"
	// UpstreamNotFound: Foundry no longer knows the response (404 past the
	// time a new response takes to become visible).
	UpstreamNotFound = "not_found"
)

// Tool describes the tool call of a tool.* event.
type Tool struct {
	Type        string `json:"type"` // "mcp": an MCP tool call run by Foundry; "function": a function tool the worker called over NATS
	Name        string `json:"name,omitempty"`
	ServerLabel string `json:"server_label,omitempty"`
	CallID      string `json:"call_id,omitempty"`
}

// Error is the error of a run.failed or tool.failed event.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Retryable, on run.failed, says whether a new run with the same request
	// may succeed (a transient failure such as rate_limit_exceeded or
	// server_error) or not (a request Foundry refuses). A run id runs once:
	// retrying means submitting a new run.
	Retryable *bool `json:"retryable,omitempty"`
	// RequestID, on run.failed, is the x-request-id (else apim-request-id)
	// of the Foundry answer that reported the failure, when there was one:
	// what Azure support asks for.
	RequestID string `json:"request_id,omitempty"`
}

// Usage is the token usage reported by Foundry.
type Usage struct {
	InputTokens     int64 `json:"input_tokens"`
	OutputTokens    int64 `json:"output_tokens"`
	TotalTokens     int64 `json:"total_tokens"`
	CachedTokens    int64 `json:"cached_tokens,omitempty"`
	ReasoningTokens int64 `json:"reasoning_tokens,omitempty"`
}

// RunEvent is the JSON body of each message on <prefix>.events.<run_id>.
// Seq is 1, 2, 3, ... contiguous per run and never repeated.
type RunEvent struct {
	RunID string    `json:"run_id"`
	Seq   uint64    `json:"seq"`
	Type  EventType `json:"type"`
	Time  time.Time `json:"time"`

	ResponseID string `json:"response_id,omitempty"` // run.started, run.completed
	Attempt    int    `json:"attempt,omitempty"`     // run.started
	Worker     string `json:"worker,omitempty"`      // run.started
	// Background is set, to false, on run.started when Foundry runs the
	// response in the foreground (hosted agents ignore background): it
	// cannot be re-attached to after a break, and a cancel closes its stream.
	Background       *bool  `json:"background,omitempty"`
	Text             string `json:"text,omitempty"`              // text.delta, refusal.delta
	Tool             *Tool  `json:"tool,omitempty"`              // tool.*
	Error            *Error `json:"error,omitempty"`             // run.failed, tool.failed; run.cancelled with upstream_status unconfirmed
	Status           string `json:"status,omitempty"`            // run.completed: completed | incomplete
	IncompleteReason string `json:"incomplete_reason,omitempty"` // run.completed with status incomplete: max_output_tokens, content_filter, ...
	Refusal          bool   `json:"refusal,omitempty"`           // run.completed: the model refused (its text came as refusal.delta)
	Usage            *Usage `json:"usage,omitempty"`             // run.completed, run.cancelled
	Reason           string `json:"reason,omitempty"`            // run.cancelled: requested | timeout | abandoned
	UpstreamStatus   string `json:"upstream_status,omitempty"`   // run.cancelled: Foundry's last word on the response (absent only if it never reached Foundry)
	UsageUnknown     bool   `json:"usage_unknown,omitempty"`     // run.cancelled without usage
	// Output, on tool.completed of a function tool served over NATS, is
	// the function's output, cut to its first 4 KiB (OutputTruncated then
	// true): enough to follow the run; Foundry gets it whole.
	Output          string `json:"output,omitempty"`
	OutputTruncated bool   `json:"output_truncated,omitempty"`

	Items []InputItem    `json:"items,omitempty"` // input.required
	Input *ReceivedInput `json:"input,omitempty"` // input.received
	Step  int            `json:"step,omitempty"`  // step.started: 2, 3, ...
}

// Header names on event messages (besides jetstream.MsgIDHeader, which
// carries "<run_id>:<seq>").
const (
	HeaderType        = "Foundryq-Type"         // the event type
	HeaderUpstreamSeq = "Foundryq-Upstream-Seq" // last upstream sequence_number covered by the event
)

// Header names on a dead letter (its body is the original run request).
const (
	HeaderDeadCode    = "Foundryq-Dead-Code"    // invalid_request, upstream_error, auth_error, deployment_not_found, upstream_unreachable, upstream_tls_error, upstream_lost, attempts_exhausted, duplicate_run_id, state_unreadable
	HeaderDeadReason  = "Foundryq-Dead-Reason"  // a human-readable message
	HeaderDeadSubject = "Foundryq-Dead-Subject" // the subject the request arrived on
	HeaderDeadWorker  = "Foundryq-Dead-Worker"  // the worker that gave up on it
	// HeaderDeadTruncated is set, to the original size in bytes, when the
	// request was too large to store whole and only its beginning is kept.
	HeaderDeadTruncated = "Foundryq-Dead-Truncated"
)

// DecodeRunEvent decodes an event body. Unknown fields are ignored (the
// contract grows additively); a missing run_id, seq or type is an error
// wrapping ErrBadEvent.
func DecodeRunEvent(data []byte) (RunEvent, error) {
	var ev RunEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return RunEvent{}, fmt.Errorf("%w: %v", ErrBadEvent, err)
	}
	if ev.RunID == "" || ev.Seq == 0 || ev.Type == "" {
		return ev, fmt.Errorf("%w: run_id, seq and type are required", ErrBadEvent)
	}
	return ev, nil
}
