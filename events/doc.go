// Package events is foundryq's client library and wire contract v1: the
// subjects and JetStream names, the message types with their validation,
// and a Client that submits, cancels, watches and lists runs and reads
// their state. It is what other services import; the workers (package
// consumer) create the streams and the state bucket and write everything
// but run requests and cancels.
//
// # Subjects and names
//
// Every name derives from a prefix, "foundryq" by default (see Names).
// A run id matches [A-Za-z0-9_-]{1,64} (ValidRunID, NewRunID).
//
//	foundryq.runs.<run_id>    run request (RunRequest JSON)      stream FOUNDRYQ_RUNS: work queue, file,
//	                                                              one message per subject (DiscardNewPerSubject),
//	                                                              dedupe window >= 10m on Nats-Msg-Id = run id;
//	                                                              durable pull consumer foundryq-workers
//	foundryq.events.<run_id>  run events (RunEvent JSON)         stream FOUNDRYQ_EVENTS: limits, file, MaxAge 24h,
//	                                                              AllowDirect, republished on foundryq.live.<run_id>
//	foundryq.live.<run_id>    every stored event, republished by the stream (core NATS; for followers that
//	                                                              hold no consumer, e.g. the HTTP gateway)
//	foundryq.cancel.<run_id>  cancel (CancelRequest -> CancelReply), core NATS request-reply, one worker answers
//	foundryq.watch.<run_id>   watcher heartbeats (empty body), core NATS
//	foundryq.dead.<run_id>    dead letters                        stream FOUNDRYQ_DEAD: limits, file, MaxAge 30d
//	foundryq.cancels.<run_id> durable cancel records (CancelRequest) stream FOUNDRYQ_CANCELS: one per run id
//	KV foundryq-runs, key <run_id>: RunState, written by workers only (status, digest, response id,
//	                                owner, failures, cancel record, the terminal event, timestamps)
//
// # Run requests
//
// A RunRequest carries run_id (equal to the subject token), exactly one of
// model (a deployment name) or agent {name, version?}, input (a non-empty
// string or a non-empty array of Responses input items), and optionally
// instructions, tools (objects with a string "type", passed through),
// metadata (at most 15 keys of at most 64 characters, values of at most 512,
// key "run_id" reserved because foundryq adds it), max_output_tokens (0 or
// >= 16), timeout_seconds and cancel_on_disconnect_seconds (0..86400), and
// options (raw Responses fields merged into the request; the fields in
// ReservedOptions are refused). Unknown fields are refused.
//
// DecodeRunRequest and DecodeRunMsg return a *ValidationError whose message
// names the field and the reason, e.g.
//
//	invalid run request: metadata.run_id: key "run_id" is reserved: foundryq sets it to the run id
//
// and which matches its rule's sentinel with errors.Is (ErrBadRunID,
// ErrModelOrAgent, ErrNoInput, ErrBadMetadata, ...) and ErrInvalidRequest.
//
// # Events
//
// Each event is a RunEvent with run_id, seq (1, 2, 3, ... contiguous per
// run, never repeated), type, time and per-type fields (see the EventType
// constants). Exactly one terminal event (run.completed, run.failed,
// run.cancelled) ends every run a worker took. Each message has the headers
// Nats-Msg-Id "<run_id>:<seq>", Foundryq-Type (HeaderType) and
// Foundryq-Upstream-Seq (HeaderUpstreamSeq).
//
// # Cancel
//
// A cancel is a core NATS request on the cancel subject with an optional
// body {"reason": "..."}; the reply is {run_id, result, upstream_status?,
// terminal?, unrecorded?} with result cancelling (recorded: the run's owner
// stops the response upstream, and run.cancelled with Foundry's last word
// follows on the events subject), cancelled, already_finished or
// not_found. Cancel is idempotent. Client.Cancel first stores the cancel on
// the cancels stream, which the owner of the run follows (so the cancel
// reaches it however the request is routed, and a cancel sent while no
// worker runs is applied by the next worker to take the run), then asks the
// workers; one timeout (ClientConfig.CancelTimeout) bounds the whole call,
// a request nobody answers is followed by a look at the state record and
// sent again, and a cancel on record but unconfirmed is answered
// cancelling, not an error. With JetStream's store full the request still
// carries the cancel to the owner (unrecorded).
//
// # The client
//
// Connect opens a NATS connection with a reply inbox of the user's own
// (permissions allow each user only its inbox prefix). NewClient wraps it:
// Submit (a run id runs once: the same request again returns the existing
// run, a different one a *RunIDUsedError), Cancel, Watch (every event from
// the start or from now, then live, io.EOF after the terminal event), State
// and Runs (a listing with one filter type, RunFilter). The Client creates
// nothing on NATS.
//
// # Tracing
//
// Submit and Cancel make OpenTelemetry spans ("foundryq submit", "foundryq
// cancel"; ClientConfig.TracerProvider, default the global one) and send
// their W3C trace context in the messages' headers (traceparent): the
// worker's run span continues a submitted request's trace, and every event
// it stores carries the run's traceparent.
package events
