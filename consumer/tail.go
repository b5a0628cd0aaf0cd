package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/retry"
)

// tail reads the last event stored on a run's subject.
func (w *Worker) tail(ctx context.Context, runID string) (position, error) {
	m, err := w.res.Events.GetLastMsgForSubject(ctx, w.names.EventSubject(runID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return position{UpstreamSeq: -1}, nil
	}
	if err != nil {
		return position{}, fmt.Errorf("consumer: read last event of run %s: %w", runID, err)
	}
	ev, err := events.DecodeRunEvent(m.Data)
	if err != nil {
		return position{}, fmt.Errorf("consumer: decode last event of run %s: %w", runID, err)
	}
	pos := position{Seq: ev.Seq, StreamSeq: m.Sequence, UpstreamSeq: -1, Type: ev.Type}
	if n, ok := upstreamSeqOf(m.Header); ok {
		pos.UpstreamSeq = n
	}
	return pos, nil
}

// publishedText reads every text.delta stored for a run and returns their
// concatenation.
func (w *Worker) publishedText(ctx context.Context, runID string) (string, error) {
	end, err := w.tail(ctx, runID)
	if err != nil || end.StreamSeq == 0 {
		return "", err
	}
	c, err := w.js.OrderedConsumer(ctx, w.names.EventsStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{w.names.EventSubject(runID)},
	})
	if err != nil {
		return "", fmt.Errorf("consumer: read events of run %s: %w", runID, err)
	}
	var text strings.Builder
	for ctx.Err() == nil {
		// Every event up to end is stored: take what is there, without
		// leaving a pull request waiting behind.
		batch, err := c.FetchNoWait(256)
		if err != nil {
			return "", fmt.Errorf("consumer: read events of run %s: %w", runID, err)
		}
		got, done := 0, false
		for m := range batch.Messages() {
			got++
			if done {
				continue
			}
			if ev, err := events.DecodeRunEvent(m.Data()); err == nil && ev.Type == events.TypeTextDelta {
				text.WriteString(ev.Text)
			}
			if meta, err := m.Metadata(); err == nil && meta.Sequence.Stream >= end.StreamSeq {
				done = true
			}
		}
		if done {
			return text.String(), nil
		}
		if got == 0 {
			retry.Sleep(ctx, 10*time.Millisecond)
		}
	}
	return "", fmt.Errorf("consumer: read events of run %s: %w", runID, context.Cause(ctx))
}

// readState returns the run's record and whether it exists.
func (w *Worker) readState(ctx context.Context, runID string) (events.RunState, bool, error) {
	st, _, err := w.states.Get(ctx, runID)
	if errors.Is(err, events.ErrStateNotFound) {
		return events.RunState{RunID: runID}, false, nil
	}
	if err != nil {
		return st, false, err
	}
	return st, true, nil
}

// firstResponseID returns the response id of the first run.started event on
// the run's subject, or "".
func (w *Worker) firstResponseID(ctx context.Context, runID string) (string, error) {
	m, err := w.res.Events.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(w.names.EventSubject(runID)))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("consumer: read the first event of run %s: %w", runID, err)
	}
	ev, err := events.DecodeRunEvent(m.Data)
	if err != nil || ev.Type != events.TypeRunStarted {
		return "", nil
	}
	return ev.ResponseID, nil
}

// publishEnd stores a terminal event numbered in advance (its seq follows
// pos) on the run's subject, fenced like every event.
func (w *Worker) publishEnd(ctx context.Context, runID string, pos position, end events.RunEvent, log zerolog.Logger) error {
	rel := w.newRelay(runID, pos, 0, log)
	rel.add(end, -1)
	rel.close()
	rel.run(ctx, func(error) {})
	if err := rel.flush(ctx); err != nil {
		return fmt.Errorf("publish %s: %w", end.Type, err)
	}
	return nil
}
