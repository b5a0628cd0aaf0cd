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
	got.Problems, got.Failed, got.Failures = nil, nil, nil
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
