package events

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go/jetstream"
)

// Events returns the events of runID stored now, in order: every event of a
// run that has ended, what there is so far of one that has not. It follows
// nothing and sends no watcher heartbeat (reading a run's history never
// keeps it alive). Events that have expired are missing from the result; a
// run without stored events yields none. It needs the rights of a Watch.
func (c *Client) Events(ctx context.Context, runID string) ([]RunEvent, error) {
	if !ValidRunID(runID) {
		return nil, fmt.Errorf("events: read events of run %q: %w", runID, ErrBadRunID)
	}
	stream, err := c.js.Stream(ctx, c.names.EventsStream())
	if err != nil {
		return nil, fmt.Errorf("events: read events of run %s: open stream %s: %w", runID, c.names.EventsStream(), err)
	}
	last, err := stream.GetLastMsgForSubject(ctx, c.names.EventSubject(runID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("events: read events of run %s: read last event: %w", runID, err)
	}
	lastEv, err := DecodeRunEvent(last.Data)
	if err != nil {
		return nil, fmt.Errorf("events: read events of run %s: last event (stream seq %d): %w", runID, last.Sequence, err)
	}
	w := c.Watch(ctx, runID, WatchOptions{NoHeartbeat: true})
	defer w.Close()
	var evs []RunEvent
	for {
		ev, err := w.Next(ctx)
		switch {
		case errors.Is(err, io.EOF):
			return evs, nil
		case errors.Is(err, ErrSeqGap), errors.Is(err, ErrBadEvent):
			continue // expired, or not an event: read on
		case err != nil:
			return evs, fmt.Errorf("events: read events of run %s: %w", runID, err)
		}
		evs = append(evs, ev)
		if ev.Seq >= lastEv.Seq {
			return evs, nil
		}
	}
}
