package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
)

// Queue positions. A client may not read queued requests (they can carry
// MCP credentials), so a worker answers where a run waits, on
// <prefix>.position.<run_id> (events.QueuePosition): it finds the run's
// request, and in a lane counts the waiting runs before it by reading the
// lane's messages between the lane consumer's last delivery and the run's
// (a message get each, up to events.MaxCountedPosition; the queue stream
// has no direct get, whose batches would count them in one call, because
// its reads must come from the stream leader).

// positionTimeout bounds the work of answering one position request.
const positionTimeout = 5 * time.Second

// serveRequests answers the requests on subject in the workers' queue
// group (each by one worker), at most maxCancelsInFlight at once, until
// the returned stop is called; handle runs on its own goroutine with a
// context that stop ends.
func (w *Worker) serveRequests(ctx context.Context, subject string, handle func(context.Context, *nats.Msg)) (func(), error) {
	cctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	slots := make(chan struct{}, maxCancelsInFlight)
	sub, err := w.nc.QueueSubscribe(subject, w.names.WorkerQueueGroup(), func(m *nats.Msg) {
		slots <- struct{}{}
		w.cancelWG.Add(1)
		go func() {
			defer w.cancelWG.Done()
			defer func() { <-slots }()
			handle(cctx, m)
		}()
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("consumer: subscribe to %s: %w", subject, err)
	}
	return func() { _ = sub.Unsubscribe(); stop() }, nil
}

// onPositionRequest answers one position request. A failure to read
// JetStream gets no reply: the client asks again, perhaps another worker.
func (w *Worker) onPositionRequest(ctx context.Context, m *nats.Msg) {
	runID, ok := w.names.RunIDFromSubject(m.Subject)
	if !ok || m.Reply == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, positionTimeout)
	defer cancel()
	pos, err := w.queuePosition(ctx, runID)
	if err != nil {
		w.log.Warn().Err(err).Str("run_id", runID).Msg("queue position not answered; the caller will ask again")
		return
	}
	data, _ := json.Marshal(pos)
	_ = m.Respond(data)
}

// queuePosition says where run runID waits (events.QueuePosition).
func (w *Worker) queuePosition(ctx context.Context, runID string) (events.QueuePosition, error) {
	pos := events.QueuePosition{RunID: runID, Where: events.WhereNone}
	job, stream, err := w.queuedJob(ctx, runID)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return pos, nil
	}
	if err != nil {
		return pos, fmt.Errorf("look for the request: %w", err)
	}
	submitted := submittedAt(job.Header, job.Time).UTC()
	if stream != w.res.Queue {
		// With lanes, a delivered intake job is being moved to its lane;
		// first in, first out, it is the run's lease.
		if w.cfg.FIFO {
			if taken, err := w.intakeTaken(ctx, job.Sequence); err != nil || taken {
				pos.Where = events.WhereTaken
				return pos, err
			}
		}
		pos.Where, pos.SubmittedAt = events.WhereIntake, &submitted
		return pos, nil
	}
	lane, _, ok := w.names.LaneOfSubject(job.Subject)
	if !ok {
		return pos, fmt.Errorf("a request on %s, outside the lanes", job.Subject)
	}
	pos.Priority, pos.FairnessKey = lane.Priority, lane.Key
	waiting, err := w.laneCounts(ctx)
	if err != nil {
		return pos, err
	}
	own, found := waiting[lane]
	if found && job.Sequence <= own.delivered {
		pos.Where = events.WhereTaken // delivered: running, or handed back to wait
		return pos, nil
	}
	pos.Where, pos.SubmittedAt = events.WhereLane, &submitted
	for f, c := range waiting {
		if f.Priority.Rank() < lane.Priority.Rank() {
			pos.HigherWaiting += c.waiting
		}
	}
	ahead, err := w.countAhead(ctx, w.names.LaneFilter(lane), own.delivered, job.Sequence)
	if err != nil {
		return pos, err
	}
	pos.Position = ahead + 1
	pos.PositionCapped = ahead >= events.MaxCountedPosition
	// A lane whose consumer the server removed is not listed: its runs
	// all wait, and the count of them is the count before this one and
	// after it, which the server does not give without reading them.
	pos.LaneWaiting = max(own.waiting, pos.Position)
	return pos, nil
}

// laneCount is what a lane's consumer says: runs waiting (never
// delivered) and the stream sequence of its last delivery.
type laneCount struct {
	waiting   int
	delivered uint64
}

// laneCounts lists the lanes' consumers (one API call, paged).
func (w *Worker) laneCounts(ctx context.Context) (map[events.Fairness]laneCount, error) {
	out := make(map[events.Fairness]laneCount)
	list := w.res.Queue.ListConsumers(ctx)
	for info := range list.Info() {
		if f, ok := w.names.LaneOfConsumer(info.Name); ok {
			out[f] = laneCount{waiting: int(info.NumPending), delivered: info.Delivered.Stream}
		}
	}
	if err := list.Err(); err != nil {
		return nil, fmt.Errorf("list the lanes: %w", err)
	}
	return out, nil
}

// countAhead counts the messages on filter after stream sequence after
// and before seq, reading them one by one (up to MaxCountedPosition).
func (w *Worker) countAhead(ctx context.Context, filter string, after, seq uint64) (int, error) {
	n := 0
	for next := after + 1; n < events.MaxCountedPosition; n++ {
		m, err := w.res.Queue.GetMsg(ctx, next, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return n, nil // the run was taken meanwhile: nothing before it
		}
		if err != nil {
			return n, fmt.Errorf("count the runs before it in its lane: %w", err)
		}
		if m.Sequence >= seq {
			return n, nil
		}
		next = m.Sequence + 1
	}
	return n, nil
}

// intakeTaken reports whether the intake's job at stream sequence seq was
// delivered to a worker.
func (w *Worker) intakeTaken(ctx context.Context, seq uint64) (bool, error) {
	info, err := w.res.Consumer.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("read the intake consumer: %w", err)
	}
	return seq <= info.Delivered.Stream, nil
}
