package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
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
	if n, ok := events.UpstreamSeq(m.Header); ok {
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
		batch, err := c.Fetch(256, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return "", fmt.Errorf("consumer: read events of run %s: %w", runID, err)
		}
		for m := range batch.Messages() {
			var ev events.RunEvent
			if err := json.Unmarshal(m.Data(), &ev); err == nil && ev.Type == events.TypeTextDelta {
				text.WriteString(ev.Text)
			}
			if meta, err := m.Metadata(); err == nil && meta.Sequence.Stream >= end.StreamSeq {
				return text.String(), nil
			}
		}
	}
	return "", fmt.Errorf("consumer: read events of run %s: %w", runID, context.Cause(ctx))
}
