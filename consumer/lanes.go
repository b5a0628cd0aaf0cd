package consumer

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/jserr"
	"github.com/foundryq/foundryq/internal/retry"
)

// Lanes (docs/scheduling.md). Producers publish each run request on
// <prefix>.runs.<run_id>, the intake. Every worker moves what the intake
// holds to the request's lane on the queue stream,
// <prefix>.queue.<priority>.<key>.<run_id>, storing the copy (deduplicated
// on Nats-Msg-Id) before it acks the original: a crash between the two
// stores the copy once. Each lane has a durable consumer of its own; a
// worker with free slots takes runs from the lanes of the highest
// (effective) priority that has runs waiting, the keys of that priority
// in smooth weighted round robin. A job taken from a lane is the run's
// lease exactly as one taken from the intake was: InProgress renews it,
// a hand-off Naks it, a crashed owner's is redelivered after the ack wait.

// headerSubmitted carries the intake message's stored time on its copy in
// the lane: the run's queue wait and its age for the starvation bound
// count from the submit, not from the move.
const headerSubmitted = "Foundryq-Submitted"

// forwardBatch is the most intake messages moved per round trip.
const forwardBatch = 256

// forwardAckTimeout bounds the wait for the queue stream to store a copy;
// past it the original is handed back and moved again (deduplicated).
const forwardAckTimeout = 10 * time.Second

// laneJob is a job taken from a lane, as the rest of the worker sees it:
// the subject is the run's intake subject (which names the run) and the
// metadata's timestamp is the submit's. Acks, Naks and InProgress go to
// the lane's consumer.
type laneJob struct {
	jetstream.Msg
	subject   string
	submitted time.Time
}

func (j laneJob) Subject() string { return j.subject }

func (j laneJob) Metadata() (*jetstream.MsgMetadata, error) {
	m, err := j.Msg.Metadata()
	if err != nil || j.submitted.IsZero() {
		return m, err
	}
	c := *m
	c.Timestamp = j.submitted
	return &c, nil
}

// submittedAt is the submit time a lane message carries, or its own
// stored time.
func submittedAt(h nats.Header, stored time.Time) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, h.Get(headerSubmitted)); err == nil {
		return t
	}
	return stored
}

// laneOf is the lane of an intake message: its fairness key and priority,
// or the default lane for a request the worker cannot read (the worker
// that takes it from there fails or hands it back as before lanes).
func (w *Worker) laneOf(m jetstream.Msg) events.Fairness {
	req, err := events.DecodeRunMsg(m.Subject(), m.Data(), w.names)
	if err != nil {
		req = events.RunRequest{}
	}
	if f, err := events.FairnessOf(req, m.Headers()); err == nil {
		return f
	}
	return events.Fairness{Key: events.DefaultFairnessKey, Priority: events.PriorityNormal}
}

// forward moves intake messages to their lanes until ctx ends.
func (w *Worker) forward(ctx context.Context) {
	for ctx.Err() == nil && !w.nc.IsClosed() {
		// No context on the fetch, as in fetch: it ends after PollWait.
		batch, err := w.res.Consumer.Fetch(forwardBatch, jetstream.FetchMaxWait(w.cfg.PollWait))
		if err != nil {
			w.fetchFailed(ctx, "fetch run requests to queue", err)
			continue
		}
		w.moveEach(batch.Messages())
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			w.fetchFailed(ctx, "fetch run requests to queue", err)
		}
	}
}

// moveEach moves the messages of a fetch as they arrive: those at hand
// together, without waiting for the batch to fill.
func (w *Worker) moveEach(ch <-chan jetstream.Msg) {
	for m := range ch {
		group := []jetstream.Msg{m}
		open := true
	more:
		for open && len(group) < forwardBatch {
			select {
			case m, ok := <-ch:
				if !ok {
					open = false
					break more
				}
				group = append(group, m)
			default:
				break more
			}
		}
		w.moveToLanes(group)
		if !open {
			return
		}
	}
}

// fetchFailed logs a failed pull and pauses a moment.
func (w *Worker) fetchFailed(ctx context.Context, what string, err error) {
	if ctx.Err() != nil || w.nc.IsClosed() {
		return
	}
	w.log.Warn().Err(err).Msg(what)
	if jserr.MissingResource(err) {
		w.resourcesMissing()
	}
	retry.Sleep(ctx, 250*time.Millisecond)
}

// moveToLanes copies each message to its lane and acks it once the copy
// is stored. A copy refused because the run's lane already holds a request
// for the run id (a duplicate submit, or a step queued again before the
// previous one was acked) is retried after RetryDelay: it is judged
// against the run's state once the first is taken, as before lanes.
func (w *Worker) moveToLanes(msgs []jetstream.Msg) {
	type move struct {
		msg  jetstream.Msg
		lane events.Fairness
		fut  jetstream.PubAckFuture
	}
	moves := make([]move, 0, len(msgs))
	for _, m := range msgs {
		runID, ok := w.names.RunIDFromSubject(m.Subject())
		if !ok || m.Subject() != w.names.RunSubject(runID) {
			// No run id to queue it by: dead-lettered at once, as before.
			w.runWG.Add(1)
			w.handle(m)
			w.runWG.Done()
			continue
		}
		meta, err := m.Metadata()
		if err != nil {
			w.log.Warn().Err(err).Str("run_id", runID).Msg("read an intake message's metadata; handed back")
			_ = m.NakWithDelay(w.cfg.RetryDelay)
			continue
		}
		lane := w.laneOf(m)
		out := nats.NewMsg(w.names.LaneSubject(lane.Priority, lane.Key, runID))
		out.Data = m.Data()
		for k, v := range m.Headers() {
			out.Header[k] = v
		}
		out.Header.Set(headerSubmitted, meta.Timestamp.UTC().Format(time.RFC3339Nano))
		// One id per intake message: a move repeated after a lost ack is
		// stored once.
		out.Header.Set(jetstream.MsgIDHeader, runID+".in."+strconv.FormatUint(meta.Sequence.Stream, 10))
		fut, err := w.js.PublishMsgAsync(out, jetstream.WithExpectStream(w.names.QueueStream()))
		if err != nil {
			w.log.Warn().Err(err).Str("run_id", runID).Msg("queue a run request in its lane; handed back")
			_ = m.NakWithDelay(250 * time.Millisecond)
			continue
		}
		moves = append(moves, move{m, lane, fut})
	}
	timeout := time.NewTimer(forwardAckTimeout)
	defer timeout.Stop()
	moved := 0
	for _, mv := range moves {
		select {
		case <-mv.fut.Ok():
			w.ensureLane(mv.lane)
			w.sched.noteMoved(mv.lane)
			if err := mv.msg.Ack(); err != nil {
				// Redelivered and moved again: the copy's id dedupes it.
				w.log.Debug().Err(err).Msg("ack a queued run request")
			}
			moved++
		case err := <-mv.fut.Err():
			if !jserr.SubjectFull(err) {
				w.log.Warn().Err(err).Str("subject", mv.fut.Msg().Subject).Msg("queue a run request in its lane; handed back")
				if jserr.MissingResource(err) {
					w.resourcesMissing()
				}
			}
			_ = mv.msg.NakWithDelay(w.cfg.RetryDelay)
		case <-timeout.C:
			timeout.Reset(0) // the rest are late too
			_ = mv.msg.NakWithDelay(0)
		}
	}
	if moved > 0 {
		w.sched.poke()
	}
}

// ensureLane makes sure the consumer of lane f exists, once in a while:
// the server removes an idle one (LaneInactive) and a worker that finds
// runs waiting in a lane without one creates it again (scan).
func (w *Worker) ensureLane(f events.Fairness) {
	name := w.names.LaneConsumer(f)
	if !w.sched.needsEnsure(name) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := w.res.Queue.CreateOrUpdateConsumer(ctx, events.LaneConsumerConfig(w.names, w.cfg.Provision, f))
	if err != nil {
		w.log.Warn().Err(err).Str("lane", name).Msg("create a lane's consumer; a later scan creates it")
		return
	}
	w.sched.known(name, c)
}

// queuedJob returns the request of a run no worker has taken, where it
// waits (the intake, or the run's lane), and that stream;
// jetstream.ErrMsgNotFound if it waits in neither.
func (w *Worker) queuedJob(ctx context.Context, runID string) (*jetstream.RawStreamMsg, jetstream.Stream, error) {
	job, err := w.res.Runs.GetLastMsgForSubject(ctx, w.names.RunSubject(runID))
	if !errors.Is(err, jetstream.ErrMsgNotFound) || w.res.Queue == nil {
		return job, w.res.Runs, err
	}
	job, err = w.res.Queue.GetLastMsgForSubject(ctx, w.names.LaneSubject("*", "*", runID))
	return job, w.res.Queue, err
}
