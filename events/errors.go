package events

import (
	"errors"
	"fmt"
)

// ErrInvalidRequest is matched (errors.Is) by every *ValidationError.
var ErrInvalidRequest = errors.New("invalid run request")

// Validation rule sentinels. A *ValidationError wraps exactly one of them,
// so errors.Is(err, ErrBadRunID) tells which rule failed.
var (
	ErrMalformed             = errors.New("malformed JSON")
	ErrUnknownField          = errors.New("unknown field")
	ErrBadRunID              = errors.New("bad run_id")
	ErrModelOrAgent          = errors.New("exactly one of model or agent is required")
	ErrBadModel              = errors.New("bad model")
	ErrBadAgent              = errors.New("bad agent")
	ErrNoInput               = errors.New("input is required")
	ErrBadInput              = errors.New("bad input")
	ErrBadTools              = errors.New("bad tools")
	ErrBadMetadata           = errors.New("bad metadata")
	ErrBadMaxOutputTokens    = errors.New("bad max_output_tokens")
	ErrBadTimeout            = errors.New("bad timeout_seconds")
	ErrBadCancelOnDisconnect = errors.New("bad cancel_on_disconnect_seconds")
	ErrBadOptions            = errors.New("bad options")
	ErrBadCancelReason       = errors.New("bad cancel reason")
	// ErrAgentConflict: a request for a Foundry agent also sets a field the
	// agent definition owns (instructions, tools, options.text, ...), which
	// Foundry refuses with 400 invalid_payload "Not allowed when agent is
	// specified.".
	ErrAgentConflict = errors.New("field not allowed with an agent")
	// ErrMCPApproval: an MCP tool whose require_approval is none of the
	// documented forms: "always", "never", or a filter object {"always"?,
	// "never"?: {"tool_names"?, "read_only"?}}. (Every form is accepted: a
	// call that needs approval pauses the run until its caller answers.)
	ErrMCPApproval = errors.New("bad require_approval")
	// ErrBadFairnessKey: a fairness_key (or Foundryq-Fairness-Key header)
	// that does not match [A-Za-z0-9_-]{1,64}.
	ErrBadFairnessKey = errors.New("bad fairness_key")
	// ErrBadPriority: a priority (or Foundryq-Priority header) that is not
	// "high", "normal" or "low".
	ErrBadPriority = errors.New("bad priority")
	// ErrFairnessConflict: the body and a header give different values for
	// the fairness key or the priority.
	ErrFairnessConflict = errors.New("body and header disagree")
)

// ValidationError says which field of a request is wrong and why. Err is
// the rule sentinel (ErrBadRunID, ErrNoInput, ...); errors.Is also matches
// ErrInvalidRequest.
type ValidationError struct {
	Field  string // JSON path of the field, e.g. "metadata.run_id", "tools[1].type"; "body" for the whole document
	Reason string // what is wrong, in words
	Err    error  // the rule sentinel
}

// Error returns "invalid run request: <field>: <reason>".
func (e *ValidationError) Error() string {
	return fmt.Sprintf("invalid run request: %s: %s", e.Field, e.Reason)
}

// Unwrap returns the rule sentinel.
func (e *ValidationError) Unwrap() error { return e.Err }

// Is matches ErrInvalidRequest.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidRequest }

func invalid(field string, sentinel error, format string, args ...any) *ValidationError {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...), Err: sentinel}
}

// Client errors.
var (
	// ErrAlreadyQueued: a request with this run id is waiting in the runs
	// stream; the new one was refused (nothing was stored).
	ErrAlreadyQueued = errors.New("run already queued")
	// ErrQueueFull: the runs stream holds as many requests as it may
	// (ProvisionConfig.RunsMaxMsgs / RunsMaxBytes, or the account's
	// storage); the request was refused, nothing queued was dropped. Try
	// again once workers have taken some.
	ErrQueueFull = errors.New("the run queue is full")
	// ErrRunIDUsed is matched by *RunIDUsedError: the run id belongs to a
	// run with a different request.
	ErrRunIDUsed = errors.New("run id already used by a different request")
	// ErrStateNotFound: the KV bucket holds no state for the run.
	ErrStateNotFound = errors.New("run state not found")
	// ErrStateCorrupt: the stored state of a run is not a RunState.
	ErrStateCorrupt = errors.New("run state unreadable")
	// ErrStateExists: Create found a state already stored for the run.
	ErrStateExists = errors.New("run state already exists")
	// ErrStateConflict: Update or Upsert lost the compare-and-set race too many times.
	ErrStateConflict = errors.New("run state update conflict")
	// ErrCancelFailed: the worker that answered a cancel reported an error.
	ErrCancelFailed = errors.New("cancel failed")
	// ErrBadEvent: an event message could not be decoded.
	ErrBadEvent = errors.New("bad run event")
	// ErrSeqGap: a watch saw a run event whose seq is not the next one.
	ErrSeqGap = errors.New("gap in run event sequence")
	// ErrEventsUnavailable: the run finished but its events are no longer
	// in the events stream (expired by MaxAge).
	ErrEventsUnavailable = errors.New("run finished but its events have expired")
	// ErrWatchClosed: Next was called on a closed Watch.
	ErrWatchClosed = errors.New("watch closed")
)

// RunIDUsedError reports a request submitted under a run id that already
// belongs to a run with a different request. errors.Is matches ErrRunIDUsed.
type RunIDUsedError struct {
	RunID  string
	Status RunStatus // the existing run's status
}

// Error returns "run id <id> already used by a different request (run <status>)".
func (e *RunIDUsedError) Error() string {
	return fmt.Sprintf("run id %s already used by a different request (run %s)", e.RunID, e.Status)
}

// Is matches ErrRunIDUsed.
func (e *RunIDUsedError) Is(target error) bool { return target == ErrRunIDUsed }
