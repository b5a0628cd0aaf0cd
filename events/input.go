package events

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Runs that ask. A response that stops on MCP approval requests or
// function calls pauses its run: the worker publishes input.required with
// the items, records the run waiting and lets go of it. The caller answers
// each item with a request on <prefix>.input.<run_id> (InputAnswer; the
// reply is an InputReply); once every item of the pause is answered, a
// worker starts the next step: a new response with previous_response_id
// and the answers, streamed on the same event subject.

// Input item kinds.
const (
	InputApproval     = "approval"      // an MCP tool call waiting for approval: answer with approve
	InputFunctionCall = "function_call" // a function call waiting for its output: answer with output
)

// InputItem is one thing a paused run waits for (input.required, and the
// run state's Waiting).
type InputItem struct {
	Kind string `json:"kind"` // InputApproval or InputFunctionCall
	// ID is what the answer names: the approval request's id, or the
	// function call's call_id.
	ID          string `json:"id"`
	Name        string `json:"name"`                   // the tool or function name
	ServerLabel string `json:"server_label,omitempty"` // approvals: the MCP server
	Arguments   string `json:"arguments,omitempty"`    // the call's arguments, as JSON text
}

// InputAnswer is the body of a request on <prefix>.input.<run_id>: exactly
// one of Approve (for an approval) or Output (for a function call).
type InputAnswer struct {
	ID      string  `json:"id"`
	Approve *bool   `json:"approve,omitempty"`
	Reason  string  `json:"reason,omitempty"` // with approve; sent to Foundry with a denial or an approval
	Output  *string `json:"output,omitempty"`
}

// InputReply is the worker's answer to an InputAnswer.
type InputReply struct {
	Result string `json:"result"`          // one of the Input* results
	Error  string `json:"error,omitempty"` // why, for InputInvalid (and a failure to record it)
}

// InputReply results.
const (
	InputAccepted        = "accepted"         // recorded; the run goes on once every item of the pause is answered
	InputAlreadyAnswered = "already_answered" // the item was answered before: the first answer stands
	InputUnknownID       = "unknown_id"       // the run does not wait for this id (or there is no such run)
	InputRunFinished     = "run_finished"     // the run has ended (for example it was cancelled while waiting)
	InputInvalid         = "invalid"          // the answer is malformed or too large; nothing changed
	InputStoreFull       = "store_full"       // the answers store (FOUNDRYQ_INPUTS, or the account's storage) is full; nothing changed, answer again later
)

// Limits of an answer.
const (
	MaxInputIDLen      = 128
	MaxInputOutputLen  = 256 << 10 // bytes of a function call's output
	MaxInputReasonLen  = 1024      // bytes of an approval's reason
	maxInputAnswerSize = MaxInputOutputLen + 4<<10
)

// ErrBadAnswer: an answer (InputAnswer) that is malformed or too large.
var ErrBadAnswer = errors.New("invalid answer")

// DecodeInputAnswer decodes and checks an answer: unknown fields, a
// missing or malformed id, both or neither of approve and output, and
// oversized values are errors wrapping ErrBadAnswer.
func DecodeInputAnswer(data []byte) (InputAnswer, error) {
	var a InputAnswer
	if len(data) > maxInputAnswerSize {
		return a, fmt.Errorf("%w: %d bytes, at most %d", ErrBadAnswer, len(data), maxInputAnswerSize)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return InputAnswer{}, fmt.Errorf("%w: %v", ErrBadAnswer, err)
	}
	if dec.More() {
		return InputAnswer{}, fmt.Errorf("%w: data after the JSON object", ErrBadAnswer)
	}
	return a, a.Validate()
}

// Validate checks an answer (see DecodeInputAnswer).
func (a InputAnswer) Validate() error {
	switch {
	case !ValidInputID(a.ID):
		return fmt.Errorf("%w: id must match [A-Za-z0-9][A-Za-z0-9_-]{0,%d}", ErrBadAnswer, MaxInputIDLen-1)
	case (a.Approve == nil) == (a.Output == nil):
		return fmt.Errorf("%w: give exactly one of approve (an approval) or output (a function call)", ErrBadAnswer)
	case a.Output != nil && len(*a.Output) > MaxInputOutputLen:
		return fmt.Errorf("%w: output of %d bytes, at most %d", ErrBadAnswer, len(*a.Output), MaxInputOutputLen)
	case a.Output != nil && !utf8.ValidString(*a.Output):
		return fmt.Errorf("%w: output is not valid UTF-8", ErrBadAnswer)
	case a.Output != nil && a.Reason != "":
		return fmt.Errorf("%w: reason goes with approve, not with output", ErrBadAnswer)
	case len(a.Reason) > MaxInputReasonLen:
		return fmt.Errorf("%w: reason of %d bytes, at most %d", ErrBadAnswer, len(a.Reason), MaxInputReasonLen)
	}
	return nil
}

// Kind is the item kind the answer is for.
func (a InputAnswer) Kind() string {
	if a.Approve != nil {
		return InputApproval
	}
	return InputFunctionCall
}

// ValidInputID reports whether id can name an input item: it becomes a
// subject token of the stored answer.
func ValidInputID(id string) bool {
	if len(id) == 0 || len(id) > MaxInputIDLen || !validToken(id) {
		return false
	}
	c := id[0]
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// ReceivedInput is what input.received says of one answer (never the
// output itself: it may be large, and it is the caller's data).
type ReceivedInput struct {
	ID          string `json:"id"`
	Kind        string `json:"kind"`
	Approve     *bool  `json:"approve,omitempty"`
	OutputBytes int    `json:"output_bytes,omitempty"`
}

// Step is one response of a run (the run state's Steps).
type Step struct {
	ResponseID string `json:"response_id"`
	Status     string `json:"status"`          // Foundry's final status of the response
	Usage      *Usage `json:"usage,omitempty"` // the response's usage
}

// ErrAnswerUndelivered: no worker answered the answer's request (none is
// running, or none replied in time); nothing may have been recorded.
var ErrAnswerUndelivered = errors.New("answer not delivered")

// ErrInputsFull: the worker could not store the answer, the answers
// stream (ProvisionConfig.InputsMaxMsgs / InputsMaxBytes) or the account's
// storage being full (reply InputStoreFull); nothing changed. Answer
// again once answered or ended runs have made room.
var ErrInputsFull = errors.New("the answers store is full")

// Answer gives the answer a to the item a.ID that run runID waits for, as a
// request on <prefix>.input.<run_id> that a worker answers. A request no
// worker answered in time is sent again (answers are idempotent: a repeat
// of an answer that was recorded gets InputAlreadyAnswered) within
// ClientConfig.CancelTimeout. An InputInvalid reply is an error wrapping
// ErrBadAnswer; no worker at all, ErrAnswerUndelivered.
func (c *Client) Answer(ctx context.Context, runID string, a InputAnswer) (InputReply, error) {
	if !ValidRunID(runID) {
		return InputReply{}, fmt.Errorf("events: answer run %q: %w", runID, ErrBadRunID)
	}
	if err := a.Validate(); err != nil {
		return InputReply{}, fmt.Errorf("events: answer run %s: %w", runID, err)
	}
	data, err := json.Marshal(a)
	if err != nil {
		return InputReply{}, fmt.Errorf("events: answer run %s: %w", runID, err)
	}
	msg, err := c.askWorkers(ctx, c.names.InputSubject(runID), data)
	if err != nil {
		return InputReply{}, fmt.Errorf("events: answer run %s: %w: %w", runID, ErrAnswerUndelivered, err)
	}
	var reply InputReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil || reply.Result == "" {
		return InputReply{}, fmt.Errorf("events: answer run %s: malformed reply %q", runID, msg.Data)
	}
	switch reply.Result {
	case InputInvalid:
		return reply, fmt.Errorf("events: answer run %s: %w: %s", runID, ErrBadAnswer, reply.Error)
	case InputStoreFull:
		return reply, fmt.Errorf("events: answer run %s: %w: %s", runID, ErrInputsFull, reply.Error)
	}
	return reply, nil
}

// Approve answers an approval request of run runID (approve or deny, with
// an optional reason).
func (c *Client) Approve(ctx context.Context, runID, id string, approve bool, reason string) (InputReply, error) {
	return c.Answer(ctx, runID, InputAnswer{ID: id, Approve: &approve, Reason: reason})
}

// SendOutput answers a function call of run runID with its output.
func (c *Client) SendOutput(ctx context.Context, runID, callID, output string) (InputReply, error) {
	return c.Answer(ctx, runID, InputAnswer{ID: callID, Output: &output})
}
