package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// Where a run is, as a worker answers a position request (QueuePosition).
const (
	// WhereLane: the run's request waits in its lane (docs/scheduling.md);
	// Position says how many of the lane's waiting runs start before it.
	WhereLane = "lane"
	// WhereIntake: the request waits in the intake (the runs stream), not
	// moved to its lane yet (moving takes milliseconds), or the workers
	// take runs first in, first out (--fifo).
	WhereIntake = "intake"
	// WhereTaken: a worker took the run's job: it runs, or it was handed
	// back to wait (its state record's queue_reason says for what).
	WhereTaken = "taken"
	// WhereNone: no request of this run waits and no worker holds its job.
	WhereNone = "none"
)

// MaxCountedPosition is the furthest place in its lane a worker counts a
// run to (each place is a message read); a run further back is reported
// at MaxCountedPosition+1 with PositionCapped set.
const MaxCountedPosition = 1000

// QueuePosition is a worker's answer to a request on
// <prefix>.position.<run_id>: where the run waits before a worker takes it.
type QueuePosition struct {
	RunID string `json:"run_id"`
	Where string `json:"where"` // one of the Where* values
	// The lane's priority and fairness key (WhereLane, WhereTaken).
	Priority    Priority `json:"priority,omitempty"`
	FairnessKey string   `json:"fairness_key,omitempty"`
	// SubmittedAt is when the request was stored (WhereLane, WhereIntake).
	SubmittedAt *time.Time `json:"submitted_at,omitempty"`
	// Position is the run's place among the new runs waiting in its lane
	// (WhereLane): 1 is the next that lane starts. Runs of the lane taken
	// before and due again (a crashed worker's) start first, and the lanes
	// of other keys of the same priority take turns with it.
	Position int `json:"position,omitempty"`
	// PositionCapped: the run is further back than MaxCountedPosition, and
	// Position is MaxCountedPosition+1.
	PositionCapped bool `json:"position_capped,omitempty"`
	// LaneWaiting is how many new runs wait in the run's lane (WhereLane).
	LaneWaiting int `json:"lane_waiting,omitempty"`
	// HigherWaiting is how many new runs of higher priority wait, all keys
	// (WhereLane): they start first, until this run's wait raises its
	// priority (the starvation bound).
	HigherWaiting int `json:"higher_waiting,omitempty"`
}

// ErrNoWorker is returned when no worker answered a request that only a
// worker can answer (QueuePosition).
var ErrNoWorker = errors.New("no worker answered")

// QueuePosition asks the workers where run runID waits: in its lane, and
// how many runs start before it (QueuePosition). A worker answers for the
// whole fleet, from the queue's state on the server: clients may not read
// queued requests (they can carry credentials). It returns ErrNoWorker
// (wrapped) when no worker runs or none answered within CancelTimeout.
func (c *Client) QueuePosition(ctx context.Context, runID string) (QueuePosition, error) {
	if !ValidRunID(runID) {
		return QueuePosition{}, fmt.Errorf("events: queue position of run %q: %w", runID, ErrBadRunID)
	}
	msg, err := c.askWorkers(ctx, c.names.PositionSubject(runID), nil)
	if err != nil {
		return QueuePosition{}, fmt.Errorf("events: queue position of run %s: %w", runID, err)
	}
	var pos QueuePosition
	if err := json.Unmarshal(msg.Data, &pos); err != nil || pos.Where == "" {
		return QueuePosition{}, fmt.Errorf("events: queue position of run %s: malformed reply %q", runID, msg.Data)
	}
	return pos, nil
}

// askWorkers sends a request that any worker answers (the workers' queue
// group) and returns the reply, asking again when the worker it reached
// did not answer in time, within CancelTimeout. No worker at all is
// ErrNoWorker.
func (c *Client) askWorkers(ctx context.Context, subject string, data []byte) (*nats.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CancelTimeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	slice := max(time.Until(deadline)/3, 50*time.Millisecond)
	for {
		rctx, rcancel := context.WithTimeout(ctx, slice)
		msg, err := c.nc.RequestWithContext(rctx, subject, data)
		rcancel()
		switch {
		case err == nil:
			return msg, nil
		case errors.Is(err, nats.ErrNoResponders):
			return nil, fmt.Errorf("%w: no worker is running", ErrNoWorker)
		case (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)) && ctx.Err() == nil:
			continue // that worker did not answer in time: ask again
		case ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded):
			return nil, fmt.Errorf("%w within %s", ErrNoWorker, c.cfg.CancelTimeout)
		default:
			return nil, err
		}
	}
}
