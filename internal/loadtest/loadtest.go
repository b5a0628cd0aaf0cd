// Package loadtest measures foundryq end to end in one process: an embedded
// NATS server (file storage), the Foundry emulator and real workers. It is
// what `foundryq bench` runs and what BenchmarkCancel reports.
package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
)

// Config sets the load.
type Config struct {
	// Runs is the number of concurrent runs in each phase. Default 500.
	Runs int
	// Workers is the number of workers, each on its own NATS connection.
	// Default 2.
	Workers int
	// Tokens is the number of tokens of each run in the relay phase.
	// Default 50.
	Tokens int
	// TokenDelay is the pause between two tokens of a run in the relay
	// phase. Default 0.
	TokenDelay time.Duration
	// StreamTokenDelay is the pause between tokens of the runs that stream
	// while the cancel phase cancels them. Default 20ms (50 tokens/s each).
	StreamTokenDelay time.Duration
	// CancelSpread is the time over which the cancels of the cancel phase are
	// sent, evenly spaced in random order; 0 sends them all at once (with 64
	// in flight). Default 5s.
	CancelSpread time.Duration
	// EventInterval is the workers' consumer.Config.EventInterval (0: its
	// default).
	EventInterval time.Duration
	// Logger receives the workers' logs. Default: none.
	Logger *zerolog.Logger
}

func (c Config) withDefaults() Config {
	if c.Runs == 0 {
		c.Runs = 500
	}
	if c.Workers == 0 {
		c.Workers = 2
	}
	if c.Tokens == 0 {
		c.Tokens = 50
	}
	if c.StreamTokenDelay == 0 {
		c.StreamTokenDelay = 20 * time.Millisecond
	}
	if c.CancelSpread == 0 {
		c.CancelSpread = 5 * time.Second
	}
	if c.CancelSpread < 0 {
		c.CancelSpread = 0
	}
	if c.Logger == nil {
		nop := zerolog.Nop()
		c.Logger = &nop
	}
	return c
}

// Report is what a load test measured.
type Report struct {
	Config Config
	// Relay phase: Runs runs of Tokens tokens each, submitted at once.
	RelayElapsed  time.Duration // first submit to last run.completed
	RelayEvents   int           // run events stored
	RelayTokens   int           // tokens relayed
	FirstToken    Percentiles   // submit to first text.delta stored, per run
	CancelReply   Percentiles   // cancel request to its reply
	CancelToEvent Percentiles   // cancel request to run.cancelled stored
	// What the emulator saw after the cancel phase.
	UpstreamCancelled      int64
	TokensAfterCancel      int64
	ToolCallsAfterCancel   int64
	ResponsesNotCancelled  int
	CancelResultsUnwanted  int // replies other than "cancelling"
	CancelledEventsMissing int
}

// Percentiles of a latency sample.
type Percentiles struct {
	N                  int
	P50, P90, P99, Max time.Duration
}

func percentiles(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return Percentiles{N: len(ds), P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: ds[len(ds)-1]}
}

func (p Percentiles) String() string {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return fmt.Sprintf("p50 %7.1fms  p90 %7.1fms  p99 %7.1fms  max %7.1fms  (n=%d)", ms(p.P50), ms(p.P90), ms(p.P99), ms(p.Max), p.N)
}

// Run sets up the world, runs the relay phase and the cancel phase, and
// tears everything down.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg = cfg.withDefaults()
	rep := Report{Config: cfg}
	ns, err := natsembed.Start(natsembed.Config{})
	if err != nil {
		return rep, err
	}
	defer ns.Shutdown()
	emu := foundrytest.NewServer(foundrytest.Config{})
	defer emu.Close()
	up, err := foundry.New(foundry.Config{BaseURL: emu.BaseURL(), APIKey: "bench"})
	if err != nil {
		return rep, err
	}
	defer up.CloseIdleConnections()
	wctx, stop := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(wctx)
	var conns []*nats.Conn
	defer func() {
		stop()
		_ = g.Wait()
		for _, nc := range conns {
			nc.Close()
		}
	}()
	perWorker := (cfg.Runs+cfg.Workers-1)/cfg.Workers + 16
	for i := range cfg.Workers {
		nc, err := ns.Connect()
		if err != nil {
			return rep, err
		}
		conns = append(conns, nc)
		w, err := consumer.New(nc, up, consumer.Config{WorkerID: fmt.Sprintf("bench-%d", i+1), Concurrency: perWorker, EventInterval: cfg.EventInterval, Logger: cfg.Logger})
		if err != nil {
			return rep, err
		}
		g.Go(func() error { return w.Run(gctx) })
	}
	nc, err := ns.Connect()
	if err != nil {
		return rep, err
	}
	conns = append(conns, nc)
	c, err := events.NewClient(nc, events.ClientConfig{})
	if err != nil {
		return rep, err
	}
	// The workers provision too, concurrently; doing it here first means
	// the first submit cannot beat them to it.
	js, err := jetstream.New(nc)
	if err != nil {
		return rep, err
	}
	if _, err := consumer.Provision(ctx, js, c.Names(), consumer.ProvisionConfig{}); err != nil {
		return rep, err
	}
	obs, err := observe(nc)
	if err != nil {
		return rep, err
	}
	defer obs.close()

	// Relay phase.
	md := map[string]string{"emu_tokens": fmt.Sprint(cfg.Tokens), "emu_token_ms": fmt.Sprint(cfg.TokenDelay.Milliseconds())}
	start := time.Now()
	ids, submitted, err := submitMany(ctx, c, cfg.Runs, "relay", md)
	if err != nil {
		return rep, err
	}
	if err := obs.waitAll(ctx, ids, events.TypeRunCompleted, 3*time.Minute); err != nil {
		return rep, err
	}
	rep.RelayElapsed = time.Since(start)
	rep.RelayEvents = obs.count(ids)
	rep.RelayTokens = cfg.Runs * cfg.Tokens
	firsts := make([]time.Duration, 0, len(ids))
	for _, id := range ids {
		firsts = append(firsts, obs.at(id, events.TypeTextDelta).Sub(submitted[id]))
	}
	rep.FirstToken = percentiles(firsts)

	// Cancel phase: long runs streaming at StreamTokenDelay; once all have
	// started, cancel each.
	md = map[string]string{"emu_tokens": "1000000", "emu_token_ms": fmt.Sprint(cfg.StreamTokenDelay.Milliseconds())}
	ids, _, err = submitMany(ctx, c, cfg.Runs, "cancel", md)
	if err != nil {
		return rep, err
	}
	if err := obs.waitAll(ctx, ids, events.TypeTextDelta, 3*time.Minute); err != nil {
		return rep, err
	}
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	var mu sync.Mutex
	replies := make([]time.Duration, 0, len(ids))
	sent := make(map[string]time.Time, len(ids))
	var cg errgroup.Group
	if cfg.CancelSpread == 0 {
		cg.SetLimit(64)
	}
	gap := cfg.CancelSpread / time.Duration(len(ids))
	next := time.Now()
	for _, id := range ids {
		if gap > 0 {
			time.Sleep(time.Until(next))
			next = next.Add(gap)
		}
		cg.Go(func() error {
			t0 := time.Now()
			reply, err := c.Cancel(ctx, id, "bench")
			d := time.Since(t0)
			if err != nil {
				return fmt.Errorf("cancel %s: %w", id, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if reply.Result != events.CancelCancelling {
				rep.CancelResultsUnwanted++
			}
			replies = append(replies, d)
			sent[id] = t0
			return nil
		})
	}
	if err := cg.Wait(); err != nil {
		return rep, err
	}
	waitErr := obs.waitAll(ctx, ids, events.TypeRunCancelled, time.Minute)
	ends := make([]time.Duration, 0, len(ids))
	for _, id := range ids {
		at := obs.at(id, events.TypeRunCancelled)
		if at.IsZero() {
			rep.CancelledEventsMissing++
			continue
		}
		ends = append(ends, at.Sub(sent[id]))
	}
	rep.CancelReply = percentiles(replies)
	rep.CancelToEvent = percentiles(ends)
	time.Sleep(200 * time.Millisecond) // let a generation that ignored the cancel show itself
	st := emu.Stats()
	rep.UpstreamCancelled = st.ResponsesCancelled
	rep.TokensAfterCancel = st.TokensAfterCancel
	rep.ToolCallsAfterCancel = st.ToolCallsCompletedAfterCancel
	for _, id := range ids {
		for _, r := range emu.Records(id) {
			if r.Status != "cancelled" {
				rep.ResponsesNotCancelled++
			}
		}
	}
	return rep, waitErr
}

func submitMany(ctx context.Context, c *events.Client, n int, tag string, md map[string]string) ([]string, map[string]time.Time, error) {
	ids := make([]string, n)
	at := make(map[string]time.Time, n)
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(32)
	for i := range n {
		ids[i] = fmt.Sprintf("bench-%s-%d", tag, i)
		g.Go(func() error {
			t0 := time.Now()
			_, err := c.Submit(ctx, events.RunRequest{RunID: ids[i], Model: "bench", Input: json.RawMessage(`"benchmark"`), Metadata: md})
			mu.Lock()
			at[ids[i]] = t0
			mu.Unlock()
			return err
		})
	}
	return ids, at, g.Wait()
}

// observer records when each run's events arrive on core NATS.
type observer struct {
	sub    *nats.Subscription
	mu     sync.Mutex
	first  map[string]map[events.EventType]time.Time
	counts map[string]int
	wake   chan struct{}
}

func observe(nc *nats.Conn) (*observer, error) {
	o := &observer{first: map[string]map[events.EventType]time.Time{}, counts: map[string]int{}, wake: make(chan struct{}, 1)}
	// The run id and the event type come from the subject and a header: the
	// observer decodes no JSON, so that it costs the measured system little.
	sub, err := nc.Subscribe("foundryq.events.*", func(m *nats.Msg) {
		now := time.Now()
		runID := m.Subject[len("foundryq.events."):]
		typ := events.EventType(m.Header.Get(events.HeaderType))
		o.mu.Lock()
		if o.first[runID] == nil {
			o.first[runID] = map[events.EventType]time.Time{}
		}
		if _, ok := o.first[runID][typ]; !ok {
			o.first[runID][typ] = now
		}
		o.counts[runID]++
		o.mu.Unlock()
		select {
		case o.wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, err
	}
	o.sub = sub
	return o, nil
}

func (o *observer) close() { _ = o.sub.Unsubscribe() }

func (o *observer) at(id string, t events.EventType) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.first[id][t]
}

func (o *observer) count(ids []string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, id := range ids {
		n += o.counts[id]
	}
	return n
}

func (o *observer) waitAll(ctx context.Context, ids []string, t events.EventType, limit time.Duration) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		missing := 0
		o.mu.Lock()
		for _, id := range ids {
			if _, ok := o.first[id][t]; !ok {
				missing++
			}
		}
		o.mu.Unlock()
		if missing == 0 {
			return nil
		}
		select {
		case <-o.wake:
		case <-time.After(100 * time.Millisecond):
		case <-deadline.C:
			return fmt.Errorf("loadtest: %d of %d runs had no %s after %s", missing, len(ids), t, limit)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
