package chaos

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/retry"
)

// Emulator is what the Auditor reads from the Foundry emulator
// (*foundrytest.Server).
type Emulator interface {
	Records(runID string) []foundrytest.ResponseRecord
	Stats() foundrytest.Stats
}

// Auditor collects what a test did (runs submitted, cancels acknowledged)
// and, once the runs have ended, checks every run against the events
// stream and the emulator. Its methods are safe for concurrent use.
type Auditor struct {
	js    jetstream.JetStream
	names events.Names
	emu   Emulator

	mu   sync.Mutex
	runs map[string]*runNotes
}

// runNotes is what the test told the Auditor about one run.
type runNotes struct {
	acks []cancelAck
}

// cancelAck is an acknowledged cancel, with the emulator's view of the
// run's responses at that moment.
type cancelAck struct {
	reply events.CancelReply
	at    []foundrytest.ResponseRecord
}

// NewAuditor returns an Auditor of the runs on js (subjects and streams
// named by names) against emu.
func NewAuditor(js jetstream.JetStream, names events.Names, emu Emulator) *Auditor {
	return &Auditor{js: js, names: names, emu: emu, runs: make(map[string]*runNotes)}
}

// Submitted records that runID was submitted: Audit checks it.
func (a *Auditor) Submitted(runID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.runs[runID] == nil {
		a.runs[runID] = &runNotes{}
	}
}

// CancelAcknowledged records a cancel reply the client received for runID.
// Call it as soon as the reply arrives: the emulator's records are read
// now, and a response the cancel had stopped must generate nothing more.
func (a *Auditor) CancelAcknowledged(runID string, reply events.CancelReply) {
	recs := a.emu.Records(runID)
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.runs[runID]
	if n == nil {
		n = &runNotes{}
		a.runs[runID] = n
	}
	n.acks = append(n.acks, cancelAck{reply: reply, at: recs})
}

// RunIDs returns the submitted run ids, sorted.
func (a *Auditor) RunIDs() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := make([]string, 0, len(a.runs))
	for id := range a.runs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// WaitEnded waits until every submitted run has a terminal event stored,
// or ctx ends (then it returns the cause; Audit still reports the runs
// without one).
func (a *Auditor) WaitEnded(ctx context.Context) error {
	for {
		stored, err := a.stored(ctx)
		if err == nil {
			open := 0
			for _, id := range a.RunIDs() {
				if !hasTerminal(stored[id]) {
					open++
				}
			}
			if open == 0 {
				return nil
			}
			err = fmt.Errorf("%d runs without a terminal event", open)
		}
		if !retry.Sleep(ctx, 250*time.Millisecond) {
			return fmt.Errorf("chaos: waiting for every run to end: %w (%w)", context.Cause(ctx), err)
		}
	}
}

func hasTerminal(evs []events.RunEvent) bool {
	for _, ev := range evs {
		if ev.Type.Terminal() {
			return true
		}
	}
	return false
}

// Audit checks every submitted run and returns the Report.
func (a *Auditor) Audit(ctx context.Context) (Report, error) {
	stored, err := a.stored(ctx)
	if err != nil {
		return Report{}, err
	}
	stats := a.emu.Stats()
	rep := Report{Failed: map[string]int{}, ToolCallsAfterCancel: int(stats.ToolCallsCompletedAfterCancel)}
	a.mu.Lock()
	notes := make(map[string]runNotes, len(a.runs))
	for id, n := range a.runs {
		notes[id] = *n
	}
	a.mu.Unlock()
	for _, id := range a.RunIDs() {
		a.auditRun(&rep, id, stored[id], a.emu.Records(id), notes[id])
	}
	sort.Strings(rep.Problems)
	sort.Strings(rep.Failures)
	return rep, nil
}

// auditRun adds one run's figures and problems to rep.
func (a *Auditor) auditRun(rep *Report, id string, evs []events.RunEvent, recs []foundrytest.ResponseRecord, notes runNotes) {
	rep.Submitted++
	problem := func(format string, args ...any) {
		rep.Problems = append(rep.Problems, id+": "+fmt.Sprintf(format, args...))
	}
	// Events: seqs 1..n, exactly one terminal event, last.
	var terminal *events.RunEvent
	terminals, malformed := 0, false
	for i := range evs {
		ev := &evs[i]
		if ev.Seq != uint64(i+1) && !malformed {
			malformed = true
			problem("stored event %d has seq %d (types %v)", i+1, ev.Seq, types(evs))
		}
		if ev.Type.Terminal() {
			terminals++
			if terminal == nil {
				terminal = ev
			}
		}
	}
	switch {
	case terminals == 0:
		rep.NoTerminal++
		problem("no terminal event after %d events", len(evs))
	case terminals > 1 || !evs[len(evs)-1].Type.Terminal():
		malformed = true
		problem("%d terminal events, last event %s", terminals, evs[len(evs)-1].Type)
	}
	if malformed {
		rep.Malformed++
	}
	if terminal != nil {
		switch terminal.Type {
		case events.TypeRunCompleted:
			rep.Completed++
		case events.TypeRunCancelled:
			rep.Cancelled++
		case events.TypeRunFailed:
			code, msg := "?", ""
			if terminal.Error != nil {
				code, msg = terminal.Error.Code, terminal.Error.Message
			}
			rep.Failed[code]++
			rep.Failures = append(rep.Failures, id+": "+code+": "+msg)
		}
	}
	// Upstream: at most one response, the one the events name.
	if len(recs) > 1 {
		rep.ExtraUpstreamResponses += len(recs) - 1
		ids := make([]string, len(recs))
		for i, r := range recs {
			ids[i] = r.ID
		}
		problem("%d upstream responses %v", len(recs), ids)
	}
	var want string
	if len(recs) > 0 {
		want = recs[0].Text
		for _, ev := range evs {
			if ev.ResponseID != "" && ev.ResponseID != recs[0].ID {
				problem("%s names response %s, the emulator's is %s", ev.Type, ev.ResponseID, recs[0].ID)
				break
			}
		}
	}
	if terminal != nil && terminal.Type == events.TypeRunCompleted && len(recs) == 0 {
		problem("completed without an upstream response")
	}
	// Text: equal to the emulator's for a completed run, a prefix of it
	// otherwise (a cancelled or failed run stops relaying).
	got := relayedText(evs)
	complete := terminal != nil && terminal.Type == events.TypeRunCompleted
	lost, dup := diffTokens(got, want, complete)
	rep.LostTokens += lost
	rep.DuplicateTokens += dup
	if lost > 0 || dup > 0 {
		problem("%d tokens lost, %d repeated: relayed %q, generated %q", lost, dup, clip(got), clip(want))
	}
	// Cancels: nothing generated after an acknowledged cancel had stopped
	// the response (the emulator counts what it generated after it
	// accepted a cancel; the records at the acknowledgement show any
	// generation after it that the emulator did not see as cancelled).
	after := 0
	for _, r := range recs {
		after = max(after, r.TokensAfterCancel)
	}
	for _, ack := range notes.acks {
		for _, then := range ack.at {
			if then.CancelledAt.IsZero() {
				continue
			}
			for _, now := range recs {
				if now.ID == then.ID && now.Tokens > then.Tokens {
					after = max(after, now.Tokens-then.Tokens)
				}
			}
		}
	}
	if after > 0 {
		rep.TokensAfterCancel += after
		problem("%d tokens generated after the cancel", after)
	}
}

// relayedText concatenates the text of every stored text.delta, repeats
// included.
func relayedText(evs []events.RunEvent) string {
	var b []byte
	for _, ev := range evs {
		if ev.Type == events.TypeTextDelta {
			b = append(b, ev.Text...)
		}
	}
	return string(b)
}

func types(evs []events.RunEvent) []events.EventType {
	out := make([]events.EventType, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

func clip(s string) string {
	if len(s) > 120 {
		return s[:60] + "…" + s[len(s)-60:]
	}
	return s
}

// stored reads every event on the events stream, by run id, in stream
// order, repeats included (a client's Watch drops repeated seqs: the
// Auditor must see them).
func (a *Auditor) stored(ctx context.Context) (map[string][]events.RunEvent, error) {
	stream, err := a.js.Stream(ctx, a.names.EventsStream())
	if err != nil {
		return nil, fmt.Errorf("chaos: events stream: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("chaos: events stream info: %w", err)
	}
	out := make(map[string][]events.RunEvent)
	if info.State.Msgs == 0 {
		return out, nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{a.names.EventsWildcard()}})
	if err != nil {
		return nil, fmt.Errorf("chaos: read events: %w", err)
	}
	last := info.State.LastSeq
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Each batch is read to its end (its goroutine ends with it), at
		// most up to the last sequence the stream had.
		batch, err := cons.FetchNoWait(500)
		if err != nil {
			return nil, fmt.Errorf("chaos: read events: %w", err)
		}
		n, done := 0, false
		var bad error
		for msg := range batch.Messages() {
			if done || bad != nil {
				continue
			}
			n++
			ev, err := events.DecodeRunEvent(msg.Data())
			if err != nil {
				bad = fmt.Errorf("chaos: event on %s: %w", msg.Subject(), err)
				continue
			}
			out[ev.RunID] = append(out[ev.RunID], ev)
			md, err := msg.Metadata()
			if err != nil {
				bad = fmt.Errorf("chaos: event metadata: %w", err)
				continue
			}
			done = md.Sequence.Stream >= last
		}
		switch err := batch.Error(); {
		case bad != nil:
			return nil, bad
		case done:
			return out, nil
		case err != nil && !errors.Is(err, jetstream.ErrNoMessages):
			return nil, fmt.Errorf("chaos: read events: %w", err)
		case n == 0 && time.Now().After(deadline):
			return nil, fmt.Errorf("chaos: read events: nothing more after 30s, below stream seq %d", last)
		case n == 0:
			time.Sleep(20 * time.Millisecond) // the consumer is being set up again (ordered consumers reset)
		}
	}
}
