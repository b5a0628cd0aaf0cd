package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/testkit"
)

// fleetView follows every run's state record (a watch of the state
// bucket, which sees each write in the order the bucket stored them) and
// keeps, per fairness key, the most runs that were running at once: a run
// counts from the write that makes a worker its owner until the write that
// gives it back or ends it. It also keeps the queue reasons seen on runs
// still queued.
type fleetView struct {
	mu      sync.Mutex
	running map[string]string // run id -> fairness key, while a worker owns it
	now     map[string]int    // running runs by key
	most    map[string]int    // the most ever, by key
	reasons map[string]int    // queue reasons seen with status queued
}

func (e *env) watchFleet() *fleetView {
	e.t.Helper()
	v := &fleetView{running: map[string]string{}, now: map[string]int{}, most: map[string]int{}, reasons: map[string]int{}}
	kv, err := e.js.KeyValue(context.Background(), "foundryq-runs")
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	watch, err := kv.WatchAll(ctx, jetstream.IncludeHistory())
	if err != nil {
		e.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for en := range watch.Updates() {
			if en == nil || en.Operation() != jetstream.KeyValuePut {
				continue
			}
			var st events.RunState
			if json.Unmarshal(en.Value(), &st) != nil {
				continue
			}
			v.saw(st)
		}
	}()
	e.t.Cleanup(func() {
		cancel()
		_ = watch.Stop()
		<-done
	})
	return v
}

func (v *fleetView) saw(st events.RunState) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if st.Status == events.StatusQueued && st.QueueReason != "" {
		v.reasons[st.QueueReason]++
	}
	key, was := v.running[st.RunID]
	is := st.Owner != "" && (st.Status == events.StatusRunning || st.Status == events.StatusCancelling)
	switch {
	case is && !was:
		v.running[st.RunID] = st.FairnessKey
		v.now[st.FairnessKey]++
		v.most[st.FairnessKey] = max(v.most[st.FairnessKey], v.now[st.FairnessKey])
	case !is && was:
		delete(v.running, st.RunID)
		v.now[key]--
	}
}

func (v *fleetView) max(key string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.most[key]
}

func (v *fleetView) reason(r string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.reasons[r]
}

// keyed is a request of fairness key key whose response streams n tokens,
// one every ms milliseconds.
func keyed(runID, key string, n, ms int) events.RunRequest {
	req := request(runID, map[string]string{"emu_tokens": fmt.Sprint(n), "emu_token_ms": fmt.Sprint(ms)})
	req.FairnessKey = key
	return req
}

// TestCapHoldsAcrossThreeWorkers: three workers, a cap of 2 per key and
// an override of 4 for key vip; 15 runs of each key submitted at once.
// No more runs of a key ever run at once across the fleet than its cap,
// every run completes, and the runs that waited were recorded queued with
// queue_reason concurrency_cap.
func TestCapHoldsAcrossThreeWorkers(t *testing.T) {
	e := setup(t)
	view := e.watchFleet()
	cfg := consumer.Config{CapPerKey: 2, Caps: map[string]int{"vip": 4}, CapRetryDelay: 100 * time.Millisecond}
	for i := range 3 {
		c := cfg
		c.WorkerID = fmt.Sprintf("w%d", i)
		w := e.startWorker(c)
		t.Cleanup(func() { w.shutdown(t) })
	}
	var ids []string
	for _, key := range []string{"plain", "vip"} {
		for i := range 15 {
			id := fmt.Sprintf("cap-%s-%d", key, i)
			ids = append(ids, id)
			e.submit(keyed(id, key, 20, 25)) // about half a second upstream
		}
	}
	for _, id := range ids {
		if last := checkWellFormed(t, e.collect(id, 3*time.Minute)); last.Type != events.TypeRunCompleted {
			t.Fatalf("run %s ended %s: %+v", id, last.Type, last.Error)
		}
	}
	if got := view.max("plain"); got != 2 {
		t.Errorf("key plain: at most %d runs running at once, want its cap 2 reached and never passed", got)
	}
	if got := view.max("vip"); got < 3 || got > 4 {
		t.Errorf("key vip: at most %d runs running at once, want 3 or 4 (its override 4 lets more run than the default cap 2)", got)
	}
	if view.reason(events.QueueReasonCap) == 0 {
		t.Error("no run was recorded queued with queue_reason concurrency_cap")
	}
	st, _, err := e.client.State(testCtx(t), ids[len(ids)-1])
	if err != nil {
		t.Fatal(err)
	}
	if st.QueueReason != "" {
		t.Errorf("a finished run's record keeps queue_reason %q", st.QueueReason)
	}
}

// TestCapSlotOfKilledWorkerExpires: a key with a cap of 1, a slot lease of
// 2s. While the worker running the key's run lives, it renews the slot
// and a second run of the key waits queued (concurrency_cap) past the
// lease; once that worker is killed, its slot expires within the lease
// and another worker starts the second run.
func TestCapSlotOfKilledWorkerExpires(t *testing.T) {
	// The first run's job stays with the killed worker for the test.
	e := setup(t, withProvision(consumer.ProvisionConfig{AckWait: 2 * time.Minute}))
	const lease = 2 * time.Second
	cfg := consumer.Config{CapPerKey: 1, SlotLease: lease, CapRetryDelay: 100 * time.Millisecond}
	workers := map[string]*worker{}
	for i := range 3 {
		c := cfg
		c.WorkerID = fmt.Sprintf("k%d", i)
		w := e.startWorker(c)
		workers[c.WorkerID] = w
		t.Cleanup(func() { w.shutdown(t) })
	}
	e.submit(keyed("slot-long", "solo", 1000, 50)) // 50 s upstream: it outlives the test
	e.waitEvent("slot-long", events.TypeRunStarted, 30*time.Second)
	st, _, err := e.client.State(testCtx(t), "slot-long")
	if err != nil {
		t.Fatal(err)
	}
	owner := workers[st.Owner]
	if owner == nil {
		t.Fatalf("run owned by %q, not one of the test's workers", st.Owner)
	}

	kv, err := e.js.KeyValue(context.Background(), consumer.LimitsBucket(mustNames(t)))
	if err != nil {
		t.Fatal(err)
	}
	first, err := kv.Get(context.Background(), "slot.solo.0")
	if err != nil {
		t.Fatalf("the run's slot: %v", err)
	}
	e.submit(keyed("slot-next", "solo", 3, 0))
	// Renewed three times: more than a lease has passed since the slot
	// was taken, and the live worker kept it.
	testkit.Eventually(t, 30*time.Second, "the slot renewed past its lease", func() bool {
		en, err := kv.Get(context.Background(), "slot.solo.0")
		return err == nil && en.Revision() > first.Revision() && time.Since(first.Created()) > lease+lease/2
	})
	testkit.Eventually(t, 30*time.Second, "the second run recorded queued for the cap", func() bool {
		st, _, err := e.client.State(testCtx(t), "slot-next")
		return err == nil && st.Status == events.StatusQueued && st.QueueReason == events.QueueReasonCap
	})
	if st, _, err := e.client.State(testCtx(t), "slot-next"); err != nil || st.Status != events.StatusQueued {
		t.Fatalf("second run while the first holds the slot: %+v, %v; want still queued", st, err)
	}

	owner.crash()
	killed := time.Now()
	ev := e.waitEvent("slot-next", events.TypeRunStarted, 60*time.Second)
	took := time.Since(killed)
	// The lease, one retry delay, and slack for a loaded machine.
	if limit := lease + 5*time.Second; took > limit {
		t.Errorf("the second run started %s after the kill, want within the lease (%s) and some slack: %s", took, lease, limit)
	}
	if ev.Worker == st.Owner {
		t.Errorf("the second run was started by the killed worker %s", ev.Worker)
	}
	if last := checkWellFormed(t, e.collect("slot-next", time.Minute)); last.Type != events.TypeRunCompleted {
		t.Fatalf("second run ended %s", last.Type)
	}
	t.Logf("slot freed and the next run started %s after the kill (lease %s)", took.Round(time.Millisecond), lease)
}

func mustNames(t *testing.T) events.Names {
	t.Helper()
	n, err := events.NewNames(events.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
