package events

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// CancelRequest is the optional JSON body of a request on <prefix>.cancel.<run_id>.
type CancelRequest struct {
	Reason string `json:"reason,omitempty"` // free text, at most 512 characters; recorded with the cancel
}

// HeaderCancelNotice marks a worker's notice to the run's owner after it
// recorded a cancel (the header's value is the sending worker's id), sent
// on Names.NoticeSubject, which only workers may publish. Earlier workers
// sent it on the cancel subject; a message on the cancel subject with
// this header is ignored there (a client could forge one).
const HeaderCancelNotice = "Foundryq-Cancel-Notice"

// HeaderCancelID carries a client's id of one cancel on both its stored
// record and its request (Client.Cancel sets it). A worker that finds the
// run already ended as run.cancelled by the cancel with that id, which the
// run's owner may apply from the stored record before the request is
// answered, answers cancelling rather than already_finished. Optional.
const HeaderCancelID = "Foundryq-Cancel-Id"

// CancelResult is the outcome reported in a CancelReply.
type CancelResult string

// Cancel results of the v1 contract.
const (
	CancelCancelling      CancelResult = "cancelling"       // recorded; the owner stops the response upstream, the outcome follows on the events subject
	CancelCancelled       CancelResult = "cancelled"        // the run never started and never will
	CancelAlreadyFinished CancelResult = "already_finished" // the run had ended; Terminal says how
	CancelNotFound        CancelResult = "not_found"        // no such run is queued or known
)

// CancelReply is the JSON reply to a cancel request.
type CancelReply struct {
	RunID          string       `json:"run_id"`
	Result         CancelResult `json:"result"`
	UpstreamStatus string       `json:"upstream_status,omitempty"` // what Foundry reported, when known
	Terminal       EventType    `json:"terminal,omitempty"`        // with already_finished
	Error          string       `json:"error,omitempty"`           // the answering worker could not process the cancel
	// Unrecorded is set with cancelling when the cancel reached the worker
	// and the run's owner was told, but JetStream refused to store it (its
	// store is full): the owner cancels upstream and records the cancel
	// when it can. Send the cancel again if the run does not end.
	Unrecorded bool `json:"unrecorded,omitempty"`
}

// FinishedReply is the answer to a cancel of a run whose record st says it
// has ended, given the client's id of the cancel (HeaderCancelID; "" if
// none): already_finished with the terminal event type and Foundry's last
// word; cancelled for a run cancelled before it started (the answer its
// first cancel got); cancelling, with the outcome, when this very cancel
// ended the run (its owner may apply the stored record before the request
// is answered).
func FinishedReply(st RunState, cancelID string) CancelReply {
	reply := CancelReply{RunID: st.RunID, Result: CancelAlreadyFinished, Terminal: st.Terminal, UpstreamStatus: st.UpstreamStatus}
	switch {
	case st.Terminal != TypeRunCancelled:
	case st.ResponseID == "" && st.CreateStartedAt == nil:
		reply.Result = CancelCancelled
	case cancelID != "" && st.Cancel != nil && st.Cancel.ID == cancelID:
		reply.Result = CancelCancelling
	}
	return reply
}

// DecodeCancelRequest decodes a cancel request body. An empty body is a
// cancel with no reason. Unknown fields and over-long reasons are refused
// with a *ValidationError.
func DecodeCancelRequest(data []byte) (CancelRequest, error) {
	var r CancelRequest
	if len(data) == 0 {
		return r, nil
	}
	if err := decodeStrict(data, &r, map[string]error{"reason": ErrBadCancelReason}); err != nil {
		return CancelRequest{}, err
	}
	return r, r.Validate()
}

// Validate checks the reason's length.
func (r CancelRequest) Validate() error {
	if !utf8.ValidString(r.Reason) {
		return invalid("reason", ErrBadCancelReason, "not valid UTF-8")
	}
	if utf8.RuneCountInString(r.Reason) > MaxCancelReasonLen {
		return invalid("reason", ErrBadCancelReason, "longer than %d characters", MaxCancelReasonLen)
	}
	return nil
}

// DecodeCancelReply decodes a cancel reply; the result must be one of the
// v1 results.
func DecodeCancelReply(data []byte) (CancelReply, error) {
	var r CancelReply
	if err := json.Unmarshal(data, &r); err != nil {
		return CancelReply{}, fmt.Errorf("events: decode cancel reply: %w", err)
	}
	switch r.Result {
	case CancelCancelling, CancelCancelled, CancelAlreadyFinished, CancelNotFound:
	default:
		if r.Error == "" {
			return r, fmt.Errorf("events: decode cancel reply: unknown result %q", r.Result)
		}
	}
	return r, nil
}
