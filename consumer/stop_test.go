package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

// Stop means stop: the faults a stop itself may meet (Foundry's cancel
// failing or hanging, a cancel routed to a worker cut off from NATS, a full
// store, a dead owner at a deadline, a stalled upstream).

// cutter dials NATS connections that a test can cut off without closing
// them, like a TCP proxy that stops forwarding: while cut, nothing a
// connection writes leaves and nothing arriving is read (the server keeps
// delivering to it, as to a worker whose network stalled).
type cutter struct {
	mu   sync.Mutex
	cut  bool
	cond *sync.Cond
}

func newCutter() *cutter {
	c := &cutter{}
	c.cond = sync.NewCond(&c.mu)
	return c
}

func (c *cutter) Dial(network, address string) (net.Conn, error) {
	conn, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &cutConn{Conn: conn, c: c}, nil
}

// set cuts the connections off (true) or lets them through again.
func (c *cutter) set(cut bool) {
	c.mu.Lock()
	c.cut = cut
	c.mu.Unlock()
	c.cond.Broadcast()
}

func (c *cutter) wait() {
	c.mu.Lock()
	for c.cut {
		c.cond.Wait()
	}
	c.mu.Unlock()
}

type cutConn struct {
	net.Conn
	c *cutter
}

func (cc *cutConn) Read(b []byte) (int, error) {
	cc.c.wait()
	return cc.Conn.Read(b)
}

func (cc *cutConn) Write(b []byte) (int, error) {
	cc.c.wait()
	return cc.Conn.Write(b)
}

// startWorkerWith runs a worker whose connections use opts.
func (e *env) startWorkerWith(cfg consumer.Config, opts ...nats.Option) *worker {
	e.t.Helper()
	if cfg.Provision == (consumer.ProvisionConfig{}) {
		cfg.Provision = e.prov
	}
	e.stack.Upstream = e.up
	w, err := e.stack.StartWorker(cfg, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	return &worker{Worker: w, t: e.t}
}

// cancelRaw stores a cancel for runID and sends its request, as a client
// does, without waiting for an answer: the answer may never come. It
// returns when the cancel was stored and whether the request was answered
// within wait (false: it went to a queue member that cannot answer).
func (e *env) cancelRaw(runID string, wait time.Duration) (stored time.Time, answered func() bool) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.js.Publish(ctx, "foundryq.cancels."+runID, []byte(`{"reason":"test"}`)); err != nil {
		e.t.Fatalf("store the cancel of %s: %v", runID, err)
	}
	stored = time.Now()
	inbox := nats.NewInbox()
	sub, err := e.nc.SubscribeSync(inbox)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.nc.PublishRequest("foundryq.cancel."+runID, inbox, []byte(`{"reason":"test"}`)); err != nil {
		e.t.Fatal(err)
	}
	return stored, func() bool {
		defer func() { _ = sub.Unsubscribe() }()
		_, err := sub.NextMsg(time.Until(stored.Add(wait)))
		return err == nil
	}
}

// owner waits until the record of runID names an owner and returns it.
func (e *env) owner(runID string) string {
	e.t.Helper()
	var owner string
	testkit.Eventually(e.t, 20*time.Second, "an owner of "+runID, func() bool {
		st, _, err := e.client.State(context.Background(), runID)
		owner = st.Owner
		return err == nil && owner != "" && st.ResponseID != ""
	})
	return owner
}

// A cancel request that the queue group gives to a worker cut off from
// NATS is still applied, within about a second of the cancel being stored:
// the owner follows the stored cancel records. On main before this change
// three of six such cancels were never applied (the owner read the cancels
// stream only when it took a run). The queue group routes each request to
// a random member, so the test cancels runs until at least one request
// went unanswered (it went to the cut-off member) and at least six runs
// were cancelled.
func TestCancelRoutedToACutOffWorkerReachesTheOwner(t *testing.T) {
	t.Parallel()
	e := setup(t, withNATS(natsembed.Config{}))
	e.startWorker(consumer.Config{WorkerID: "owner"})
	// Enough runs that all of them going to the owner (one in 2^24) is
	// not a concern; a slow token rate keeps the idle ones cheap. All are
	// owned before the second worker joins, so that it takes none.
	const n = 24
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("cut-owner-%02d", i)
		e.submit(request(ids[i], map[string]string{"emu_tokens": "100000", "emu_token_ms": "50"}))
	}
	for _, id := range ids {
		if o := e.owner(id); o != "owner" {
			t.Fatalf("run %s owned by %s", id, o)
		}
	}
	// A second worker joins the queue group, then its network stalls:
	// requests routed to it are never answered.
	cut := newCutter()
	reg := prometheus.NewRegistry()
	e.startWorkerWith(consumer.Config{WorkerID: "stalled", Registerer: reg}, nats.SetCustomDialer(cut))
	testkit.Eventually(t, 10*time.Second, "the second worker to answer cancels", func() bool {
		_, err := e.nc.Request("foundryq.cancel.nobody-here", nil, time.Second)
		return err == nil && counter(t, reg, "foundryq_cancel_requests_total", "not_found") > 0
	})
	cut.set(true)
	defer cut.set(false)

	// The owner applies a stored cancel within a second; the slack is for
	// a loaded machine under the race detector.
	const limit = 1500 * time.Millisecond
	cancelled, unanswered := 0, 0
	for _, id := range ids {
		if cancelled >= 6 && unanswered > 0 {
			break
		}
		stored, answered := e.cancelRaw(id, 2*time.Second)
		testkit.Eventually(t, 10*time.Second, "run.cancelled of "+id, func() bool {
			st, _, err := e.client.State(context.Background(), id)
			return err == nil && st.Status.Finished()
		})
		took := time.Since(stored)
		cancelled++
		// The owner answers at once; only the cut-off member leaves a
		// request unanswered.
		routed := "the owner"
		if !answered() {
			unanswered++
			routed = "the cut-off worker"
		}
		t.Logf("%s (request to %s) ended %s after the cancel was stored", id, routed, took.Round(time.Millisecond))
		if took > limit {
			t.Errorf("%s (request to %s) took %s to end after its cancel was stored, want within %s", id, routed, took, limit)
		}
		last := checkWellFormed(t, e.collect(id, 10*time.Second))
		if last.Type != events.TypeRunCancelled || last.UpstreamStatus != "cancelled" {
			t.Fatalf("%s ended %+v, want run.cancelled, upstream cancelled", id, last)
		}
		if rec := e.emu.Records(id)[0]; rec.Status != "cancelled" || rec.TokensAfterCancel != 0 {
			t.Fatalf("emulator: %s %s, %d tokens after the cancel", id, rec.Status, rec.TokensAfterCancel)
		}
	}
	if unanswered == 0 {
		t.Fatalf("all %d cancel requests went to the owner: the cut-off worker got none", cancelled)
	}
}

// A full store does not take the stop button away: while JetStream refuses
// every write, a cancel still reaches the owner (the request path carries
// it) and the response is cancelled upstream; a run whose events are
// refused for StoreFullTimeout is cancelled upstream too; Ready says why it
// is not ready. Once space is freed every run ends, with nothing lost: on
// main before this change runs stayed running for minutes, every cancel
// was refused and every response ran to completion.
func TestFullStoreKeepsTheStopButton(t *testing.T) {
	t.Parallel()
	e := setup(t, withNATS(natsembed.Config{MaxStore: 48 << 20}))
	w := e.startWorker(consumer.Config{WorkerID: "full", StoreFullTimeout: 2 * time.Second})
	for _, id := range []string{"full-cancel", "full-run"} {
		e.submit(request(id, map[string]string{"emu_tokens": "3000", "emu_token_ms": "20"}))
	}
	for _, id := range []string{"full-cancel", "full-run"} {
		e.waitEvent(id, events.TypeTextDelta, 20*time.Second)
	}
	filler := testkit.FillStore(t, testCtx(t), e.js)
	testkit.Eventually(t, 30*time.Second, "Ready to report the full store", func() bool {
		err := w.Ready(context.Background())
		return err != nil && strings.Contains(err.Error(), "store full")
	})

	// The client cannot store the cancel; the request still carries it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.js.Publish(ctx, "foundryq.cancels.full-cancel", nil); err == nil {
		t.Fatal("the cancels stream accepted a record with the store full")
	}
	msg, err := e.nc.Request("foundryq.cancel.full-cancel", nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	reply, err := events.DecodeCancelReply(msg.Data)
	if err != nil || reply.Result != events.CancelCancelling || !reply.Unrecorded {
		t.Fatalf("reply %+v (%v), want cancelling, unrecorded", reply, err)
	}
	for _, id := range []string{"full-cancel", "full-run"} {
		testkit.Eventually(t, 30*time.Second, "the response of "+id+" to be cancelled upstream", func() bool {
			return e.emu.Records(id)[0].Status == "cancelled"
		})
	}
	if err := filler.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	last := checkWellFormed(t, e.collect("full-cancel", 60*time.Second))
	if last.Type != events.TypeRunCancelled || last.UpstreamStatus != "cancelled" {
		t.Fatalf("full-cancel ended %+v, want run.cancelled, upstream cancelled", last)
	}
	evs := e.collect("full-run", 60*time.Second)
	last = checkWellFormed(t, evs)
	if last.Type != events.TypeRunFailed || last.Error.Code != events.CodeStoreFull {
		t.Fatalf("full-run ended %+v, want run.failed store_full", last)
	}
	if rec := e.emu.Records("full-run")[0]; !strings.HasPrefix(rec.Text, text(evs)) || rec.TokensAfterCancel != 0 {
		t.Fatalf("full-run: relayed text is not what Foundry generated, or tokens after the cancel (%d)", rec.TokensAfterCancel)
	}
	if st := e.state("full-run"); st.UpstreamStatus != "cancelled" {
		t.Fatalf("full-run record upstream status %q, want cancelled", st.UpstreamStatus)
	}
	testkit.Eventually(t, 30*time.Second, "Ready once space is free", func() bool { return w.Ready(context.Background()) == nil })
}

// A run's deadline reaches Foundry on time even while the state bucket
// refuses writes at the moment the response id arrives: the reader, which
// retries saving the id until it lands, does not hold up the cancel. On
// main before this change the response ran on until the store had room
// again (the chaos run's "timed-out runs cancelled upstream late", after a
// NATS restart).
//
// held: the run's stop watch looks only once the reader, whose wait the
// deadline ended, has given up, as on a loaded machine. On main before
// this change the watch took the reader's outcome ("run deadline
// exceeded") for a failed attempt, no cancel reached Foundry, and the
// response ran on until the store had room (1 run in 6 under -race with
// other tests beside it, every run held).
func TestDeadlineReachesFoundryWhileTheIDCannotBeSaved(t *testing.T) {
	t.Parallel()
	for _, held := range []bool{false, true} {
		t.Run(fmt.Sprintf("held=%v", held), func(t *testing.T) {
			t.Parallel()
			deadlineWhileTheIDCannotBeSaved(t, held)
		})
	}
}

func deadlineWhileTheIDCannotBeSaved(t *testing.T, held bool) {
	e := setup(t, withNATS(natsembed.Config{MaxStore: 48 << 20}))
	// The create's stream (response.created first) reaches the worker only
	// once the store is full, however long filling it takes.
	gate := make(chan struct{})
	up, err := foundry.New(foundry.Config{BaseURL: e.emu.BaseURL(), APIKey: "test-key", HTTPClient: &http.Client{Transport: &gatedCreates{next: http.DefaultTransport, gate: gate}}})
	if err != nil {
		t.Fatal(err)
	}
	e.up = up
	cfg := consumer.Config{WorkerID: "full-dl", StoreFullTimeout: time.Minute}
	if held {
		consumer.HoldStopWatch(&cfg)
	}
	e.startWorker(cfg)
	req := request("full-dl", map[string]string{"emu_tokens": "3000", "emu_token_ms": "20"})
	req.TimeoutSeconds = 30 // room to fill the store on a loaded machine
	e.submit(req)
	testkit.Eventually(t, 20*time.Second, "the create to reach the emulator", func() bool {
		return e.emu.Stats().ResponsesByRun["full-dl"] == 1
	})
	filler := testkit.FillStore(t, testCtx(t), e.js)
	st := e.state("full-dl")
	if st.Deadline == nil || st.ResponseID != "" || time.Until(*st.Deadline) < 2*time.Second {
		t.Fatalf("record %+v: want a deadline at least 2s ahead and no response id yet", st)
	}
	close(gate)
	// The store is still full: the id cannot have been saved.
	testkit.Eventually(t, time.Until(st.Deadline.Add(3*time.Second)), "the response to be cancelled upstream within 3s of the deadline", func() bool {
		recs := e.emu.Records("full-dl")
		return len(recs) == 1 && recs[0].Status == "cancelled"
	})
	if st := e.state("full-dl"); st.ResponseID != "" {
		t.Fatalf("record %+v: the id was saved with the store full", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := filler.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	last := checkWellFormed(t, e.collect("full-dl", 60*time.Second))
	if last.Type != events.TypeRunCancelled || last.Reason != events.ReasonTimeout {
		t.Fatalf("the run ended %+v, want run.cancelled timeout", last)
	}
}

// gatedCreates holds back the body of each create's answer (the stream)
// until gate is closed; the status and headers pass at once.
type gatedCreates struct {
	next http.RoundTripper
	gate <-chan struct{}
}

func (g *gatedCreates) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := g.next.RoundTrip(req)
	if err != nil || req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/responses") {
		return resp, err
	}
	resp.Body = &gatedBody{ReadCloser: resp.Body, gate: g.gate, done: req.Context().Done()}
	return resp, nil
}

type gatedBody struct {
	io.ReadCloser
	gate, done <-chan struct{}
}

func (b *gatedBody) Read(p []byte) (int, error) {
	select {
	case <-b.gate:
	case <-b.done:
		return 0, context.Canceled
	}
	return b.ReadCloser.Read(p)
}

// A run's deadline is enforced within about two seconds even while its
// owner is dead: another worker records a timeout cancel and cancels the
// response upstream; the run ends run.cancelled timeout when its job comes
// back. On main before this change the response ran on until the next
// owner took the run, an ack wait later.
func TestDeadlineEnforcedWhileTheOwnerIsDead(t *testing.T) {
	t.Parallel()
	e := setup(t, withProvision(consumer.ProvisionConfig{AckWait: 8 * time.Second}))
	workers := map[string]*worker{}
	for _, id := range []string{"w1", "w2"} {
		workers[id] = e.startWorker(consumer.Config{WorkerID: id, ShutdownTimeout: time.Second})
	}
	for id, w := range workers {
		testkit.Eventually(t, 20*time.Second, id+" to be ready", func() bool { return w.Ready(context.Background()) == nil })
	}
	req := request("dl-1", map[string]string{"emu_tokens": "5000", "emu_token_ms": "10"})
	req.TimeoutSeconds = 4
	e.submit(req)
	doomed := workers[e.owner("dl-1")]
	st := e.state("dl-1")
	if st.Deadline == nil || st.StartedAt == nil || !st.Deadline.Equal(st.StartedAt.Add(4*time.Second)) {
		t.Fatalf("record deadline %v, started %v: want started + 4s", st.Deadline, st.StartedAt)
	}
	// The owner dies: its connections are cut and it stops (a stop after
	// a cut hands nothing off and cancels nothing).
	doomed.crash()
	doomed.shutdown(t)

	testkit.Eventually(t, 20*time.Second, "the response to be cancelled upstream", func() bool {
		return e.emu.Records("dl-1")[0].Status == "cancelled"
	})
	rec := e.emu.Records("dl-1")[0]
	late := rec.CancelledAt.Sub(*st.Deadline)
	t.Logf("response cancelled %s after the deadline", late.Round(time.Millisecond))
	if late > 3*time.Second {
		t.Fatalf("the response was cancelled %s after the run's deadline, want within about 2s", late)
	}
	last := checkWellFormed(t, e.collect("dl-1", 60*time.Second))
	if last.Type != events.TypeRunCancelled || last.Reason != events.ReasonTimeout || last.UpstreamStatus != "cancelled" {
		t.Fatalf("run ended %+v, want run.cancelled timeout, upstream cancelled", last)
	}
}

// A run's deadline reaches Foundry on time while its owner is dead and
// JetStream's store is full: the other workers cannot record the timeout
// (the write is refused), and cancel the response upstream all the same.
// On main before this change they gave up on the refused write, and the
// response ran on until the store had room and a new owner took the run
// (the chaos run's "timed-out runs cancelled upstream late", its deadline
// inside the store-full fault).
func TestDeadlineEnforcedWhileTheOwnerIsDeadAndTheStoreFull(t *testing.T) {
	t.Parallel()
	e := setup(t, withNATS(natsembed.Config{MaxStore: 48 << 20}), withProvision(consumer.ProvisionConfig{AckWait: 8 * time.Second}))
	workers := map[string]*worker{}
	for _, id := range []string{"fd1", "fd2"} {
		workers[id] = e.startWorker(consumer.Config{WorkerID: id, ShutdownTimeout: time.Second, StoreFullTimeout: time.Minute})
	}
	for id, w := range workers {
		testkit.Eventually(t, 20*time.Second, id+" to be ready", func() bool { return w.Ready(context.Background()) == nil })
	}
	req := request("full-dead", map[string]string{"emu_tokens": "5000", "emu_token_ms": "10"})
	req.TimeoutSeconds = 20 // room to fill the store on a loaded machine
	e.submit(req)
	e.waitEvent("full-dead", events.TypeTextDelta, 20*time.Second)
	doomed := workers[e.owner("full-dead")]
	doomed.crash()
	doomed.shutdown(t)
	filler := testkit.FillStore(t, testCtx(t), e.js)
	st := e.state("full-dead")
	if st.Deadline == nil || st.ResponseID == "" || time.Until(*st.Deadline) < time.Second {
		t.Fatalf("record %+v: want a response id and a deadline at least 1s ahead", st)
	}

	testkit.Eventually(t, time.Until(st.Deadline.Add(3*time.Second)), "the response to be cancelled upstream within 3s of the deadline", func() bool {
		return e.emu.Records("full-dead")[0].Status == "cancelled"
	})
	t.Logf("response cancelled %s after the deadline", e.emu.Records("full-dead")[0].CancelledAt.Sub(*st.Deadline).Round(time.Millisecond))
	if st := e.state("full-dead"); st.Cancel != nil {
		t.Fatalf("record %+v: the cancel was recorded with the store full", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := filler.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	last := checkWellFormed(t, e.collect("full-dead", 60*time.Second))
	if last.Type != events.TypeRunCancelled || last.Reason != events.ReasonTimeout {
		t.Fatalf("run ended %+v, want run.cancelled timeout", last)
	}
}

// A run's deadline reaches Foundry on time while JetStream's store is
// full and its live owner cannot store its events nor record the timeout.
func TestDeadlineReachesFoundryWhileTheStoreIsFull(t *testing.T) {
	t.Parallel()
	e := setup(t, withNATS(natsembed.Config{MaxStore: 48 << 20}))
	e.startWorker(consumer.Config{WorkerID: "full-live", StoreFullTimeout: time.Minute})
	req := request("full-live", map[string]string{"emu_tokens": "5000", "emu_token_ms": "10"})
	req.TimeoutSeconds = 20 // room to fill the store on a loaded machine
	e.submit(req)
	e.waitEvent("full-live", events.TypeTextDelta, 20*time.Second)
	filler := testkit.FillStore(t, testCtx(t), e.js)
	st := e.state("full-live")
	if st.Deadline == nil || time.Until(*st.Deadline) < time.Second {
		t.Fatalf("record %+v: want a deadline at least 1s ahead", st)
	}
	testkit.Eventually(t, time.Until(st.Deadline.Add(3*time.Second)), "the response to be cancelled upstream within 3s of the deadline", func() bool {
		return e.emu.Records("full-live")[0].Status == "cancelled"
	})
	t.Logf("response cancelled %s after the deadline", e.emu.Records("full-live")[0].CancelledAt.Sub(*st.Deadline).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := filler.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	last := checkWellFormed(t, e.collect("full-live", 60*time.Second))
	if last.Type != events.TypeRunCancelled || last.Reason != events.ReasonTimeout || last.UpstreamStatus != "cancelled" {
		t.Fatalf("run ended %+v, want run.cancelled timeout, upstream cancelled", last)
	}
}

// Every loss of ownership a worker logs is counted in
// foundryq_runs_lost_ownership_total. On main before this change a run that
// lost its ownership while it was ending (a cancel or deadline arrived
// while its worker was cut off) logged "lost ownership" and counted
// nothing.
func TestLostOwnershipIsCountedOnEveryPath(t *testing.T) {
	t.Parallel()
	e := setup(t, withNATS(natsembed.Config{}), withProvision(consumer.ProvisionConfig{AckWait: 2 * time.Second}))
	cut := newCutter()
	var logs logBuffer
	log := zerolog.New(&logs)
	reg := prometheus.NewRegistry()
	e.startWorkerWith(consumer.Config{WorkerID: "zombie", Logger: &log, Registerer: reg}, nats.SetCustomDialer(cut))
	req := request("lost-1", map[string]string{"emu_tokens": "2000", "emu_token_ms": "10"})
	req.TimeoutSeconds = 6
	e.submit(req)
	if o := e.owner("lost-1"); o != "zombie" {
		t.Fatalf("owner %s", o)
	}
	cut.set(true)
	e.startWorker(consumer.Config{WorkerID: "heir"})
	testkit.Eventually(t, 30*time.Second, "the heir to take the run", func() bool {
		st, _, err := e.client.State(context.Background(), "lost-1")
		return err == nil && st.Owner == "heir"
	})
	// The zombie's deadline passes while it is cut off; it cancels upstream
	// and tries to end the run, then comes back and finds another owner.
	time.Sleep(time.Until(e.state("lost-1").StartedAt.Add(time.Duration(req.TimeoutSeconds)*time.Second + time.Second)))
	cut.set(false)
	checkWellFormed(t, e.collect("lost-1", 60*time.Second))
	testkit.Eventually(t, 30*time.Second, "the zombie to notice", func() bool {
		return len(lostLines(logs.String())) > 0
	})
	if n := counter(t, reg, "foundryq_runs_lost_ownership_total", ""); n != 1 {
		t.Fatalf("runs_lost_ownership_total = %v after the zombie logged the loss (%q); want 1", n, lostLines(logs.String()))
	}
}

// lostLines are the log lines that say a run's ownership was lost.
func lostLines(logs string) []string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "lost ownership") || strings.Contains(l, "another worker owns the run") {
			out = append(out, l)
		}
	}
	return out
}

// cancelTimed cancels runID through the client and returns when it did.
func (e *env) cancelTimed(runID string) time.Time {
	e.t.Helper()
	at := time.Now()
	reply := e.cancel(runID)
	if reply.Result != events.CancelCancelling && reply.Result != events.CancelAlreadyFinished {
		e.t.Fatalf("cancel %s: %+v", runID, reply)
	}
	return at
}

// relayedBefore fails the test if the relayed text holds a token Foundry
// generated later than slack after at (the emulator records when each token
// was generated, with Config.RecordTimes).
func relayedBefore(t *testing.T, rec foundrytest.ResponseRecord, relayed string, at time.Time, slack time.Duration) {
	t.Helper()
	if !strings.HasPrefix(rec.Text, relayed) {
		t.Fatalf("relayed text is not a prefix of what Foundry generated")
	}
	for i, end := range rec.TokenEnds {
		if end > len(relayed) {
			break
		}
		if gen := time.Unix(0, rec.TokenTimes[i]); gen.After(at.Add(slack)) {
			t.Fatalf("token %d was generated %s after the cancel and relayed", i, gen.Sub(at).Round(time.Millisecond))
		}
	}
}

// Foundry's cancel failing for a few seconds: the owner keeps calling it
// (one call at a time) until Foundry confirms it; the record says
// cancelling meanwhile, with the first upstream error; nothing generated
// after the cancel is relayed; run.cancelled then says cancelled. On main
// before this change the owner gave up after --cancel-confirm-timeout,
// published run.cancelled without an upstream status, and every response
// ran to completion.
func TestCancelRetriedUntilFoundryConfirms(t *testing.T) {
	t.Parallel()
	e := setup(t, withEmulator(foundrytest.Config{RecordTimes: true}))
	e.twoWorkers(consumer.Config{CancelConfirmTimeout: time.Minute})
	e.submit(request("retry-1", map[string]string{"emu_tokens": "3000", "emu_token_ms": "10", "emu_cancel_fail_ms": "3000"}))
	e.waitEvent("retry-1", events.TypeTextDelta, 20*time.Second)
	at := e.cancelTimed("retry-1")
	testkit.Eventually(t, 10*time.Second, "the record to say cancelling with the upstream error", func() bool {
		st, _, err := e.client.State(context.Background(), "retry-1")
		return err == nil && st.Status == events.StatusCancelling && st.Cancel != nil && strings.Contains(st.Cancel.UpstreamError, "500")
	})
	evs := e.collect("retry-1", 60*time.Second)
	last := checkWellFormed(t, evs)
	if last.Type != events.TypeRunCancelled || last.UpstreamStatus != "cancelled" || last.UsageUnknown || last.Usage == nil {
		t.Fatalf("run ended %+v, want run.cancelled, upstream cancelled, with usage", last)
	}
	rec := e.emu.Records("retry-1")[0]
	if rec.Status != "cancelled" || rec.CancelCalls < 2 || rec.CancelCallsMaxInFlight != 1 {
		t.Fatalf("emulator: status %s, %d cancel calls, %d at once at most; want cancelled, retried, one at a time", rec.Status, rec.CancelCalls, rec.CancelCallsMaxInFlight)
	}
	if last.Usage.OutputTokens != int64(rec.Tokens) {
		t.Fatalf("usage %d output tokens, Foundry billed %d", last.Usage.OutputTokens, rec.Tokens)
	}
	relayedBefore(t, rec, text(evs), at, 500*time.Millisecond)
}

// Foundry's cancel failing for longer than the bound: the run ends
// run.cancelled with upstream_status unconfirmed and the last upstream
// error, never without an upstream status.
func TestCancelUnconfirmedAfterTheBound(t *testing.T) {
	t.Parallel()
	e := setup(t)
	reg := prometheus.NewRegistry()
	e.startWorker(consumer.Config{WorkerID: "bound", CancelConfirmTimeout: 2 * time.Second, Registerer: reg})
	e.submit(request("bound-1", map[string]string{"emu_tokens": "5000", "emu_token_ms": "10", "emu_cancel_fail_ms": "60000"}))
	e.waitEvent("bound-1", events.TypeTextDelta, 20*time.Second)
	start := time.Now()
	e.cancelTimed("bound-1")
	last := checkWellFormed(t, e.collect("bound-1", 30*time.Second))
	took := time.Since(start)
	if last.Type != events.TypeRunCancelled || last.UpstreamStatus != events.UpstreamUnconfirmed ||
		last.Error == nil || last.Error.Code != events.CodeCancelUnconfirmed || !strings.Contains(last.Error.Message, "500") || !last.UsageUnknown {
		t.Fatalf("run ended %+v (error %+v), want run.cancelled unconfirmed with the last upstream error", last, last.Error)
	}
	if took < 2*time.Second || took > 15*time.Second {
		t.Fatalf("the run ended %s after the cancel, want about the 2s bound", took)
	}
	if st := e.state("bound-1"); st.UpstreamStatus != events.UpstreamUnconfirmed {
		t.Fatalf("record upstream status %q", st.UpstreamStatus)
	}
	if n := counter(t, reg, "foundryq_cancels_unconfirmed_total", ""); n != 1 {
		t.Fatalf("cancels_unconfirmed_total = %v", n)
	}
}

// A response that runs to its end while Foundry's cancel keeps failing is
// reported: run.cancelled with upstream_status completed and the usage
// Foundry billed, counted in completed_after_cancel.
func TestResponseThatRanOnIsReported(t *testing.T) {
	t.Parallel()
	e := setup(t, withEmulator(foundrytest.Config{RecordTimes: true}))
	reg := prometheus.NewRegistry()
	e.startWorker(consumer.Config{WorkerID: "ranon", Registerer: reg})
	e.submit(request("ranon-1", map[string]string{"emu_tokens": "200", "emu_token_ms": "10", "emu_cancel_fail_ms": "30000"}))
	e.waitEvent("ranon-1", events.TypeTextDelta, 20*time.Second)
	at := e.cancelTimed("ranon-1")
	evs := e.collect("ranon-1", 30*time.Second)
	last := checkWellFormed(t, evs)
	rec := e.emu.Records("ranon-1")[0]
	if last.Type != events.TypeRunCancelled || last.UpstreamStatus != "completed" || last.Usage == nil || last.Usage.OutputTokens != int64(rec.Tokens) {
		t.Fatalf("run ended %+v, want run.cancelled, upstream completed, usage of %d tokens", last, rec.Tokens)
	}
	if n := counter(t, reg, "foundryq_completed_after_cancel_total", ""); n != 1 {
		t.Fatalf("completed_after_cancel_total = %v", n)
	}
	relayedBefore(t, rec, text(evs), at, 500*time.Millisecond)
}

// The reply to a cancel comes at once even while Foundry's cancel hangs,
// however many requests arrive; they make one upstream call at a time. On
// main before this change each request waited for its own Foundry call (up
// to 10s, past the Go client's 5s).
func TestCancelReplyComesAtOnceWhileFoundryHangs(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.twoWorkers(consumer.Config{})
	e.submit(request("hang-1", map[string]string{"emu_tokens": "5000", "emu_token_ms": "10", "emu_cancel_hang_ms": "3000"}))
	e.waitEvent("hang-1", events.TypeTextDelta, 20*time.Second)
	const n = 40
	took := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			msg, err := e.nc.Request("foundryq.cancel.hang-1", nil, 5*time.Second)
			took[i] = time.Since(start)
			if err != nil {
				t.Errorf("cancel request %d: %v", i, err)
				return
			}
			if reply, err := events.DecodeCancelReply(msg.Data); err != nil || reply.Error != "" {
				t.Errorf("cancel reply %d: %+v %v", i, reply, err)
			}
		}()
	}
	wg.Wait()
	slices.Sort(took)
	t.Logf("cancel replies: p50 %s, max %s", took[n/2].Round(time.Millisecond), took[n-1].Round(time.Millisecond))
	if took[n-1] > time.Second {
		t.Fatalf("slowest cancel reply took %s while Foundry's cancel hung, want under 1s", took[n-1])
	}
	last := checkWellFormed(t, e.collect("hang-1", 60*time.Second))
	if last.Type != events.TypeRunCancelled || last.UpstreamStatus != "cancelled" {
		t.Fatalf("run ended %+v, want run.cancelled, upstream cancelled", last)
	}
	if rec := e.emu.Records("hang-1")[0]; rec.CancelCallsMaxInFlight != 1 {
		t.Fatalf("%d cancel calls reached Foundry at once, want 1 at a time (%d in all)", rec.CancelCallsMaxInFlight, rec.CancelCalls)
	}
}

// A response that Foundry keeps queued ends the run upstream_queued after
// QueuedTimeout, with the response cancelled; on main before this change
// the run waited for ever.
func TestResponseQueuedTooLongIsGivenUp(t *testing.T) {
	t.Parallel()
	e := setup(t, withEmulator(foundrytest.Config{KeepaliveInterval: 200 * time.Millisecond}))
	reg := prometheus.NewRegistry()
	e.startWorker(consumer.Config{WorkerID: "queued", QueuedTimeout: 2 * time.Second, Registerer: reg})
	e.submit(request("queued-1", map[string]string{"emu_queued_ms": "3600000"}))
	last := checkWellFormed(t, e.collect("queued-1", 30*time.Second))
	if last.Type != events.TypeRunFailed || last.Error.Code != events.CodeUpstreamQueued {
		t.Fatalf("run ended %+v (error %+v), want run.failed upstream_queued", last, last.Error)
	}
	if rec := e.emu.Records("queued-1")[0]; rec.Status != "cancelled" {
		t.Fatalf("emulator status %s, want cancelled", rec.Status)
	}
	if st := e.state("queued-1"); st.UpstreamStatus != "cancelled" {
		t.Fatalf("record upstream status %q, want cancelled", st.UpstreamStatus)
	}
	if n := counter(t, reg, "foundryq_runs_stalled_total", events.CodeUpstreamQueued); n != 1 {
		t.Fatalf("runs_stalled_total{code=upstream_queued} = %v", n)
	}
}

// A stream that goes silent (no frame, not even a keepalive) is re-read
// and re-attached once; silent again, the run ends upstream_stalled with
// the response cancelled, and the record marked stalled meanwhile. On main
// before this change such a run stayed running for ever.
func TestSilentStreamEndsTheRunStalled(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.idleTimeout(time.Second)
	reg := prometheus.NewRegistry()
	e.startWorker(consumer.Config{WorkerID: "silent", Registerer: reg})
	e.submit(request("silent-1", map[string]string{"emu_tokens": "100", "emu_silent_after": "10"}))
	testkit.Eventually(t, 20*time.Second, "the record to mark the stall", func() bool {
		st, _, err := e.client.State(context.Background(), "silent-1")
		return err == nil && st.StalledAt != nil
	})
	evs := e.collect("silent-1", 30*time.Second)
	last := checkWellFormed(t, evs)
	if last.Type != events.TypeRunFailed || last.Error.Code != events.CodeUpstreamStalled {
		t.Fatalf("run ended %+v (error %+v), want run.failed upstream_stalled", last, last.Error)
	}
	rec := e.emu.Records("silent-1")[0]
	if rec.Status != "cancelled" || text(evs) != rec.Text {
		t.Fatalf("emulator: status %s, text %q; relayed %q: want cancelled, everything generated relayed", rec.Status, rec.Text, text(evs))
	}
	if st := e.state("silent-1"); st.StalledAt != nil || st.UpstreamStatus != "cancelled" {
		t.Fatalf("record: stalled_at %v, upstream status %q; want cleared, cancelled", st.StalledAt, st.UpstreamStatus)
	}
	if n := counter(t, reg, "foundryq_runs_stalled_total", events.CodeUpstreamStalled); n != 1 {
		t.Fatalf("runs_stalled_total{code=upstream_stalled} = %v", n)
	}
}

// A stream silent for a while that then speaks again is not a stall: the
// run completes with the whole text after one re-attach.
func TestSilenceShorterThanTwoIdleTimeoutsIsNotAStall(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.idleTimeout(time.Second)
	e.startWorker(consumer.Config{WorkerID: "pause"})
	e.submit(request("pause-1", map[string]string{"emu_tokens": "40", "emu_silent_after": "10", "emu_silent_ms": "1500"}))
	evs := e.collect("pause-1", 30*time.Second)
	if last := checkWellFormed(t, evs); last.Type != events.TypeRunCompleted || text(evs) != e.emulatorText("pause-1") {
		t.Fatalf("run ended %+v, relayed %q; want run.completed with the whole text", last, text(evs))
	}
}

// A zombie owner that stores an event after the new owner recorded the
// run's end takes the seq the end was numbered with; the next delivery of
// the job moves the end behind it and publishes it, so that the run still
// ends with one terminal event. The chaos run found a run left without
// one: "the state record's end does not follow the stored events; not
// repaired".
func TestEndRecordedBeforeAZombieEventIsRepaired(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	req := request("zombie-end", nil)
	e.tap.IgnoreRun(req.RunID) // its first events are made by hand, without headers
	for i, ev := range []events.RunEvent{
		{Type: events.TypeRunStarted, ResponseID: "resp_z", Attempt: 1, Worker: "old"},
		{Type: events.TypeTextDelta, Text: "before"},
		{Type: events.TypeTextDelta, Text: "the zombie's"},
	} {
		ev.RunID, ev.Seq, ev.Time = req.RunID, uint64(i+1), time.Now().UTC()
		data, _ := json.Marshal(ev)
		if _, err := e.js.Publish(ctx, "foundryq.events."+req.RunID, data); err != nil {
			t.Fatal(err)
		}
	}
	end := events.RunEvent{RunID: req.RunID, Seq: 3, Type: events.TypeRunCancelled, Time: time.Now().UTC(),
		ResponseID: "resp_z", Reason: events.ReasonRequested, UpstreamStatus: "cancelled", UsageUnknown: true}
	now := time.Now().UTC()
	st := events.RunState{RunID: req.RunID, Schema: 1, Status: events.StatusCancelled, Digest: req.Digest(), ResponseID: "resp_z",
		Owner: "new", Attempt: 2, Terminal: end.Type, End: &end, UpstreamStatus: "cancelled", FinishedAt: &now}
	data, _ := json.Marshal(st)
	kv, err := e.js.KeyValue(ctx, "foundryq-runs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, req.RunID, data); err != nil {
		t.Fatal(err)
	}
	e.startWorker(consumer.Config{WorkerID: "repairer"})
	e.publishRaw(req) // the job, delivered again
	evs := e.collect(req.RunID, 20*time.Second)
	last := checkWellFormed(t, evs)
	if len(evs) != 4 || last.Type != events.TypeRunCancelled || last.UpstreamStatus != "cancelled" {
		t.Fatalf("events %v, last %+v: want the recorded end behind the zombie's event", types(evs), last)
	}
	if got := e.state(req.RunID); got.End == nil || got.End.Seq != 4 {
		t.Fatalf("record end %+v, want seq 4", got.End)
	}
	e.waitRunsEmpty()
}

// idleTimeout gives the workers started next a Foundry client whose
// streams end after d of silence (foundry.Config.StreamIdleTimeout).
func (e *env) idleTimeout(d time.Duration) {
	e.t.Helper()
	up, err := foundry.New(foundry.Config{BaseURL: e.emu.BaseURL(), APIKey: "test-key", StreamIdleTimeout: d})
	if err != nil {
		e.t.Fatal(err)
	}
	e.up = up
}

// A cancel the store refused (the reply says cancelling, unrecorded) is
// known only to the run's owner. When that owner shuts down (a rolling
// restart), it must take the cancel upstream before it hands the run off:
// the next owner finds no cancel on record and would relay the response to
// its end. On main before this change it did not, in two ways (the run
// ended run.completed, every token billed):
//
//   - heard during the hand-off: the run, already stopped for the shutdown,
//     ignored the cancel (its stop cause stays the first);
//   - confirming at shutdown: the owner, calling Foundry's cancel while it
//     failed, handed the run off as soon as the shutdown began.
func TestUnrecordedCancelSurvivesTheHandOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		scenario map[string]string
	}{
		{"heard during the hand-off", nil},
		{"confirming at shutdown", map[string]string{foundrytest.KeyCancelFailMS: "3000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, withNATS(natsembed.Config{MaxStore: 48 << 20}))
			lg := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
			old := e.startWorker(consumer.Config{WorkerID: "old", StoreFullTimeout: time.Minute, ShutdownTimeout: 12 * time.Second, Logger: &lg})
			const id = "handoff-cancel"
			scenario := map[string]string{"emu_tokens": "3000", "emu_token_ms": "10"}
			maps.Copy(scenario, tc.scenario)
			e.submit(request(id, scenario))
			e.waitEvent(id, events.TypeTextDelta, 20*time.Second)
			filler := testkit.FillStore(t, testCtx(t), e.js)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stopped := make(chan error, 1)
			// The reply says unrecorded: the store refused the cancel.
			cancelRun := func() {
				msg, err := e.nc.Request("foundryq.cancel."+id, []byte(`{"reason":"stop"}`), 10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if reply, err := events.DecodeCancelReply(msg.Data); err != nil || reply.Result != events.CancelCancelling || !reply.Unrecorded {
					t.Fatalf("reply %+v (%v), want cancelling, unrecorded", reply, err)
				}
			}
			if tc.scenario == nil {
				go func() { stopped <- old.Stop(30 * time.Second) }()
				testkit.Eventually(t, 20*time.Second, "the shutdown to hand the run off", func() bool {
					err := old.Ready(context.Background())
					return err != nil && strings.Contains(err.Error(), "pull loop stopped") && e.emu.Records(id)[0].StreamsAttached == 0
				})
				cancelRun()
			} else {
				cancelRun()
				testkit.Eventually(t, 20*time.Second, "Foundry's cancel to have failed once", func() bool {
					return e.emu.Records(id)[0].CancelCallsFaulted >= 1
				})
				go func() { stopped <- old.Stop(30 * time.Second) }()
			}
			testkit.Eventually(t, 20*time.Second, "the response to be cancelled upstream by the old owner", func() bool {
				return e.emu.Records(id)[0].Status == "cancelled"
			})
			<-stopped
			if err := filler.Purge(ctx); err != nil {
				t.Fatal(err)
			}
			e.startWorker(consumer.Config{WorkerID: "next", Logger: &lg})
			last := checkWellFormed(t, e.collect(id, 90*time.Second))
			if rec := e.emu.Records(id)[0]; last.Type != events.TypeRunCancelled || rec.TokensAfterCancel != 0 {
				t.Fatalf("run ended %s (upstream %q), %d tokens relayed after the cancel; want run.cancelled", last.Type, last.UpstreamStatus, rec.TokensAfterCancel)
			}
		})
	}
}
