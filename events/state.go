package events

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RunStatus is the lifecycle status of a run in the state bucket.
type RunStatus string

// Run statuses.
const (
	StatusQueued  RunStatus = "queued"
	StatusRunning RunStatus = "running"
	// StatusCancelling: a cancel is recorded and the run's owner is
	// stopping the response upstream (calling Foundry's cancel until
	// Foundry confirms it, the response ends, or the cancel bound passes);
	// the terminal event follows.
	StatusCancelling RunStatus = "cancelling"
	// StatusWaiting: the run's last response stopped on approval requests
	// or function calls (Waiting); no worker holds it until every item is
	// answered (or it is cancelled, or its input deadline passes).
	StatusWaiting   RunStatus = "waiting"
	StatusCompleted RunStatus = "completed"
	StatusFailed    RunStatus = "failed"
	StatusCancelled RunStatus = "cancelled"
)

// Finished reports whether s is a final status.
func (s RunStatus) Finished() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// CancelRecord is a recorded cancel request.
type CancelRecord struct {
	Reason string    `json:"reason"`         // ReasonRequested, ReasonTimeout or ReasonAbandoned
	Note   string    `json:"note,omitempty"` // the requester's text (CancelRequest.Reason), if any
	At     time.Time `json:"at"`
	// UpstreamError is the first error Foundry's cancel answered, while the
	// owner keeps retrying it (status cancelling); empty if none.
	UpstreamError string `json:"upstream_error,omitempty"`
	// ID is the client's id of the cancel (HeaderCancelID), if it sent one.
	ID string `json:"id,omitempty"`
}

// RunState is the value stored in the KV bucket (<prefix>-runs) under the
// run id: the run's lifecycle record. Only workers write it; clients read it.
type RunState struct {
	RunID string `json:"run_id"`
	// Schema is the version of the record's layout (1 since the layout
	// below; absent in records written before). A worker that finds a newer
	// schema than it knows leaves the run to a newer worker.
	Schema int       `json:"schema,omitempty"`
	Status RunStatus `json:"status"`
	// Digest identifies the request (RunRequest.Digest): a run id runs once,
	// for one request.
	Digest     string `json:"digest,omitempty"`
	ResponseID string `json:"response_id,omitempty"`
	// Owner is the worker that owns the run now; empty while the run waits
	// for a worker (queued, handed off, or retrying after a failure).
	Owner   string `json:"owner,omitempty"`
	Attempt int    `json:"attempt,omitempty"` // delivery attempt of the last owner
	// Failures counts failed attempts (upstream errors, workers that
	// vanished); hand-offs and lease renewals do not count.
	Failures  int    `json:"failures,omitempty"`
	LastError string `json:"last_error,omitempty"` // why the last failed attempt failed
	// RetryAt is when the job of a run given back after a failed attempt
	// is delivered again (absent otherwise: cleared when a worker takes the
	// run, or gives it back without a failure); MaxFailures is how many
	// failed attempts end the run, as the worker that gave it back counts
	// them. Together with Failures they let a watcher say "attempt 2 of 10
	// failed; next try in 4s".
	RetryAt     *time.Time `json:"retry_at,omitempty"`
	MaxFailures int        `json:"max_failures,omitempty"`
	// CreateStartedAt is set before the upstream create is sent; with no
	// ResponseID it means a response may exist that nobody knows the id of.
	CreateStartedAt *time.Time    `json:"create_started_at,omitempty"`
	Cancel          *CancelRecord `json:"cancel,omitempty"` // set once a cancel was requested
	Terminal        EventType     `json:"terminal,omitempty"`
	// End is the run's terminal event, exactly as it is (or is about to be)
	// stored on the events subject: the record says how the run ended, with
	// its usage, even after the events have expired.
	End *RunEvent `json:"end,omitempty"`
	// Usage is the run's final token usage (that of the terminal event),
	// kept here so that it outlives the events.
	Usage          *Usage     `json:"usage,omitempty"`
	UpstreamStatus string     `json:"upstream_status,omitempty"`
	CreatedAt      time.Time  `json:"created_at,omitzero"`
	UpdatedAt      time.Time  `json:"updated_at,omitzero"`
	StartedAt      *time.Time `json:"started_at,omitempty"`
	FinishedAt     *time.Time `json:"finished_at,omitempty"`
	// Deadline is when the run's deadline passes (timeout_seconds, or the
	// worker's default timeout, counted from StartedAt); absent if it has
	// none. Any worker cancels a run whose deadline has passed, even while
	// its owner is dead.
	Deadline *time.Time `json:"deadline,omitempty"`
	// StalledAt is set while the response's stream has sent nothing for the
	// worker's idle timeout (the owner re-reads the response and re-attaches
	// once before it ends the run upstream_stalled).
	StalledAt *time.Time `json:"stalled_at,omitempty"`

	// Step is the run's current step (its response number, 1 for the
	// first; absent in records of runs that never paused). Steps are the
	// responses of the steps before it, in order.
	Step  int    `json:"step,omitempty"`
	Steps []Step `json:"steps,omitempty"`
	// Asked are the items of the run's last pause: with status waiting,
	// what it waits for; during the next step, what that step answers.
	// WaitingSince is when it paused, InputDeadline when it ends
	// input_timeout unless every item is answered.
	Asked         []InputItem `json:"asked,omitempty"`
	WaitingSince  *time.Time  `json:"waiting_since,omitempty"`
	InputDeadline *time.Time  `json:"input_deadline,omitempty"`
	// DeadlineLeftMS, while the run waits, is what was left of a deadline
	// that came from the worker's default timeout (not timeout_seconds),
	// in milliseconds: the default does not count time spent waiting, so
	// Deadline is cleared at the pause and set again from this when the
	// next step starts.
	DeadlineLeftMS int64 `json:"deadline_left_ms,omitempty"`

	// FairnessKey and Priority are the run's effective fairness key and
	// priority (FairnessOf: from the request's body or headers, else the
	// defaults), recorded when a worker takes the run; absent in records
	// written by workers from before them, and for a request that was
	// refused as invalid.
	FairnessKey string   `json:"fairness_key,omitempty"`
	Priority    Priority `json:"priority,omitempty"`

	// QueueReason says why a run that a worker could not start yet waits
	// (status queued, or a waiting run's next step): QueueReasonCap while
	// its fairness key has as many runs running across the fleet as its
	// concurrency cap allows, QueueReasonBudget while its deployment's
	// tokens-per-minute budget is spent. Its job is handed back and taken
	// again later; the field is cleared when a worker takes the run.
	QueueReason string `json:"queue_reason,omitempty"`
}

// Reasons a run waits before a worker takes it (RunState.QueueReason).
const (
	QueueReasonCap    = "concurrency_cap"
	QueueReasonBudget = "token_budget"
)

// Finished reports whether the run has ended.
func (s RunState) Finished() bool { return s.Status.Finished() }

// StateReadTimeout bounds ReadState when its context has no deadline (as
// nats.go's jetstream bounds its API calls): a request lost with the node
// that was to answer it (a stream leader that died, in a cluster) then
// fails instead of waiting for ever, and the caller can try again.
const StateReadTimeout = 5 * time.Second

// ReadState reads the state record of runID from the state bucket named
// bucket, with its revision: an error wrapping ErrStateNotFound if there is
// none, ErrStateCorrupt (and the revision) if it is not a RunState.
//
// It asks the bucket's stream leader (a message get, not a direct get): on
// a replicated bucket any replica answers a direct get and a follower may
// not have applied the latest write, while the workers' compare-and-set
// decisions and a client that has just seen a run's terminal event must
// read the record as last written.
//
// A ctx without a deadline is bounded by StateReadTimeout: a request sent
// while the bucket's stream elects a leader may never be answered.
func ReadState(ctx context.Context, nc *nats.Conn, bucket, runID string) (RunState, uint64, error) {
	if !ValidRunID(runID) {
		return RunState{}, 0, fmt.Errorf("events: get state: run id %q: %w", runID, ErrBadRunID)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, StateReadTimeout)
		defer cancel()
	}
	req, _ := json.Marshal(struct {
		LastBySubject string `json:"last_by_subj"`
	}{"$KV." + bucket + "." + runID})
	msg, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+bucket, req)
	if err != nil {
		return RunState{}, 0, fmt.Errorf("events: get state of run %s: %w", runID, err)
	}
	var resp struct {
		Message *struct {
			Seq    uint64 `json:"seq"`
			Header []byte `json:"hdrs"`
			Data   []byte `json:"data"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return RunState{}, 0, fmt.Errorf("events: get state of run %s: %w", runID, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return RunState{}, 0, fmt.Errorf("events: get state of run %s: %w", runID, ErrStateNotFound)
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeStreamNotFound:
		return RunState{}, 0, fmt.Errorf("events: open state bucket %s (has a worker provisioned it?): %w", bucket, resp.Error)
	case resp.Error != nil:
		return RunState{}, 0, fmt.Errorf("events: get state of run %s: %w", runID, resp.Error)
	case resp.Message == nil:
		return RunState{}, 0, fmt.Errorf("events: get state of run %s: empty answer", runID)
	}
	m := resp.Message
	if len(m.Header) > 0 {
		if h, err := nats.DecodeHeadersMsg(m.Header); err == nil && h.Get("KV-Operation") != "" {
			return RunState{}, 0, fmt.Errorf("events: get state of run %s: %w", runID, ErrStateNotFound) // deleted or purged
		}
	}
	var st RunState
	if err := json.Unmarshal(m.Data, &st); err != nil {
		return RunState{}, m.Seq, fmt.Errorf("events: decode state of run %s (revision %d): %w: %v", runID, m.Seq, ErrStateCorrupt, err)
	}
	return st, m.Seq, nil
}
