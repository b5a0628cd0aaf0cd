package consumer

// Fleet-wide limits: concurrency caps per fairness key (this file) and
// token budgets per deployment (budget.go). Both live in one KV bucket,
// <prefix>-limits, shared by every worker of the prefix; a run takes what
// it needs before it is claimed (gate), so that a run that must wait stays
// queued, its job handed back with a delay, and its record says why
// (queue_reason).
//
// A slot is one key, slot.<fairness key>.<i> for i below the key's cap,
// written with Create (which fails if the key exists): at most cap runs
// of a key hold one at once, whatever the workers race. Each slot carries
// a per-message TTL (the lease): its worker rewrites it every third of
// the lease, with the revision it wrote last, and deletes it when the run
// leaves the worker; a killed worker's slots expire within the lease.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/jserr"
	"github.com/foundryq/foundryq/internal/retry"
)

// DefaultSlotLease is how long a slot of a worker that stopped renewing it
// stays held, unless Config.SlotLease says otherwise.
const DefaultSlotLease = 30 * time.Second

// LimitsBucket names the KV bucket of the fleet-wide limits of prefix n.
func LimitsBucket(n events.Names) string {
	return strings.TrimSuffix(n.Bucket(), "-runs") + "-limits"
}

// limitsBucketConfig: history 1; keys expire by their own TTL
// (LimitMarkerTTL allows per-key TTLs and leaves a marker a watcher sees
// when a key expires).
func limitsBucketConfig(n events.Names, replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:         LimitsBucket(n),
		Description:    "foundryq concurrency slots and token budgets",
		History:        1,
		Storage:        jetstream.FileStorage,
		Replicas:       max(replicas, 1),
		LimitMarkerTTL: time.Minute,
	}
}

// limits are this worker's view of the fleet-wide limits.
type limits struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	prefix string // $KV.<bucket>.
	lease  time.Duration
	worker string

	watch jetstream.KeyWatcher // the slots: keepSlots applies its updates

	mu    sync.Mutex
	seen  map[string]uint64 // slot keys held by any worker, as the watch last saw them (with their revision)
	ready bool              // the watch delivered the bucket's initial values
}

// limited reports whether any fleet-wide limit is configured.
func (c Config) limited() bool {
	return c.CapPerKey > 0 || len(c.Caps) > 0 || len(c.TokensPerMinute) > 0
}

// capOf is the concurrency cap of fairness key key; 0: none.
func (c Config) capOf(key string) int {
	if n, ok := c.Caps[key]; ok {
		return n
	}
	return c.CapPerKey
}

// startLimits creates the limits bucket (retrying like provision while
// NATS is unavailable, until ctx ends) and starts following its slots
// until watchCtx ends; nil when no limit is configured.
func (w *Worker) startLimits(ctx, watchCtx context.Context) (*limits, error) {
	if !w.cfg.limited() {
		return nil, nil
	}
	cfg := limitsBucketConfig(w.names, w.cfg.Provision.Replicas)
	b := retry.Backoff(250*time.Millisecond, 5*time.Second)
	var kv jetstream.KeyValue
	var err error
	for {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		kv, err = retryProvision(pctx, "bucket "+cfg.Bucket, func() (jetstream.KeyValue, error) {
			return w.js.CreateOrUpdateKeyValue(pctx, cfg)
		})
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil, nil // stopped before it started
		}
		if w.nc.IsClosed() {
			return nil, fmt.Errorf("consumer: provision the limits bucket: %w", err)
		}
		wait := b.NextBackOff()
		w.log.Warn().Err(err).Dur("retry_in", wait).Msg("provision the limits bucket")
		retry.Sleep(ctx, wait)
	}
	l := &limits{js: w.js, kv: kv, prefix: "$KV." + cfg.Bucket + ".", lease: w.cfg.SlotLease, worker: w.cfg.WorkerID, seen: make(map[string]uint64)}
	if l.watch, err = kv.Watch(watchCtx, "slot.>"); err != nil {
		return nil, fmt.Errorf("consumer: follow the concurrency slots: %w", err)
	}
	return l, nil
}

// saw applies one update of the watch to seen (nil: the initial values
// are all in).
func (l *limits) saw(e jetstream.KeyValueEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case e == nil:
		l.ready = true
	case e.Operation() == jetstream.KeyValuePut:
		l.seen[e.Key()] = e.Revision()
	default:
		delete(l.seen, e.Key())
	}
}

// running counts the slots of each fairness key held across the fleet, as
// the watch last saw them.
func (l *limits) running() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int)
	for k := range l.seen {
		if key, _, ok := parseSlotKey(k); ok {
			out[key]++
		}
	}
	return out
}

// slot is a concurrency slot this worker holds for a run.
type slot struct {
	key  string // the KV key
	data []byte // its value (slotValue)

	mu       sync.Mutex // held by a renewal or the release, which use rev
	rev      uint64     // the revision this worker wrote last
	released bool
}

// slotValue is what a slot's key holds: who holds it, for an operator.
type slotValue struct {
	RunID       string    `json:"run_id"`
	Worker      string    `json:"worker"`
	FairnessKey string    `json:"fairness_key"`
	At          time.Time `json:"at"`
}

func slotKey(key string, i int) string { return "slot." + key + "." + strconv.Itoa(i) }

func parseSlotKey(k string) (key string, i int, ok bool) {
	rest, ok := strings.CutPrefix(k, "slot.")
	if !ok {
		return "", 0, false
	}
	key, num, ok := strings.Cut(rest, ".")
	if !ok {
		return "", 0, false
	}
	i, err := strconv.Atoi(num)
	return key, i, err == nil
}

// acquire takes one of the n slots of fairness key key for runID; nil if
// all are held. It tries the slots the watch does not show held, in a
// random order: Create decides, the view only saves calls.
func (l *limits) acquire(ctx context.Context, key string, n int, runID string) (*slot, error) {
	l.mu.Lock()
	free := make([]int, 0, n)
	for i := range n {
		if _, held := l.seen[slotKey(key, i)]; !held || !l.ready {
			free = append(free, i)
		}
	}
	l.mu.Unlock()
	rand.Shuffle(len(free), func(a, b int) { free[a], free[b] = free[b], free[a] })
	data, _ := json.Marshal(slotValue{RunID: runID, Worker: l.worker, FairnessKey: key, At: time.Now().UTC()})
	for _, i := range free {
		k := slotKey(key, i)
		rev, err := l.kv.Create(ctx, k, data, jetstream.KeyTTL(l.lease))
		switch {
		case err == nil:
			return &slot{key: k, data: data, rev: rev}, nil
		case errors.Is(err, jetstream.ErrKeyExists) || jserr.WrongLastSequence(err):
			continue // held (or taken a moment ago)
		default:
			return nil, fmt.Errorf("take concurrency slot %s: %w", k, err)
		}
	}
	return nil, nil
}

// renew extends the slot's lease; an error wrapping errSlotLost says it
// expired and may be held by another run now.
func (l *limits) renew(ctx context.Context, s *slot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return nil
	}
	rev, err := l.update(ctx, s.key, s.data, s.rev, l.lease)
	if jserr.WrongLastSequence(err) || errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("%s: %w", s.key, errSlotLost)
	}
	if err != nil {
		return err
	}
	s.rev = rev
	return nil
}

// update writes data to key if its last revision is rev (0: if it has
// none), with a TTL, and returns the new revision. KeyValue's Update takes
// no TTL; this is its publish with one.
func (l *limits) update(ctx context.Context, key string, data []byte, rev uint64, ttl time.Duration) (uint64, error) {
	ack, err := l.js.PublishMsg(ctx, &nats.Msg{Subject: l.prefix + key, Data: data},
		jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(ttl))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// release frees the slot, unless it expired meanwhile (another run may
// hold it).
func (l *limits) release(ctx context.Context, s *slot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released = true
	return l.kv.Delete(ctx, s.key, jetstream.LastRevision(s.rev))
}

// errSlotLost: a slot's lease ran out before its worker renewed it.
var errSlotLost = errors.New("concurrency slot expired")

// keepSlots renews the slots of the runs this worker owns, three times per
// lease, and follows every worker's slots (for acquire and the running
// gauge), until ctx ends.
func (w *Worker) keepSlots(ctx context.Context) {
	defer func() { _ = w.limits.watch.Stop() }()
	t := time.NewTicker(max(w.cfg.SlotLease/3, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.limits.watch.Updates():
			if !ok {
				return
			}
			w.limits.saw(e)
			if e != nil {
				if key, _, ok := parseSlotKey(e.Key()); ok {
					w.setKeyRunning(key)
				}
			}
			continue
		case <-t.C:
		}
		w.renewSlots(ctx)
	}
}

// setKeyRunning sets the running gauge of key's label to the slots held
// across the fleet, as the watch last saw them: for otherKeys, those of
// every key that shares it.
func (w *Worker) setKeyRunning(key string) {
	label := w.keyLabel(key)
	n := 0
	for k, held := range w.limits.running() {
		if k == key || label == otherKeys && w.keyLabel(k) == otherKeys {
			n += held
		}
	}
	w.m.limits.keyRunning.WithLabelValues(label).Set(float64(n))
}

// renewSlots extends the lease of every slot this worker's runs hold.
func (w *Worker) renewSlots(ctx context.Context) {
	for _, r := range w.ownedRuns() {
		s := r.heldSlot()
		if s == nil {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, w.cfg.SlotLease/3)
		err := w.limits.renew(rctx, s)
		cancel()
		switch {
		case errors.Is(err, errSlotLost):
			// The run goes on: stopping it would waste what it did. Its
			// key may have one run too many until it ends.
			r.setSlot(nil)
			w.m.limits.capSlotsLost.Inc()
			r.logger().Warn().Err(err).Msg("the run's concurrency slot expired before it was renewed")
		case err != nil:
			r.logger().Debug().Err(err).Msg("renew the run's concurrency slot")
		}
	}
}

// gate takes what the run needs before it is claimed: a concurrency slot
// of its fairness key, and, if it creates a response, tokens of its
// deployment's budget. It reports whether the run must wait: then its job
// was handed back with a delay and its record says why (queue_reason).
// A run that will not start (finished, or waiting for answers) passes: the
// claim decides what becomes of it.
func (r *run) gate(req events.RunRequest, digest string, fair events.Fairness, answered bool) (wait bool) {
	w := r.w
	if w.limits == nil {
		return false
	}
	st, _, err := w.states.Get(r.hard, r.id)
	exists := err == nil
	if err != nil && !errors.Is(err, events.ErrStateNotFound) {
		return false // the claim reads it again, and says what is wrong
	}
	if st.Finished() || st.Schema > stateSchema || st.Cancel != nil || (st.Status == events.StatusWaiting && !answered) {
		return false
	}
	if n := w.cfg.capOf(fair.Key); n > 0 {
		s, err := w.limits.acquire(r.hard, fair.Key, n, r.id)
		if err != nil {
			r.logger().Warn().Err(err).Msg("take a concurrency slot; the job will be retried")
			r.end(retryAfter(w.cfg.RetryDelay))
			return true
		}
		if s == nil {
			r.waitQueued(st, exists, digest, fair, events.QueueReasonCap, capDelay(w.cfg.CapRetryDelay, fair.Priority))
			return true
		}
		r.setSlot(s)
		r.logger().Debug().Str("slot", s.key).Msg("concurrency slot taken")
	}
	if st.ResponseID == "" {
		if until, ok := r.spend(req, fair); !ok {
			r.releaseSlot()
			r.waitQueued(st, exists, digest, fair, events.QueueReasonBudget, budgetDelay(until, fair.Priority))
			return true
		}
	}
	return false
}

// waitQueued records why the run waits and hands its job back for delay.
func (r *run) waitQueued(st events.RunState, exists bool, digest string, fair events.Fairness, reason string, delay time.Duration) {
	r.w.m.limits.keyWaits.WithLabelValues(r.w.keyLabel(fair.Key), reason).Inc()
	if st.QueueReason != reason || !exists {
		ctx, cancel := context.WithTimeout(r.hard, 5*time.Second)
		_, err := r.w.states.Upsert(ctx, r.id, func(s *events.RunState, exists bool) error {
			return markQueued(s, exists, digest, fair, reason)
		})
		cancel()
		if err != nil && !isDecision(err) {
			r.logger().Debug().Err(err).Msg("record why the run waits")
		}
	}
	r.logger().Debug().Str("queue_reason", reason).Dur("retry_in", delay).Msg("the run waits for a fleet-wide limit; handed back")
	r.end(retryAfter(delay))
}

// capDelay is how long a run whose key is at its cap waits before it is
// delivered again: higher priorities come back sooner, and a jitter keeps
// the waiting runs from coming back all at once.
func capDelay(base time.Duration, p events.Priority) time.Duration {
	d := base
	switch p {
	case events.PriorityHigh:
		d /= 2
	case events.PriorityLow:
		d *= 2
	}
	return d + rand.N(d/4+1)
}

func (r *run) setSlot(s *slot) {
	r.mu.Lock()
	r.slot = s
	r.mu.Unlock()
}

func (r *run) heldSlot() *slot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.slot
}

// releaseSlot frees the run's concurrency slot, if it holds one. A delete
// that fails leaves the slot to expire with its lease.
func (r *run) releaseSlot() {
	s := r.heldSlot()
	if s == nil {
		return
	}
	r.setSlot(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.w.limits.release(ctx, s); err != nil {
		r.logger().Debug().Err(err).Str("slot", s.key).Msg("free the concurrency slot; it expires with its lease")
	}
}

// releaseLimits gives back what gate took once the run leaves the worker:
// its slot, and the tokens its response used beyond the estimate.
func (r *run) releaseLimits() {
	if r.w.limits == nil {
		return
	}
	r.releaseSlot()
	r.settleSpend()
}
