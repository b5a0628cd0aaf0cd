package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("bench", "bench [flags]")
	runs := f.Int("runs", "", 500, "concurrent runs")
	workers := f.Int("workers", "", 2, "in-process workers")
	tokens := f.Int("tokens", "", 20, "tokens per run in the relay phase")
	tokenMS := f.Int("token-ms", "", 0, "delay between tokens in the relay phase")
	cancelAfter := f.Duration("cancel-after", "", 500*time.Millisecond, "cancel phase: time between a run's start and its cancel")
	lf := addLogFlags(f, "console")
	*lf.level = "error"
	if err := f.parse(args, stdout); err != nil {
		return err
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return err
	}
	if *runs < 1 || *workers < 1 {
		return usageError{fmt.Errorf("bench: --runs and --workers must be at least 1")}
	}
	ns, err := natsembed.Start(natsembed.Config{})
	if err != nil {
		return err
	}
	defer ns.Shutdown()
	emu := foundrytest.NewServer(foundrytest.Config{})
	defer emu.Close()
	up, err := foundry.New(foundry.Config{BaseURL: emu.BaseURL(), APIKey: "bench"})
	if err != nil {
		return err
	}
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
	concurrency := (*runs + *workers - 1) / *workers
	for i := range *workers {
		nc, err := ns.Connect()
		if err != nil {
			return err
		}
		conns = append(conns, nc)
		w, err := consumer.New(nc, up, consumer.Config{WorkerID: fmt.Sprintf("bench-%d", i+1), Concurrency: concurrency + 8, Logger: &log})
		if err != nil {
			return err
		}
		g.Go(func() error { return w.Run(gctx) })
	}
	nc, err := ns.Connect()
	if err != nil {
		return err
	}
	conns = append(conns, nc)
	c, err := events.NewClient(nc, events.ClientConfig{})
	if err != nil {
		return err
	}
	obs, err := newObserver(nc)
	if err != nil {
		return err
	}
	defer obs.close()

	fmt.Fprintf(stdout, "foundryq bench: %d concurrent runs, %d workers (embedded NATS, file storage; Foundry emulator in process)\n", *runs, *workers)

	// Phase 1: relay. Every run streams tokens; measure submit to terminal.
	md := map[string]string{"emu_tokens": fmt.Sprint(*tokens), "emu_token_ms": fmt.Sprint(*tokenMS)}
	ids, err := submitMany(ctx, c, *runs, "relay", md)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := obs.waitAll(ctx, ids, events.TypeRunCompleted, 2*time.Minute); err != nil {
		return err
	}
	elapsed := time.Since(start)
	fmt.Fprintf(stdout, "relay:  %d runs x %d tokens completed in %s; %d events stored (%.0f events/s), %d tokens relayed (%.0f tokens/s)\n",
		*runs, *tokens, elapsed.Round(time.Millisecond), obs.count(ids), float64(obs.count(ids))/elapsed.Seconds(),
		*runs**tokens, float64(*runs**tokens)/elapsed.Seconds())

	// Phase 2: cancel. Long runs; once all have started, cancel each and
	// measure the reply and the time until run.cancelled is stored.
	md = map[string]string{"emu_tokens": "100000", "emu_token_ms": "20"}
	ids, err = submitMany(ctx, c, *runs, "cancel", md)
	if err != nil {
		return err
	}
	if err := obs.waitAll(ctx, ids, events.TypeRunStarted, 2*time.Minute); err != nil {
		return err
	}
	time.Sleep(*cancelAfter)
	var mu sync.Mutex
	replies := make([]time.Duration, 0, len(ids))
	sent := make(map[string]time.Time, len(ids))
	var cg errgroup.Group
	cg.SetLimit(64)
	for _, id := range ids {
		cg.Go(func() error {
			t0 := time.Now()
			reply, err := c.Cancel(ctx, id, "bench")
			d := time.Since(t0)
			if err != nil {
				return fmt.Errorf("cancel %s: %w", id, err)
			}
			if reply.Result != events.CancelCancelling {
				return fmt.Errorf("cancel %s: result %s, want cancelling", id, reply.Result)
			}
			mu.Lock()
			replies = append(replies, d)
			sent[id] = t0
			mu.Unlock()
			return nil
		})
	}
	if err := cg.Wait(); err != nil {
		return err
	}
	if err := obs.waitAll(ctx, ids, events.TypeRunCancelled, time.Minute); err != nil {
		return err
	}
	ends := make([]time.Duration, 0, len(ids))
	for _, id := range ids {
		ends = append(ends, obs.at(id, events.TypeRunCancelled).Sub(sent[id]))
	}
	fmt.Fprintf(stdout, "cancel: reply latency             %s\n", percentiles(replies))
	fmt.Fprintf(stdout, "cancel: cancel -> run.cancelled   %s\n", percentiles(ends))
	time.Sleep(200 * time.Millisecond)
	st := emu.Stats()
	fmt.Fprintf(stdout, "emulator: %d responses cancelled, %d tokens generated after a cancel, %d tool calls completed after a cancel\n",
		st.ResponsesCancelled, st.TokensAfterCancel, st.ToolCallsCompletedAfterCancel)
	return nil
}

func submitMany(ctx context.Context, c *events.Client, n int, tag string, md map[string]string) ([]string, error) {
	ids := make([]string, n)
	var g errgroup.Group
	g.SetLimit(32)
	for i := range n {
		ids[i] = fmt.Sprintf("bench-%s-%d-%d", tag, time.Now().UnixNano()%1e6, i)
		g.Go(func() error {
			_, err := c.Submit(ctx, events.RunRequest{RunID: ids[i], Model: "bench", Input: json.RawMessage(`"benchmark"`), Metadata: md})
			return err
		})
	}
	return ids, g.Wait()
}

func percentiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	slices.Sort(ds)
	p := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return fmt.Sprintf("p50 %6.1fms  p90 %6.1fms  p99 %6.1fms  max %6.1fms  (n=%d)",
		ms(p(0.50)), ms(p(0.90)), ms(p(0.99)), ms(ds[len(ds)-1]), len(ds))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// observer records when each run's events arrive on core NATS.
type observer struct {
	sub    *nats.Subscription
	mu     sync.Mutex
	first  map[string]map[events.EventType]time.Time
	counts map[string]int
	wake   chan struct{}
}

func newObserver(nc *nats.Conn) (*observer, error) {
	o := &observer{first: map[string]map[events.EventType]time.Time{}, counts: map[string]int{}, wake: make(chan struct{}, 1)}
	sub, err := nc.Subscribe("foundryq.events.*", func(m *nats.Msg) {
		now := time.Now()
		var ev events.RunEvent
		if json.Unmarshal(m.Data, &ev) != nil {
			return
		}
		o.mu.Lock()
		if o.first[ev.RunID] == nil {
			o.first[ev.RunID] = map[events.EventType]time.Time{}
		}
		if _, ok := o.first[ev.RunID][ev.Type]; !ok {
			o.first[ev.RunID][ev.Type] = now
		}
		o.counts[ev.RunID]++
		o.mu.Unlock()
		select {
		case o.wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	_ = sub.SetPendingLimits(-1, -1)
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
	deadline := time.After(limit)
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
		case <-deadline:
			return fmt.Errorf("bench: %d of %d runs had no %s after %s", missing, len(ids), t, limit)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
