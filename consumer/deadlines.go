package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/jserr"
	"github.com/foundryq/foundryq/internal/retry"
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
// again: the next owner finds the cancel on record. A write JetStream
// refuses for want of space does not hold the cancel up: Foundry is
// called all the same, once, and the record tried again, like any
// enforcement that does not settle the run.
//
// A record that is not written again is not heard again: a waiting run's
// record stays as it is until an answer comes, and a streaming run's owner
// may be dead already. So a worker also reads every record once when it
// starts and after each reconnect (readDeadlines: an ordered consumer on
// the bucket's stream, a batch at a time), into the same deadlines. What
// it keeps is a run id and a time per unfinished run that has a deadline.

// deadlineGrace is how long after a run's deadline the other workers leave
// it to its owner.
const deadlineGrace = time.Second

// deadlineTick is how often a worker looks for passed deadlines.
const deadlineTick = 250 * time.Millisecond

// maxEnforcing bounds the deadlines one worker enforces at once.
const maxEnforcing = 16

// readBatch is how many records readDeadlines takes at a time.
const readBatch = 256

// deadlines holds the deadlines of the unfinished runs a worker has seen
// written or read. Safe for concurrent use.
type deadlines struct {
	mu  sync.Mutex
	due map[string]deadline
	// reads counts the reads of every record under way; heard holds the
	// runs whose record was written while one was: what the read finds
	// for them may be older than what was heard.
	reads int
	heard map[string]struct{}
}

// seen updates the deadline of runID from a written record: nil when the
// run has none, or is finished, or is being cancelled already.
func (d *deadlines) seen(runID string, due *time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reads > 0 {
		d.heard[runID] = struct{}{}
	}
	d.set(runID, due)
}

// read updates the deadline of runID from a record read by readDeadlines,
// unless a write of the record was heard since the read began.
func (d *deadlines) read(runID string, due *time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.heard[runID]; ok {
		return
	}
	d.set(runID, due)
}

// beginRead and endRead bracket a read of every record.
func (d *deadlines) beginRead() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reads++; d.heard == nil {
		d.heard = make(map[string]struct{})
	}
}

func (d *deadlines) endRead() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reads--; d.reads == 0 {
		d.heard = nil
	}
}

// len is the number of deadlines held.
func (d *deadlines) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.due)
}

// deadline is a run's deadline as a worker holds it, with its enforcement
// by this worker.
type deadline struct {
	due      time.Time
	inflight bool      // an enforcement is under way
	tries    int       // enforcements that did not settle the run
	next     time.Time // when the next may start; zero before the first
	// called is the response this worker cancelled upstream while the
	// run's record could not be written: it is not called again.
	called string
}

// enforceRetry is the first wait before an enforcement that did not settle
// the run is tried again; it doubles up to maxEnforceRetry.
const (
	enforceRetry    = time.Second
	maxEnforceRetry = 10 * time.Second
)

func (d *deadlines) set(runID string, due *time.Time) {
	if due == nil {
		delete(d.due, runID)
		return
	}
	if d.due == nil {
		d.due = make(map[string]deadline)
	}
	if dl, ok := d.due[runID]; ok && dl.due.Equal(*due) {
		return // the same deadline: its enforcement goes on
	}
	d.due[runID] = deadline{due: *due}
}

// passed returns the runs whose deadline passed more than deadlineGrace
// before now and are due an enforcement (none under way, the wait after
// the last one over), and marks those under way. They stay held until
// enforced says their enforcement settled them, or a write says they are
// finished.
func (d *deadlines) passed(now time.Time) map[string]deadline {
	d.mu.Lock()
	defer d.mu.Unlock()
	var due map[string]deadline
	for id, dl := range d.due {
		if now.Sub(dl.due) >= deadlineGrace && !dl.inflight && !now.Before(dl.next) {
			if due == nil {
				due = make(map[string]deadline)
			}
			due[id] = dl
			dl.inflight = true
			d.due[id] = dl
		}
	}
	return due
}

// enforced ends an enforcement of runID's deadline due: the deadline is
// forgotten if it settled the run (the timeout is recorded, or there is
// nothing to enforce), else tried again after a wait; called is the
// response cancelled upstream meanwhile, if any. A deadline a write has
// changed since is left as the write set it.
func (d *deadlines) enforced(runID string, due time.Time, settled bool, called string, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	dl, ok := d.due[runID]
	switch {
	case !ok || !dl.due.Equal(due):
	case settled:
		delete(d.due, runID)
	default:
		dl.inflight = false
		dl.next = now.Add(min(enforceRetry<<min(dl.tries, 4), maxEnforceRetry))
		dl.tries++
		if called != "" {
			dl.called = called
		}
		d.due[runID] = dl
	}
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
				for id, dl := range w.deadlines.passed(now) {
					if w.owned(id) != nil {
						w.deadlines.enforced(id, dl.due, true, "", now) // its own timer ends it
						continue
					}
					slots <- struct{}{}
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer func() { <-slots }()
						settled, called := w.enforceDeadline(id, dl.called)
						w.deadlines.enforced(id, dl.due, settled, called, time.Now())
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
	w.deadlines.seen(runID, dueOf(m.Header, m.Data))
}

// dueOf is the deadline a worker enforces for a run whose record (its
// headers and body) is this: the earlier of its deadline and, while it
// waits, its input deadline; nil for a deleted record, a finished run, a
// run with a cancel on record or with no deadline.
func dueOf(h nats.Header, data []byte) *time.Time {
	if h.Get("KV-Operation") != "" {
		return nil // deleted or purged
	}
	var st struct {
		Status        events.RunStatus     `json:"status"`
		Deadline      *time.Time           `json:"deadline"`
		InputDeadline *time.Time           `json:"input_deadline"`
		Cancel        *events.CancelRecord `json:"cancel"`
	}
	if err := json.Unmarshal(data, &st); err != nil || st.Status.Finished() || st.Cancel != nil {
		return nil
	}
	due := st.Deadline
	if st.Status == events.StatusWaiting && st.InputDeadline != nil && (due == nil || st.InputDeadline.Before(*due)) {
		due = st.InputDeadline
	}
	return due
}

// readDeadlinesSoon reads every record into the deadlines, in the
// background (at start and after a reconnect): one read at a time, and a
// request made during a read is served by one more read after it.
func (w *Worker) readDeadlinesSoon() {
	if w.deadlineReads.Add(1) > 1 {
		return // the read under way reads again
	}
	if !w.background(w.readDeadlinesLoop) {
		w.deadlineReads.Store(0)
	}
}

// readDeadlinesLoop reads every record until a read succeeds with no
// request made meanwhile, retrying failures with backoff, until shutdown.
func (w *Worker) readDeadlinesLoop() {
	ctx, cancel := w.untilStopping()
	defer cancel()
	b := retry.Backoff(250*time.Millisecond, 30*time.Second)
	for {
		n := w.deadlineReads.Load()
		read, kept, err := w.readDeadlines(ctx)
		switch {
		case ctx.Err() != nil:
			w.deadlineReads.Store(0)
			return
		case err != nil && w.nc.IsClosed():
			w.deadlineReads.Store(0)
			return
		case err != nil:
			wait := b.NextBackOff()
			w.log.Warn().Err(err).Dur("retry_in", wait).Msg("read the run state records for their deadlines")
			if !retry.Sleep(ctx, wait) {
				w.deadlineReads.Store(0)
				return
			}
			continue
		}
		w.log.Info().Int("records", read).Int("deadlines", kept).Msg("read the run state records: the deadlines of unfinished runs are enforced")
		b.Reset()
		if w.deadlineReads.CompareAndSwap(n, 0) {
			return
		}
	}
}

// readDeadlines reads the last write of every record stored when it
// starts, readBatch at a time, into the deadlines; it returns how many
// records it read and how many deadlines the worker holds after it.
func (w *Worker) readDeadlines(ctx context.Context) (read, kept int, err error) {
	stream := "KV_" + w.names.Bucket()
	s, err := w.js.Stream(ctx, stream)
	if err != nil {
		return 0, 0, err
	}
	last := s.CachedInfo().State.LastSeq
	if s.CachedInfo().State.Msgs == 0 {
		return 0, w.deadlines.len(), nil
	}
	w.deadlines.beginRead()
	defer w.deadlines.endRead()
	c, err := w.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"$KV." + w.names.Bucket() + ".>"},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
		// Gone soon after the read: one is left behind by every read.
		InactiveThreshold: 30 * time.Second,
	})
	if err != nil {
		return 0, 0, err
	}
	for ctx.Err() == nil {
		// Take what is there, without leaving a pull request waiting
		// behind: an empty batch means every record was read.
		batch, err := c.FetchNoWait(readBatch)
		if err != nil {
			return read, 0, err
		}
		got, done := 0, false
		for m := range batch.Messages() {
			got++
			runID := m.Subject()[strings.LastIndexByte(m.Subject(), '.')+1:]
			w.deadlines.read(runID, dueOf(m.Headers(), m.Data()))
			read++
			if meta, err := m.Metadata(); err == nil && (meta.Sequence.Stream >= last || meta.NumPending == 0) {
				done = true // the records written since are heard
			}
		}
		if err := batch.Error(); err != nil {
			return read, 0, err
		}
		if done || got == 0 {
			return read, w.deadlines.len(), nil
		}
	}
	return read, 0, context.Cause(ctx)
}

// enforceDeadline records a timeout cancel for a run whose deadline has
// passed unenforced, and cancels its response upstream. Nothing is done if
// the record says the run ended, has no deadline yet passed, or is being
// cancelled already. When JetStream refuses the write for want of space,
// the response is cancelled upstream all the same (the owner, if alive,
// cannot record its own timeout either), unless this worker did already
// (called): a response must not bill on because the store is full.
//
// It reports whether the run is settled (if not: NATS unavailable, the
// store full; it is tried again after a wait), and the response cancelled
// upstream without a record of it: called, or the one it cancelled now.
func (w *Worker) enforceDeadline(runID, called string) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), cancelCallTimeout)
	defer cancel()
	st, exists, err := w.readState(ctx, runID)
	switch {
	case err != nil:
		return false, called
	case !exists:
		return true, called
	case st.Status == events.StatusWaiting:
		return w.endWaiting(ctx, runID, st), called
	}
	now := time.Now().UTC()
	rec := events.CancelRecord{Reason: events.ReasonTimeout, Note: "deadline enforced by worker " + w.cfg.WorkerID, At: now}
	won := false
	st, err = w.states.Update(ctx, runID, func(s *events.RunState) error {
		won = false
		if s.Deadline == nil || now.Before(*s.Deadline) || s.Cancel != nil || s.Finished() {
			return errSkipUpdate
		}
		won = true
		return recordCancel(s, true, rec)
	})
	switch {
	case err == nil && !won:
		return true, called
	case err == nil:
		w.m.deadlinesEnforced.Inc()
		log := w.log.Warn().Str("run_id", runID).Str("owner", st.Owner).Time("deadline", *st.Deadline)
		if st.ResponseID == "" {
			log.Msg("run past its deadline unenforced; the timeout is recorded for its next owner")
			return true, called
		}
		log.Str("response_id", st.ResponseID).Msg("run past its deadline unenforced; cancelling its response upstream")
		if st.ResponseID != called {
			w.cancelOnce(ctx, runID, st.ResponseID)
		}
		return true, called
	case won && jserr.StoreFull(err) && st.ResponseID != "" && st.ResponseID != called:
		w.log.Warn().Str("run_id", runID).Str("owner", st.Owner).Time("deadline", *st.Deadline).Str("response_id", st.ResponseID).
			Msg("run past its deadline unenforced, and JetStream's store refuses the record of its timeout; cancelling its response upstream all the same")
		if w.cancelOnce(ctx, runID, st.ResponseID) {
			called = st.ResponseID
		}
		return false, called
	}
	// The write refused (the store full, NATS unavailable): tried again.
	return errors.Is(err, events.ErrStateNotFound) || errors.Is(err, events.ErrStateCorrupt), called
}

// cancelOnce calls Foundry's cancel once on responseID, the response of
// runID, unless this worker is cancelling it already, and reports whether
// Foundry took the call.
func (w *Worker) cancelOnce(ctx context.Context, runID, responseID string) bool {
	if !w.cancelling.start(runID) {
		return false
	}
	defer w.cancelling.done(runID)
	if _, err := w.up.Cancel(ctx, responseID); err != nil {
		w.log.Warn().Err(err).Str("run_id", runID).Str("response_id", responseID).Msg("cancel the response of a run past its deadline")
		return false
	}
	return true
}
