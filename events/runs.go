package events

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// RunFilter selects runs for Client.Runs. The zero value selects every run
// whose state record is kept.
type RunFilter struct {
	// Status keeps runs in any of these statuses; empty keeps all.
	Status []RunStatus
	// UpdatedSince keeps runs whose record changed at or after this time;
	// zero keeps all.
	UpdatedSince time.Time
	// Limit keeps at most this many runs (the most recently updated); 0
	// keeps all.
	Limit int
}

// Validate checks the filter.
func (f RunFilter) Validate() error {
	if f.Limit < 0 {
		return fmt.Errorf("events: run filter: limit %d must not be negative", f.Limit)
	}
	for _, s := range f.Status {
		if !s.Known() {
			return fmt.Errorf("events: run filter: unknown status %q (want %s)", s, StatusList())
		}
	}
	return nil
}

// runStatuses are the statuses of the v1 contract, in lifecycle order.
var runStatuses = []RunStatus{StatusQueued, StatusRunning, StatusWaiting, StatusCancelling, StatusCompleted, StatusFailed, StatusCancelled}

// RunStatuses returns every run status of the v1 contract, in lifecycle
// order: the statuses a RunFilter accepts.
func RunStatuses() []RunStatus { return slices.Clone(runStatuses) }

// Known reports whether s is a run status of the v1 contract.
func (s RunStatus) Known() bool { return slices.Contains(runStatuses, s) }

// StatusList is the run statuses in words, for messages: "queued, running,
// cancelling, completed, failed or cancelled".
func StatusList() string {
	names := make([]string, len(runStatuses))
	for i, s := range runStatuses {
		names[i] = string(s)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Match reports whether st passes the filter's status and time conditions.
func (f RunFilter) Match(st RunState) bool {
	if len(f.Status) > 0 && !slices.Contains(f.Status, st.Status) {
		return false
	}
	return f.UpdatedSince.IsZero() || !st.UpdatedAt.Before(f.UpdatedSince)
}

// Runs lists the runs whose state records match filter, most recently
// updated first. It reads the bucket's keys from its stream's subjects, then
// each record; runs still waiting in the queue have no record yet and are
// not listed.
// The iterator yields a single error if the bucket cannot be read.
func (c *Client) Runs(ctx context.Context, filter RunFilter) iter.Seq2[RunState, error] {
	return func(yield func(RunState, error) bool) {
		if err := filter.Validate(); err != nil {
			yield(RunState{}, err)
			return
		}
		runs, err := c.listRuns(ctx, filter)
		if err != nil {
			yield(RunState{}, err)
			return
		}
		for _, st := range runs {
			if !yield(st, nil) {
				return
			}
		}
	}
}

func (c *Client) listRuns(ctx context.Context, filter RunFilter) ([]RunState, error) {
	ids, err := c.runIDs(ctx)
	if err != nil {
		return nil, err
	}
	var runs []RunState
	for _, id := range ids {
		st, _, err := c.State(ctx, id)
		if errors.Is(err, ErrStateNotFound) || errors.Is(err, ErrStateCorrupt) {
			continue // deleted or expired meanwhile, or unreadable (the workers report it)
		}
		if err != nil {
			return nil, fmt.Errorf("events: list runs: %w", err)
		}
		if filter.Match(st) {
			runs = append(runs, st)
		}
	}
	slices.SortFunc(runs, func(a, b RunState) int { return b.UpdatedAt.Compare(a.UpdatedAt) })
	if filter.Limit > 0 && len(runs) > filter.Limit {
		runs = runs[:filter.Limit]
	}
	return runs, nil
}

// runIDs lists the keys of the state bucket from its stream's subjects:
// reading them needs only stream info, which the client role may do, not a
// consumer on the bucket, which it may not create.
func (c *Client) runIDs(ctx context.Context) ([]string, error) {
	bucket := c.names.Bucket()
	stream, err := c.js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("events: list runs: open state bucket %s (has a worker provisioned it?): %w", bucket, err)
	}
	prefix := "$KV." + bucket + "."
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, fmt.Errorf("events: list runs: %w", err)
	}
	ids := make([]string, 0, len(info.State.Subjects))
	for subject := range info.State.Subjects {
		ids = append(ids, strings.TrimPrefix(subject, prefix))
	}
	return ids, nil
}
