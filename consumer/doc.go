// Package consumer is the foundryq worker: it pulls run requests from the
// FOUNDRYQ_RUNS work queue, starts each run on Foundry's Responses API in
// background + streaming mode, relays every upstream event to the run's
// subject on FOUNDRYQ_EVENTS, and answers cancel requests.
//
// The properties it keeps (docs/guarantees.md says what they promise and
// what is outside them):
//
//   - A worker never pulls more jobs than it can start (Config.Concurrency),
//     and keeps each job's lease alive with InProgress while the run lives.
//   - Each run's events carry contiguous seq numbers. Exactly one publish is
//     in flight per run; text deltas that arrive meanwhile merge into the
//     next event. Every publish is fenced with the subject's expected last
//     sequence, so a zombie owner can never interleave with a new one.
//   - Every run that a worker took ends with exactly one terminal event, and
//     the job is acked only after that event is stored.
//   - Every end of a run whose job the worker holds is one ending handed to
//     run.end (run.go), and run.settle is the only code that acks, naks or
//     terms a job. Two ends hold no job and go through endJobless
//     (endings.go) instead, which records the end, then publishes it: a
//     run no worker has taken, cancelled (its job waits unfetched in the
//     queue and is deleted), and a waiting run past a deadline (its job was
//     acked when it paused). A worker that takes a job of a run whose record
//     holds an end or a pause its events lack (the previous owner stopped
//     between the two writes) publishes it from the record (ending.repair)
//     before it acks the job. settle_source_test.go keeps these lists true.
//   - A cancel (from the cancel subject, a deadline or abandoned watchers)
//     calls Foundry's server-side cancel, confirms the upstream status and
//     ends the run as run.cancelled with usage (or usage_unknown).
//   - A job delivered again after a crash re-attaches to the same Foundry
//     response with starting_after, or polls it to its end when it can no
//     longer be streamed; no token is lost or repeated.
//   - At shutdown in-flight runs are handed off (flushed, Nak'ed) and nothing
//     is cancelled upstream.
//   - A function call whose tool is served over NATS is sent to it by the
//     run's owner (tools.go); its output is stored as the call's answer
//     before the run goes on, so that no owner calls a tool that answered
//     and no answer is lost. A cancel of the run cancels its calls in flight.
//
// Worker.Ready says whether a worker can take and run jobs (NATS connected,
// streams, consumer and bucket present, pull loop alive); foundryq worker
// serves it as /readyz.
//
// Observability: each run has a logger with run_id, worker, attempt and,
// once known, response_id, and a "foundryq run" span that continues the
// W3C trace context of the run request's headers; Foundry calls are
// "foundry <op>" client spans and every stored event carries the run's
// traceparent (Config.TracerProvider). Metrics, all in metrics.go, go to
// Config.Registerer.
package consumer
