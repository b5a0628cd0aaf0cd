package consumer

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foundryq/foundryq/events"
)

// A run's deadline is enforced by its owner (armTimers). So that it is
// enforced even while the owner is dead, frozen or cut off, every worker
// follows the state records' writes (a core subscription to the bucket's
// subjects: each put is a publish on $KV.<bucket>.<run_id>) and keeps the
// deadlines of the unfinished runs it has seen. deadlineGrace after a
// deadline, a worker that does not own the run records a timeout cancel in
// its record (compare-and-set: one worker wins, and none if the owner
// recorded its own) and, if the record names a response, calls Foundry's
// cancel. The run's terminal event follows when its job is delivered
// again: the next owner finds the cancel on record.

// deadlineGrace is how long after a run's deadline the other workers leave
// it to its owner.
const deadlineGrace = time.Second

// deadlineTick is how often a worker looks for passed deadlines.
const deadlineTick = 250 * time.Millisecond

// maxEnforcing bounds the deadlines one worker enforces at once.
const maxEnforcing = 16

// deadlines holds the deadlines of the unfinished runs a worker has seen
// written. Safe for concurrent use.
type deadlines struct {
	mu  sync.Mutex
	due map[string]time.Time
}

// seen updates the deadline of runID from a written record: nil when the
// run has none, or is finished, or is being cancelled already.
func (d *deadlines) seen(runID string, due *time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if due == nil {
		delete(d.due, runID)
		return
	}
	if d.due == nil {
		d.due = make(map[string]time.Time)
	}
	d.due[runID] = *due
}

// passed removes and returns the runs whose deadline passed more than
// deadlineGrace before now.
func (d *deadlines) passed(now time.Time) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []string
	for id, due := range d.due {
		if now.Sub(due) >= deadlineGrace {
			ids = append(ids, id)
			delete(d.due, id)
		}
	}
	return ids
}

// watchDeadlines follows the state records' writes and enforces passed
// deadlines of runs other workers own, until the returned stop is called.
func (w *Worker) watchDeadlines() (func(), error) {
	sub, err := w.nc.Subscribe("$KV."+w.names.Bucket()+".*", w.onStateWrite)
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		slots := make(chan struct{}, maxEnforcing)
		t := time.NewTicker(deadlineTick)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				for _, id := range w.deadlines.passed(now) {
					if w.owned(id) != nil {
						continue // its own timer ends it
					}
					slots <- struct{}{}
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer func() { <-slots }()
						w.enforceDeadline(id)
					}()
				}
			}
		}
	}()
	return func() {
		_ = sub.Unsubscribe()
		close(done)
		wg.Wait()
	}, nil
}

// onStateWrite keeps the deadline of the run whose record was written. The
// write may have been refused (a lost compare-and-set): enforceDeadline
// reads the record again before it acts.
func (w *Worker) onStateWrite(m *nats.Msg) {
	runID := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	if m.Header.Get("KV-Operation") != "" {
		w.deadlines.seen(runID, nil) // deleted or purged
		return
	}
	var st struct {
		Status        events.RunStatus     `json:"status"`
		Deadline      *time.Time           `json:"deadline"`
		InputDeadline *time.Time           `json:"input_deadline"`
		Cancel        *events.CancelRecord `json:"cancel"`
	}
	if err := json.Unmarshal(m.Data, &st); err != nil || st.Status.Finished() || st.Cancel != nil {
		st.Deadline, st.InputDeadline = nil, nil
	}
	due := st.Deadline
	if st.Status == events.StatusWaiting && st.InputDeadline != nil && (due == nil || st.InputDeadline.Before(*due)) {
		due = st.InputDeadline
	}
	w.deadlines.seen(runID, due)
}

// enforceDeadline records a timeout cancel for a run whose deadline has
// passed unenforced, and cancels its response upstream. Nothing is done if
// the record says the run ended, has no deadline yet passed, or is being
// cancelled already.
func (w *Worker) enforceDeadline(runID string) {
	ctx, cancel := context.WithTimeout(context.Background(), cancelCallTimeout)
	defer cancel()
	if st, exists, err := w.readState(ctx, runID); err == nil && exists && st.Status == events.StatusWaiting {
		w.endWaiting(ctx, runID, st)
		return
	}
	now := time.Now().UTC()
	rec := events.CancelRecord{Reason: events.ReasonTimeout, Note: "deadline enforced by worker " + w.cfg.WorkerID, At: now}
	won := false
	st, err := w.states.Update(ctx, runID, func(s *events.RunState) error {
		won = false
		if s.Deadline == nil || now.Before(*s.Deadline) || s.Cancel != nil || s.Finished() {
			return errSkipUpdate
		}
		won = true
		return recordCancel(s, true, rec)
	})
	if err != nil || !won {
		return
	}
	w.m.deadlinesEnforced.Inc()
	log := w.log.Warn().Str("run_id", runID).Str("owner", st.Owner).Time("deadline", *st.Deadline)
	if st.ResponseID == "" {
		log.Msg("run past its deadline unenforced; the timeout is recorded for its next owner")
		return
	}
	log.Str("response_id", st.ResponseID).Msg("run past its deadline unenforced; cancelling its response upstream")
	if !w.cancelling.start(runID) {
		return
	}
	defer w.cancelling.done(runID)
	if _, err := w.up.Cancel(ctx, st.ResponseID); err != nil {
		w.log.Warn().Err(err).Str("run_id", runID).Str("response_id", st.ResponseID).Msg("cancel the response of a run past its deadline; its next owner retries")
	}
}
