package chaos

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
)

// fakeEmulator serves records set by the test.
type fakeEmulator struct {
	recs  map[string][]foundrytest.ResponseRecord
	stats foundrytest.Stats
}

func (f *fakeEmulator) Records(id string) []foundrytest.ResponseRecord { return f.recs[id] }
func (f *fakeEmulator) Stats() foundrytest.Stats                       { return f.stats }

// The Auditor finds each kind of broken promise in what is stored, and
// nothing in runs that kept them.
func TestAuditorFindsBrokenPromises(t *testing.T) {
	t.Parallel()
	_, nc := natsembed.RunTest(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names, _ := events.NewNames("")
	if _, err := consumer.Provision(ctx, js, names, consumer.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	rec := func(id, text string) foundrytest.ResponseRecord {
		return foundrytest.ResponseRecord{ID: id, Text: text, Tokens: len(strings.Fields(text))}
	}
	emu := &fakeEmulator{recs: map[string][]foundrytest.ResponseRecord{}, stats: foundrytest.Stats{ToolCallsCompletedAfterCancel: 1}}
	a := NewAuditor(js, names, emu)
	seqs := map[string]uint64{}
	pub := func(run string, ev events.RunEvent) {
		t.Helper()
		if ev.Seq == 0 {
			seqs[run]++
			ev.Seq = seqs[run]
		}
		ev.RunID, ev.Time = run, time.Now()
		b, _ := json.Marshal(ev)
		if _, err := js.Publish(ctx, names.EventSubject(run), b); err != nil {
			t.Fatal(err)
		}
	}
	started := events.RunEvent{Type: events.TypeRunStarted, ResponseID: "resp_1", Attempt: 1, Worker: "w"}
	completed := events.RunEvent{Type: events.TypeRunCompleted, ResponseID: "resp_1", Status: "completed"}
	delta := func(s string) events.RunEvent { return events.RunEvent{Type: events.TypeTextDelta, Text: s} }

	// good: completed with the generated text.
	a.Submitted("good")
	emu.recs["good"] = []foundrytest.ResponseRecord{rec("resp_1", "A b c")}
	pub("good", started)
	pub("good", delta("A b"))
	pub("good", delta(" c"))
	pub("good", completed)
	// cancelled: a prefix, cancel acknowledged with the response cancelled.
	a.Submitted("cancelled")
	emu.recs["cancelled"] = []foundrytest.ResponseRecord{{ID: "resp_1", Text: "A b", Tokens: 2, CancelledAt: time.Now()}}
	a.CancelAcknowledged("cancelled", events.CancelReply{RunID: "cancelled", Result: events.CancelCancelling, UpstreamStatus: "cancelled"})
	emu.recs["cancelled"] = []foundrytest.ResponseRecord{{ID: "resp_1", Text: "A b c d", Tokens: 4, CancelledAt: time.Now()}}
	pub("cancelled", started)
	pub("cancelled", delta("A"))
	pub("cancelled", events.RunEvent{Type: events.TypeRunCancelled, Reason: "requested", UpstreamStatus: "cancelled"})
	// lost: a completed run missing a token.
	a.Submitted("lost")
	emu.recs["lost"] = []foundrytest.ResponseRecord{rec("resp_1", "A b c")}
	pub("lost", started)
	pub("lost", delta("A b"))
	pub("lost", completed)
	// dup: a delta stored twice under a seq of its own.
	a.Submitted("dup")
	emu.recs["dup"] = []foundrytest.ResponseRecord{rec("resp_1", "A b")}
	pub("dup", started)
	pub("dup", delta("A b"))
	pub("dup", delta(" b"))
	pub("dup", completed)
	// twice: two upstream responses.
	a.Submitted("twice")
	emu.recs["twice"] = []foundrytest.ResponseRecord{rec("resp_1", "A"), rec("resp_2", "A")}
	pub("twice", started)
	pub("twice", delta("A"))
	pub("twice", completed)
	// open: no terminal event.
	a.Submitted("open")
	emu.recs["open"] = []foundrytest.ResponseRecord{rec("resp_1", "A")}
	pub("open", started)
	// gap: seq 3 missing, and a second terminal event.
	a.Submitted("gap")
	emu.recs["gap"] = []foundrytest.ResponseRecord{rec("resp_1", "")}
	pub("gap", started)
	pub("gap", events.RunEvent{Seq: 3, Type: events.TypeRunCompleted, ResponseID: "resp_1", Status: "completed"})
	pub("gap", events.RunEvent{Seq: 4, Type: events.TypeRunFailed, Error: &events.Error{Code: "upstream_lost"}})

	wctx, wcancel := context.WithTimeout(ctx, time.Second)
	defer wcancel()
	if err := a.WaitEnded(wctx); err == nil {
		t.Fatal("WaitEnded returned nil with run open unended")
	}
	rep, err := a.Audit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s\n%s", rep.Table(), strings.Join(rep.Problems, "\n"))
	want := Report{Submitted: 7, Completed: 5, Cancelled: 1, LostTokens: 1, DuplicateTokens: 1, ExtraUpstreamResponses: 1,
		NoTerminal: 1, TokensAfterCancel: 2, ToolCallsAfterCancel: 1, Malformed: 1}
	got := rep
	got.Problems, got.Failed, got.Failures, got.CancelledBy = nil, nil, nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("report %+v\nwant   %+v", got, want)
	}
	for _, id := range []string{"cancelled", "lost", "dup", "twice", "open", "gap"} {
		found := false
		for _, p := range rep.Problems {
			found = found || strings.HasPrefix(p, id+": ")
		}
		if !found {
			t.Errorf("no problem reported for %s", id)
		}
	}
	for _, p := range rep.Problems {
		if strings.HasPrefix(p, "good: ") {
			t.Errorf("problem reported for a good run: %s", p)
		}
	}
	if rep.OK() {
		t.Error("OK with broken promises")
	}
}

// The Auditor finds cancelled runs whose response ran on unreported, runs
// whose terminal event came too long after their timeout (counted from the
// first start), and responses cancelled upstream too long after the
// deadline; outages extend the bounds.
func TestAuditorDeadlineRules(t *testing.T) {
	t.Parallel()
	_, nc := natsembed.RunTest(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names, _ := events.NewNames("")
	if _, err := consumer.Provision(ctx, js, names, consumer.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	emu := &fakeEmulator{recs: map[string][]foundrytest.ResponseRecord{}}
	a := NewAuditor(js, names, emu)
	a.SetBounds(Bounds{Terminal: 4 * time.Second, UpstreamCancel: 3 * time.Second, CancelConfirm: 20 * time.Second})
	now := time.Now()
	pub := func(run string, evs ...events.RunEvent) {
		t.Helper()
		for i, ev := range evs {
			ev.RunID, ev.Seq, ev.Time = run, uint64(i+1), time.Now()
			b, _ := json.Marshal(ev)
			if _, err := js.Publish(ctx, names.EventSubject(run), b); err != nil {
				t.Fatal(err)
			}
		}
	}
	started := events.RunEvent{Type: events.TypeRunStarted, ResponseID: "resp_1", Attempt: 1, Worker: "w"}
	cancelled := func(reason, upstream string, e *events.Error) events.RunEvent {
		return events.RunEvent{Type: events.TypeRunCancelled, Reason: reason, UpstreamStatus: upstream, Error: e, UsageUnknown: true}
	}
	unconfirmed := &events.Error{Code: events.CodeCancelUnconfirmed, Message: "503"}
	rec := func(status string, finished, cancelled time.Time) []foundrytest.ResponseRecord {
		return []foundrytest.ResponseRecord{{ID: "resp_1", Status: status, FinishedAt: finished, CancelledAt: cancelled}}
	}

	// Cancelled runs against the emulator's final status.
	for id, c := range map[string]struct {
		status, upstream string
		err              *events.Error
	}{
		"ranon-hidden":      {"completed", "cancelled", nil},   // ran on, reported cancelled: counted
		"ranon-incomplete":  {"incomplete", "cancelled", nil},  // idem
		"ranon-generating":  {"in_progress", "cancelled", nil}, // still generating: counted
		"ranon-unconfirmed": {"completed", "unconfirmed", nil}, // unconfirmed without an error: counted
		"ranon-reported":    {"completed", "completed", nil},   // ran on, reported
		"ranon-unconf-ok":   {"completed", "unconfirmed", unconfirmed},
		"stopped":           {"cancelled", "cancelled", nil},
		"stopped-wrong":     {"cancelled", "completed", nil}, // a problem, not a ran-on
		"ranon-unknown":     {"completed", "unknown", nil},   // no response id ever reached a worker: said so
	} {
		a.Submitted(id)
		emu.recs[id] = rec(c.status, now, now)
		pub(id, started, cancelled("requested", c.upstream, c.err))
	}
	// Runs with a 5s timeout: submitted long enough ago that a terminal
	// event stored now is late, unless an outage or a cancel fault covers
	// the difference.
	long := now.Add(-20 * time.Second) // due at now-11s without outages
	plan := func(at time.Time, fault time.Duration) RunPlan {
		return RunPlan{SubmittedAt: at, Timeout: 5 * time.Second, CancelFault: fault}
	}
	stoppedAt := func(at time.Time, after time.Duration) []foundrytest.ResponseRecord {
		return rec("cancelled", at.Add(5*time.Second+after), at.Add(5*time.Second+after))
	}
	a.Planned("timely", plan(now.Add(-2*time.Second), 0))
	emu.recs["timely"] = stoppedAt(now.Add(-2*time.Second), time.Second)
	pub("timely", started, cancelled("timeout", "cancelled", nil))
	a.Planned("late", plan(long, 0))
	emu.recs["late"] = stoppedAt(long, time.Second)
	pub("late", started, cancelled("timeout", "cancelled", nil))
	a.Planned("open", plan(long, 0))
	emu.recs["open"] = stoppedAt(long, time.Second)
	pub("open", started)
	a.Planned("faulted", plan(long, 15*time.Second)) // its own cancel fault: due at now+4s
	emu.recs["faulted"] = stoppedAt(long, time.Second)
	pub("faulted", started, cancelled("timeout", "cancelled", nil))
	a.Planned("late-cancel", plan(now.Add(-time.Second), 0))
	emu.recs["late-cancel"] = rec("cancelled", time.Time{}, now.Add(-time.Second+5*time.Second+4*time.Second))
	pub("late-cancel", started, cancelled("timeout", "cancelled", nil))
	a.Planned("never-cancelled", plan(now.Add(-time.Second), 0))
	emu.recs["never-cancelled"] = rec("in_progress", time.Time{}, time.Time{})
	pub("never-cancelled", started, cancelled("timeout", "unconfirmed", unconfirmed))
	// A create whose response id never reached a worker: nobody can cancel
	// it, which is outside the guarantees (counted apart, not late).
	a.Planned("lost", plan(now.Add(-time.Second), 0))
	emu.recs["lost"] = rec("in_progress", time.Time{}, time.Time{})
	pub("lost", events.RunEvent{Type: events.TypeRunFailed, Error: &events.Error{Code: events.CodeUpstreamLost, Message: "lost"}})
	kv, err := js.KeyValue(ctx, names.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	lostState, _ := json.Marshal(events.RunState{RunID: "lost", Status: events.StatusFailed, CreateStartedAt: &now, Terminal: events.TypeRunFailed})
	if _, err := kv.Put(ctx, "lost", lostState); err != nil {
		t.Fatal(err)
	}
	// Submitted 20s ago but first started 8s ago (it waited queued): its
	// deadline counts from the start, so a terminal event now is in time.
	a.Planned("queued-first", plan(long, 0))
	firstStart, deadline := now.Add(-8*time.Second), now.Add(-3*time.Second)
	emu.recs["queued-first"] = rec("cancelled", deadline.Add(time.Second), deadline.Add(time.Second))
	pub("queued-first", started, cancelled("timeout", "cancelled", nil))
	queuedState, _ := json.Marshal(events.RunState{RunID: "queued-first", Status: events.StatusCancelled, StartedAt: &firstStart,
		Deadline: &deadline, Terminal: events.TypeRunCancelled})
	if _, err := kv.Put(ctx, "queued-first", queuedState); err != nil {
		t.Fatal(err)
	}
	a.Planned("finished-first", plan(now.Add(-time.Second), 0)) // completed before its deadline: no cancel needed
	emu.recs["finished-first"] = rec("completed", now, time.Time{})
	pub("finished-first", started, events.RunEvent{Type: events.TypeRunCompleted, ResponseID: "resp_1", Status: "completed"})
	// Outages of the store and NATS (6s together) covering the 5s by
	// which the terminal event of a run submitted 14s ago is late, and
	// NATS's the 1.5s by which its cancel is.
	mid := now.Add(-14 * time.Second)
	a.Outage(OutageStoreFull, now.Add(-13*time.Second), now.Add(-10*time.Second))
	a.Outage(OutageNATS, now.Add(-11*time.Second), now.Add(-7*time.Second))
	a.Planned("outage", plan(mid, 0))
	emu.recs["outage"] = stoppedAt(mid, 4500*time.Millisecond)
	pub("outage", started, cancelled("timeout", "cancelled", nil))

	rep, err := a.Audit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s\n%s", rep.Table(), strings.Join(rep.Problems, "\n"))
	if rep.UnknownUpstream != 2 {
		t.Errorf("upstream unknown %d, want 2", rep.UnknownUpstream)
	}
	if rep.RanOnUnreported != 4 || rep.LateTerminal != 2 || rep.LateUpstreamCancel != 2 || rep.WithTimeout != 10 {
		t.Errorf("ran on unreported %d, late terminal %d, late upstream cancel %d, with a timeout %d; want 4, 2, 2, 10",
			rep.RanOnUnreported, rep.LateTerminal, rep.LateUpstreamCancel, rep.WithTimeout)
	}
	bad := map[string]bool{"ranon-hidden": true, "ranon-incomplete": true, "ranon-generating": true, "ranon-unconfirmed": true,
		"stopped-wrong": true, "late": true, "open": true, "late-cancel": true, "never-cancelled": true}
	for id := range emu.recs {
		found := false
		for _, p := range rep.Problems {
			found = found || strings.HasPrefix(p, id+": ")
		}
		if found != bad[id] {
			t.Errorf("%s: problem reported %v, want %v", id, found, bad[id])
		}
	}
	if rep.OK() {
		t.Error("OK with broken promises")
	}
}
