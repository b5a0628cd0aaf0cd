package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/foundryq/foundryq/events"
)

// While a watched run's events are quiet (progressQuiet without one), the
// watch reads the run's state record every progressEvery and says on
// stderr what the run waits for: a worker, or the next try after a failed
// attempt. It prints a line when that changes, and an unchanged one again
// after progressRepeat; once events flow it stops reading.
const (
	progressQuiet  = 2 * time.Second
	progressEvery  = time.Second
	progressRepeat = 30 * time.Second
)

// unknownRunGrace is how long watch waits for a run's first event before it
// may say that the run does not exist (a run just submitted may not be
// visible yet).
const unknownRunGrace = 3 * time.Second

var errNoSuchRun = errors.New("no such run")

// progress reports what a watched run waits for; see progressQuiet.
type progress struct {
	c       *events.Client
	runID   string
	out     io.Writer
	started time.Time    // when the watch started
	since   time.Time    // when the run was submitted, if known; else started
	last    atomic.Int64 // unix nanos of the last event seen; 0: none yet

	shown    note      // the last note
	failures int       // the failed attempts reported so far
	printed  time.Time // when the last line was printed
}

// note is what a run's record says it waits for: key names the situation
// (a line is printed when it changes), line says it ("" for nothing worth
// a line), failures is the failed attempts it reports.
type note struct {
	key, line string
	failures  int
}

func newProgress(c *events.Client, runID string, since time.Time, out io.Writer) *progress {
	now := time.Now()
	if since.IsZero() {
		since = now
	}
	return &progress{c: c, runID: runID, out: out, started: now, since: since}
}

// sawEvent records that an event arrived: the run is not quiet.
func (p *progress) sawEvent(now time.Time) { p.last.Store(now.UnixNano()) }

// run reads the run's state while its events are quiet, until ctx ends.
// A run that after unknownRunGrace has sent no event and is neither
// recorded nor queued ends the watch: stop(errNoSuchRun).
func (p *progress) run(ctx context.Context, stop context.CancelCauseFunc) {
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		quietSince := p.started
		if last := p.last.Load(); last != 0 {
			quietSince = time.Unix(0, last)
		}
		if now.Sub(quietSince) < progressQuiet {
			continue
		}
		if p.poll(ctx, now) && p.last.Load() == 0 && now.Sub(p.started) >= unknownRunGrace {
			stop(errNoSuchRun)
			return
		}
	}
}

// poll reads the run's state and shows what it waits for; it reports
// whether the run is unknown (neither recorded nor queued). A failed read
// says nothing: the watch itself reports a NATS that stays away.
func (p *progress) poll(ctx context.Context, now time.Time) (unknown bool) {
	st, _, err := p.c.State(ctx, p.runID)
	if errors.Is(err, events.ErrStateNotFound) {
		queued, err := p.c.Exists(ctx, p.runID)
		if err == nil && queued {
			p.show(queuedNote(now.Sub(p.since)), now)
		}
		return err == nil && !queued
	}
	if err == nil {
		p.show(noteOf(st, p.failures, now), now)
	}
	return false
}

// show prints n's line if the situation changed, or if it has not for
// progressRepeat.
func (p *progress) show(n note, now time.Time) {
	changed := n.key != p.shown.key
	if n.line != "" && (changed || now.Sub(p.printed) >= progressRepeat) {
		fmt.Fprintln(p.out, n.line)
		p.printed = now
	}
	p.shown = n
	p.failures = max(p.failures, n.failures)
}

// queuedNote is the note of a run still in the queue, no worker having
// taken it, for how long it has waited.
func queuedNote(waited time.Duration) note {
	return note{key: "queued", line: "[queued: waiting for a worker (" + roundDuration(waited) + ")]"}
}

// noteOf is what a run's record says it waits for; shown is the number
// of failed attempts already reported.
func noteOf(st events.RunState, shown int, now time.Time) note {
	switch {
	case st.Finished(), st.Status == events.StatusWaiting, st.Status == events.StatusCancelling:
		// The run's events say it (the terminal event, input.required) or
		// its canceller did.
		return note{key: string(st.Status)}
	case st.Failures > shown || (st.Owner == "" && st.RetryAt != nil):
		return note{key: fmt.Sprint("failed ", st.Failures), line: "[" + failedText(st, now) + "]", failures: st.Failures}
	case st.Owner == "":
		return note{key: "released", line: "[waiting for a worker (the run was given back to the queue)]"}
	}
	return note{key: "owned " + st.Owner}
}

// failedText says which attempt failed, why, and when the next one comes:
// "attempt 2 of 10 failed: <why>; next try in 4s".
func failedText(st events.RunState, now time.Time) string {
	s := fmt.Sprintf("attempt %d", st.Failures)
	if st.MaxFailures > 0 {
		s += fmt.Sprintf(" of %d", st.MaxFailures)
	}
	s += " failed: " + orDash(st.LastError)
	switch {
	case st.Owner != "":
		return s + "; worker " + st.Owner + " tries again"
	case st.RetryAt != nil && st.RetryAt.After(now):
		return s + "; next try in " + roundDuration(max(st.RetryAt.Sub(now), time.Second))
	}
	return s + "; next try when a worker is free"
}
