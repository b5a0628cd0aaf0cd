package consumer

import (
	"errors"
	"fmt"
	"time"

	"github.com/foundryq/foundryq/events"
)

// The run lifecycle. Every change a worker makes to a run's state record is
// one of the transitions below: pure functions over the record, applied with
// compare-and-set (events.StateStore.Update/Upsert), so that two workers can
// never both believe they own a run or both end it.
//
//	             claimRun                 startCreate        knowResponse
//	(no record) ─────────► running/owner ─────────────► create started ─────────► response id
//	     │                    │  ▲ releaseRun (hand-off, retry)                      │
//	     │                    │  └───────────────────── claimRun ◄──────────────────┘
//	     │ cancelQueued       │ finishRun (state first, then the terminal event, then the ack)
//	     ▼                    ▼
//	 cancelled            completed | failed | cancelled
//
// recordCancel may happen at any point before the end. Only workers write
// the record; clients read it. docs/lifecycle.md draws every transition
// (TestLifecycleIsDrawn keeps the drawing true).

// stateSchema is the newest version of the state record this worker
// understands. A worker that finds a newer one hands the run back. Records
// of runs that never paused are written as baseSchema; a pause writes
// stateSchema (steps, waiting): a worker from before runs that ask hands
// such a run back instead of ending it approval_required.
const (
	baseSchema  = 1
	stateSchema = 2
)

// isDecision reports whether err is a transition's answer rather than a
// failure to read or write the record.
func isDecision(err error) bool {
	for _, d := range []error{errFinished, errReused, errNewerSchema, errNotOwner, errCreateStarted, errOtherResponse, errClaimed,
		errStillWaiting, errCancelPending} {
		if errors.Is(err, d) {
			return true
		}
	}
	return false
}

// owner identifies one attempt of one worker at a run.
type owner struct {
	worker  string
	attempt int
}

func (o owner) owns(s *events.RunState) bool {
	return s.Owner == o.worker && s.Attempt == o.attempt
}

// claimRun makes o the run's owner. A record that names an owner which never
// released the run (a worker that vanished, or whose lease ran out) counts
// as a failed attempt. It refuses a record from a newer worker, a run id
// used by another request (digest), and a finished run (errFinished: the
// same request again is a retry, acked without events). With timeout > 0
// the run's deadline is recorded, counted from its first start, so that any
// worker can enforce it.
func claimRun(s *events.RunState, exists bool, o owner, digest string, timeout time.Duration, now time.Time) error {
	return claimStep(s, exists, o, digest, timeout, false, now)
}

// claimStep is claimRun for a job that may continue a waiting run: with
// answered (every item of the pause has a stored answer) the run's next
// step starts; a waiting run without a cancel on record is otherwise left
// waiting (errStillWaiting: the job is stale, or early).
func claimStep(s *events.RunState, exists bool, o owner, digest string, timeout time.Duration, answered bool, now time.Time) error {
	if s.Schema > stateSchema {
		return fmt.Errorf("%w (schema %d, this worker knows %d)", errNewerSchema, s.Schema, stateSchema)
	}
	if exists && s.Digest != digest && (s.Digest != "" || s.Finished()) {
		return errReused
	}
	if s.Finished() {
		return errFinished
	}
	if s.Status == events.StatusWaiting {
		if s.Cancel == nil && !answered {
			return errStillWaiting
		}
		if s.Cancel == nil {
			s.Step++
			s.WaitingSince, s.InputDeadline = nil, nil
		}
		if s.DeadlineLeftMS > 0 {
			d := now.Add(time.Duration(s.DeadlineLeftMS) * time.Millisecond)
			s.Deadline, s.DeadlineLeftMS = &d, 0
		}
	} else if s.Owner != "" {
		s.Failures++
		s.LastError = fmt.Sprintf("worker %s stopped during attempt %d", s.Owner, s.Attempt)
	}
	s.Schema = max(s.Schema, baseSchema)
	s.Digest = digest
	s.RetryAt = nil
	s.Status = events.StatusRunning
	if s.Cancel != nil {
		s.Status = events.StatusCancelling
	}
	s.Owner, s.Attempt = o.worker, o.attempt
	if s.StartedAt == nil {
		s.StartedAt = &now
	}
	if timeout > 0 && s.Deadline == nil {
		d := s.StartedAt.Add(timeout)
		s.Deadline = &d
	}
	return nil
}

// markQueued records in a run's record that it waits for reason before a
// worker takes it. A run without a record gets one, status queued. A
// finished run, a newer worker's record and a run some worker owns are
// left alone.
func markQueued(s *events.RunState, exists bool, digest string, fair events.Fairness, reason string) error {
	switch {
	case s.Schema > stateSchema:
		return errNewerSchema
	case s.Finished():
		return errFinished
	case s.Owner != "":
		return errClaimed
	case exists && s.QueueReason == reason:
		return errSkipUpdate
	}
	if !exists {
		s.Schema = baseSchema
		s.Status = events.StatusQueued
		s.Digest = digest
	}
	s.FairnessKey, s.Priority = fair.Key, fair.Priority
	s.QueueReason = reason
	return nil
}

// pauseRun records that the run's response (its current step) stopped on
// items its caller must answer: the step is kept in Steps, the run waits
// with no owner and no response in flight. inputTimeout > 0 sets the
// pause's deadline.
//
// With defaultDeadline (the run's deadline is the worker's default, which
// does not count time spent waiting) the deadline is set aside until the
// next step starts.
func pauseRun(s *events.RunState, o owner, step events.Step, items []events.InputItem, inputTimeout time.Duration, defaultDeadline bool, now time.Time) error {
	if err := o.mayEndStep(s); err != nil {
		return err
	}
	endStep(s, step, items)
	s.Status = events.StatusWaiting
	s.WaitingSince = &now
	s.InputDeadline = nil
	if defaultDeadline && s.Deadline != nil {
		s.DeadlineLeftMS = max(s.Deadline.Sub(now).Milliseconds(), 1)
		s.Deadline = nil
	}
	if inputTimeout > 0 {
		d := now.Add(inputTimeout)
		s.InputDeadline = &d
	}
	return nil
}

// mayEndStep refuses to end the current step (pauseRun, nextStep) of a
// finished run, of a run o does not own, or of one with a cancel on
// record: the cancel ends the run instead.
func (o owner) mayEndStep(s *events.RunState) error {
	switch {
	case s.Finished():
		return errFinished
	case !o.owns(s):
		return errNotOwner
	case s.Cancel != nil:
		return errCancelPending
	}
	return nil
}

// nextStep records that the run's response (its current step) stopped on
// items that are all answered already (the worker called the function
// tools they name): the step is kept in Steps with its items in Asked, and
// the run goes on to its next step without waiting. The owner gives the
// run back (no owner, no response in flight, still running), so that the
// job's next delivery creates the next step's response, from any worker.
func nextStep(s *events.RunState, o owner, step events.Step, items []events.InputItem) error {
	if err := o.mayEndStep(s); err != nil {
		return err
	}
	endStep(s, step, items)
	s.Step++
	return nil
}

// endStep keeps the run's current step (its response ended, asking for
// items) in Steps, and lets go of the run: no owner, no response.
func endStep(s *events.RunState, step events.Step, items []events.InputItem) {
	s.Schema = stateSchema
	if s.Step == 0 {
		s.Step = 1
	}
	s.Steps = append(s.Steps, step)
	s.Owner = ""
	s.ResponseID, s.CreateStartedAt, s.StalledAt = "", nil, nil
	s.Asked = items
}

// endWaitingRun ends a waiting run from the worker by that saw its
// deadline pass (rec: the timeout cancel, for a run deadline) or its input
// deadline (no rec): no worker owns it, and its last response has ended.
func endWaitingRun(s *events.RunState, by string, rec *events.CancelRecord, end events.RunEvent, now time.Time) error {
	switch {
	case s.Finished():
		return errFinished
	case s.Status != events.StatusWaiting:
		return errClaimed
	}
	s.Owner = by
	if rec != nil && s.Cancel == nil {
		s.Cancel = rec
	}
	markEnd(s, waitingEnd(s, end), "", now)
	return nil
}

// budgetSpent reports whether a claimed run has used up its failed
// attempts: it must end now, with a terminal event.
func budgetSpent(s events.RunState, maxFailures int) bool {
	return s.Failures >= maxFailures
}

// startCreate records, before the create is sent, that a create is being
// started, marked with the time mark. A run has at most one upstream
// response, ever: a record that already has a response id or another
// create mark refuses. The owner's own mark is a write of this very
// transition that landed although its answer was lost (a stream leader
// dying with it): nothing was sent yet, and it is not written again.
func startCreate(s *events.RunState, o owner, mark time.Time) error {
	switch {
	case s.Finished():
		return errFinished
	case !o.owns(s):
		return errNotOwner
	case s.ResponseID == "" && s.CreateStartedAt != nil && s.CreateStartedAt.Equal(mark):
		return errSkipUpdate
	case s.ResponseID != "" || s.CreateStartedAt != nil:
		return errCreateStarted
	}
	s.CreateStartedAt = &mark
	return nil
}

// createRefused clears the create mark after the service answered the create
// with an HTTP error: no response exists, so a later attempt may create.
func createRefused(s *events.RunState, o owner) error {
	switch {
	case s.Finished():
		return errFinished
	case !o.owns(s):
		return errNotOwner
	case s.ResponseID != "":
		return errOtherResponse
	}
	s.CreateStartedAt = nil
	return nil
}

// knowResponse records the upstream response id. Only the owner may, and
// only if the record names no other response.
func knowResponse(s *events.RunState, o owner, id string) error {
	switch {
	case s.ResponseID == id:
		return errSkipUpdate
	case s.Finished():
		return errFinished
	case !o.owns(s):
		return errNotOwner
	case s.ResponseID != "":
		return errOtherResponse
	}
	s.ResponseID = id
	return nil
}

// recordCancel keeps a cancel on record; the first one stays. A run that
// a worker has taken is cancelling from then on, until it ends.
func recordCancel(s *events.RunState, exists bool, rec events.CancelRecord) error {
	switch {
	case !exists:
		return errClaimed // only a claimed run is cancelled through its record
	case s.Finished():
		return errFinished
	case s.Cancel != nil:
		return errSkipUpdate
	case s.Status == events.StatusWaiting:
		return errStillWaiting // no owner to apply it: a waiting run is ended by its canceller (cancelQueued)
	}
	s.Cancel = &rec
	if s.Status == events.StatusRunning {
		s.Status = events.StatusCancelling
	}
	return nil
}

// cancelFailing records the first error Foundry's cancel answered while
// the owner keeps trying, so that the record shows why the run is still
// cancelling.
func cancelFailing(s *events.RunState, o owner, upstreamErr string) error {
	switch {
	case s.Finished():
		return errFinished
	case !o.owns(s):
		return errNotOwner
	case s.Cancel == nil || s.Cancel.UpstreamError != "":
		return errSkipUpdate
	}
	s.Cancel.UpstreamError = upstreamErr
	return nil
}

// markStalled records when the response's stream went silent (at is
// non-nil) or that it speaks again (nil).
func markStalled(s *events.RunState, o owner, at *time.Time) error {
	switch {
	case s.Finished():
		return errFinished
	case !o.owns(s):
		return errNotOwner
	case (s.StalledAt == nil) == (at == nil):
		return errSkipUpdate
	}
	s.StalledAt = at
	return nil
}

// releaseRun gives the run back to the queue: at shutdown or for rate
// limits (failure "") or after a failed attempt that will be retried
// (failure says why). A failed attempt records when its job is delivered
// again (retryAt; zero: at once) and how many failed attempts end the run,
// so that a watcher can say when the next try comes.
func releaseRun(s *events.RunState, o owner, failure string, retryAt time.Time, maxFailures int) error {
	switch {
	case s.Finished():
		return errFinished
	case !o.owns(s):
		return errNotOwner
	}
	s.Owner = ""
	s.RetryAt = nil
	if failure != "" {
		s.Failures++
		s.LastError = failure
		s.MaxFailures = maxFailures
		if !retryAt.IsZero() {
			s.RetryAt = &retryAt
		}
	}
	return nil
}

// finishRun records the run's end: the terminal event exactly as it will be
// stored on the events subject. It is written before the event is
// published, so that the record never says "running" for a run whose
// terminal event a user can already see; if the publish is lost, the next
// worker to see the job publishes end from the record. Writing the same end
// twice is a no-op.
func finishRun(s *events.RunState, o owner, end events.RunEvent, upstreamStatus string, now time.Time) error {
	if s.Finished() {
		if s.End != nil && s.End.Seq == end.Seq && s.End.Type == end.Type && s.Owner == o.worker {
			return errSkipUpdate
		}
		return errFinished
	}
	if !o.owns(s) {
		return errNotOwner
	}
	markEnd(s, end, upstreamStatus, now)
	return nil
}

// cancelQueued ends a run that no worker has taken, at a cancel request: it
// will never reach Foundry. It refuses a run a worker has taken meanwhile
// (errClaimed: cancel it through its record instead).
func cancelQueued(s *events.RunState, exists bool, by, digest string, rec events.CancelRecord, end events.RunEvent, now time.Time) error {
	switch {
	case s.Schema > stateSchema:
		return errNewerSchema
	case s.Finished():
		return errFinished
	case exists && s.Status != events.StatusQueued && s.Status != events.StatusWaiting:
		return errClaimed
	}
	s.Schema = max(s.Schema, baseSchema)
	if s.Digest == "" {
		s.Digest = digest
	}
	s.Owner = by
	if s.Cancel == nil {
		s.Cancel = &rec
	}
	markEnd(s, end, "", now)
	return nil
}

// failCorrupt replaces an unreadable record with one that says how the run
// ended.
func failCorrupt(runID string, o owner, end events.RunEvent, now time.Time) events.RunState {
	s := events.RunState{RunID: runID, Schema: baseSchema, Owner: o.worker, Attempt: o.attempt}
	markEnd(&s, end, "", now)
	return s
}

// renumberEnd moves a recorded end whose seq from was taken by an event a
// zombie owner stored after the end was recorded (the terminal event could
// not be published) to seq to, behind the stored events.
func renumberEnd(s *events.RunState, from, to uint64) error {
	switch {
	case s.End == nil || !s.Finished():
		return errSkipUpdate
	case s.End.Seq == to:
		return errSkipUpdate // done already
	case s.End.Seq != from:
		return errFinished
	}
	end := *s.End
	end.Seq = to
	s.End = &end
	return nil
}

// auditedUpstream records what Foundry reported about a response after the
// run ended (a cancelled response that completed after all).
func auditedUpstream(s *events.RunState, status string) error {
	if s.UpstreamStatus == status {
		return errSkipUpdate
	}
	s.UpstreamStatus = status
	return nil
}

func markEnd(s *events.RunState, end events.RunEvent, upstreamStatus string, now time.Time) {
	s.Status = statusOf(end.Type)
	s.Terminal = end.Type
	s.End = &end
	if end.Usage != nil {
		u := *end.Usage
		s.Usage = &u
	}
	if upstreamStatus != "" {
		s.UpstreamStatus = upstreamStatus
	}
	s.FinishedAt = &now
	s.StalledAt = nil
}

func statusOf(t events.EventType) events.RunStatus {
	switch t {
	case events.TypeRunCompleted:
		return events.StatusCompleted
	case events.TypeRunCancelled:
		return events.StatusCancelled
	default:
		return events.StatusFailed
	}
}

// cancelAction is what the worker answering a cancel request does.
type cancelAction int

const (
	cancelReportFinished cancelAction = iota // already_finished
	cancelThroughRecord                      // record it; the owner (or the next one) acts
	cancelBeforeStart                        // no worker has taken it: end it here, or not_found
	cancelRefuse                             // a newer worker's record: leave it alone
)

// decideCancel picks the answering worker's action from the run's record.
func decideCancel(s events.RunState, exists bool) cancelAction {
	switch {
	case exists && s.Schema > stateSchema:
		return cancelRefuse
	case exists && s.Finished():
		return cancelReportFinished
	case exists && s.Status != events.StatusQueued && s.Status != events.StatusWaiting:
		return cancelThroughRecord
	default:
		return cancelBeforeStart
	}
}
