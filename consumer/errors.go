package consumer

import "errors"

// Every sentinel error of the package, in one place.

// Errors New, Validate and Ready return.
var (
	// ErrInvalidConfig is wrapped by the error New and Validate return for
	// a bad Config (with events.ErrInvalidProvisionConfig for a bad
	// Provision).
	ErrInvalidConfig = errors.New("consumer: invalid config")
	// ErrNotReady is wrapped by every error Ready returns; the rest of the
	// message is a one-line reason.
	ErrNotReady = errors.New("not ready")
)

// Causes attached to a run's context with context.WithCancelCause. The run
// code branches on context.Cause to decide how the run ends.
var (
	// ErrCancelRequested: a cancel request arrived on the cancel subject (or
	// was recorded in the state bucket before the run was taken).
	ErrCancelRequested = errors.New("consumer: cancel requested")
	// ErrRunTimeout: the run passed its deadline (timeout_seconds or the
	// worker-wide default).
	ErrRunTimeout = errors.New("consumer: run deadline exceeded")
	// ErrAbandoned: cancel_on_disconnect_seconds passed with no watcher
	// heartbeat.
	ErrAbandoned = errors.New("consumer: run abandoned by its watchers")
	// ErrShutdown: the worker is shutting down; the run is handed off to
	// another worker, nothing is cancelled upstream.
	ErrShutdown = errors.New("consumer: worker shutting down")
	// ErrLostOwnership: another worker published on the run's event subject
	// (the fence failed): this worker must stop without acking.
	ErrLostOwnership = errors.New("consumer: lost ownership of the run")
)

// Why the worker gives up a response upstream (it is cancelled, and the run
// ends run.failed with the matching code).
var (
	// errUpstreamStalled: the response's stream sent nothing, not even a
	// keepalive, for the idle timeout, again after a re-attach, while
	// Foundry still reported it unfinished (upstream_stalled).
	errUpstreamStalled = errors.New("the response's stream went silent")
	// errUpstreamQueued: Foundry kept the response queued for longer than
	// Config.QueuedTimeout (upstream_queued).
	errUpstreamQueued = errors.New("Foundry kept the response queued")
)

// Why a run is stopped by its own worker (the causes of its context too).
var (
	// errStoreFull: JetStream refused the run's events, its store full, for
	// longer than Config.StoreFullTimeout: its response is cancelled
	// upstream (nobody can receive its output) and the run ends run.failed
	// store_full once anything can be written.
	errStoreFull = errors.New("consumer: JetStream refuses the run's events: its store is full")
	// errPublishRefused wraps a publish error that a retry cannot fix (the
	// message is too large for the server).
	errPublishRefused = errors.New("event refused by NATS")
)

// Decisions a lifecycle transition can return. Errors from NATS are never
// among them, so a caller can tell "the record says no" from "the write did
// not land".
var (
	errFinished      = errors.New("run already finished")
	errReused        = errors.New("run id already used by a different request")
	errNewerSchema   = errors.New("state record written by a newer worker")
	errNotOwner      = errors.New("another worker owns the run")
	errCreateStarted = errors.New("an upstream create was started before")
	errOtherResponse = errors.New("the run has another upstream response")
	errClaimed       = errors.New("a worker has taken the run")
	errStillWaiting  = errors.New("the run waits for answers")
	errCancelPending = errors.New("a cancel is on record")
	// errSkipUpdate, returned by the function given to stateStore.Update or
	// Upsert, leaves the stored state as it is; the call returns the
	// current state and a nil error.
	errSkipUpdate = errors.New("skip state update")
)

// errResourceMissing marks a stream, consumer or bucket that does not exist.
var errResourceMissing = errors.New("missing")
