package consumer

import "errors"

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
