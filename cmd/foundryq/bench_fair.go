package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
)

// The fair phase of foundryq bench (docs/scheduling.md): one fairness key
// floods the queue, another submits a run every 200ms; then high runs are
// submitted behind the flood. Each is measured twice on a stack of its own
// (embedded NATS, the emulator, one worker in process): with lanes and
// first in, first out (consumer.Config.FIFO).

// fairBench sizes the fair phase.
type fairBench struct {
	Flood       int           // runs of key A queued at once
	Concurrency int           // the worker's
	BRuns       int           // runs of key B, one every BEvery
	BEvery      time.Duration // 200ms
	Highs       int           // high runs submitted behind the flood
	Tokens      int           // tokens of each run, 20ms apart
}

func (c fairBench) withQuick(quick bool) fairBench {
	if c.Flood == 0 {
		c.Flood = 10000
		if quick {
			c.Flood = 1000
		}
	}
	if c.Concurrency == 0 {
		c.Concurrency = 64
		if quick {
			c.Concurrency = 16
		}
	}
	if c.BRuns == 0 {
		c.BRuns = 50
		if quick {
			c.BRuns = 20
		}
	}
	if c.BEvery == 0 {
		c.BEvery = 200 * time.Millisecond
	}
	if c.Highs == 0 {
		c.Highs = 10
	}
	if c.Tokens == 0 {
		c.Tokens = 5
	}
	return c
}

// fairResult is one mode's figures: queue waits (submit to run.started's
// start, as the run's state records it).
type fairResult struct {
	Mode         string        `json:"mode"`
	BWaitP50     time.Duration `json:"b_wait_p50_ns"`
	BWaitP99     time.Duration `json:"b_wait_p99_ns"`
	BWaitMax     time.Duration `json:"b_wait_max_ns"`
	HighWaitP50  time.Duration `json:"high_wait_p50_ns"`
	HighWaitMax  time.Duration `json:"high_wait_max_ns"`
	FloodStarted int           `json:"flood_started_before_last_high"` // of A's runs, when the last high started
	Queued       time.Duration `json:"flood_queued_ns"`                // from the flood's submit to its last request in its lane
}

// runFairBench runs the fair phase in both modes and prints the table.
func runFairBench(ctx context.Context, cfg fairBench, asJSON bool, table, progress io.Writer) error {
	var results []fairResult
	for _, fifo := range []bool{false, true} {
		r, err := fairMode(ctx, cfg, fifo, progress)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	tw := tabwriter.NewWriter(table, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "fair: %d runs of key A queued, concurrency %d, a run of key B every %s (%d), then %d high runs\n",
		cfg.Flood, cfg.Concurrency, cfg.BEvery, cfg.BRuns, cfg.Highs)
	fmt.Fprintf(tw, "mode\tA in lanes after\tB wait p50\tB wait p99\tB wait max\thigh wait p50\thigh wait max\tA started before the last high\n")
	for _, r := range results {
		queued := r.Queued.Round(time.Millisecond).String()
		if r.Mode == "fifo" {
			queued = "-" // no lanes: the runs stream is the queue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", r.Mode, queued, r.BWaitP50.Round(time.Millisecond), r.BWaitP99.Round(time.Millisecond),
			r.BWaitMax.Round(time.Millisecond), r.HighWaitP50.Round(time.Millisecond), r.HighWaitMax.Round(time.Millisecond), r.FloodStarted)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(table).Encode(results)
	}
	return nil
}

func fairMode(ctx context.Context, cfg fairBench, fifo bool, progress io.Writer) (fairResult, error) {
	mode := "lanes"
	if fifo {
		mode = "fifo"
	}
	res := fairResult{Mode: mode}
	s, err := devstack.Start(ctx, devstack.Config{
		Emulator: foundrytest.Config{APIKey: "bench"},
		Workers:  1,
		Worker:   consumer.Config{WorkerID: "fair-" + mode, Concurrency: cfg.Concurrency, FIFO: fifo},
	})
	if err != nil {
		return res, err
	}
	defer s.Close()
	req := func(id, key string, prio events.Priority) events.RunRequest {
		return events.RunRequest{RunID: id, Model: "bench", Input: json.RawMessage(`"hi"`), FairnessKey: key, Priority: prio,
			Metadata: map[string]string{foundrytest.KeyTokens: strconv.Itoa(cfg.Tokens), foundrytest.KeyTokenMS: "20"}}
	}
	fmt.Fprintf(progress, "fair (%s): queueing %d runs of key A\n", mode, cfg.Flood)
	floodStart := time.Now()
	if err := submitAll(ctx, s.Client, cfg.Flood, func(i int) events.RunRequest { return req("a-"+strconv.Itoa(i), "A", "") }); err != nil {
		return res, err
	}
	// Queued: wait until the intake is empty (with lanes: every run is in
	// its lane; first in, first out: taken or waiting in the runs stream).
	moved, err := waitIntake(ctx, s, fifo, 30*time.Minute)
	if err != nil {
		return res, err
	}
	res.Queued = moved.Sub(floodStart)
	sent := make(map[string]time.Time)
	tick := time.NewTicker(cfg.BEvery)
	var bs []string
	for i := range cfg.BRuns {
		select {
		case <-ctx.Done():
			tick.Stop()
			return res, ctx.Err()
		case <-tick.C:
		}
		id := "b-" + strconv.Itoa(i)
		sent[id] = time.Now()
		if _, err := s.Client.Submit(ctx, req(id, "B", "")); err != nil {
			tick.Stop()
			return res, err
		}
		bs = append(bs, id)
	}
	tick.Stop()
	var highs []string
	for i := range cfg.Highs {
		id := "h-" + strconv.Itoa(i)
		sent[id] = time.Now()
		if _, err := s.Client.Submit(ctx, req(id, "A", events.PriorityHigh)); err != nil {
			return res, err
		}
		highs = append(highs, id)
	}
	fmt.Fprintf(progress, "fair (%s): waiting for B's and the high runs to start\n", mode)
	started, err := waitStarted(ctx, s.Client, slices.Concat(bs, highs), 30*time.Minute)
	if err != nil {
		return res, err
	}
	waits := func(ids []string) []time.Duration {
		out := make([]time.Duration, len(ids))
		for i, id := range ids {
			out[i] = started[id].Sub(sent[id])
		}
		slices.Sort(out)
		return out
	}
	bw, hw := waits(bs), waits(highs)
	res.BWaitP50, res.BWaitP99, res.BWaitMax = quantile(bw, 0.50), quantile(bw, 0.99), bw[len(bw)-1]
	res.HighWaitP50, res.HighWaitMax = quantile(hw, 0.50), hw[len(hw)-1]
	lastHigh := started[highs[0]]
	for _, id := range highs {
		lastHigh = later(lastHigh, started[id])
	}
	for i := range cfg.Flood {
		st, _, err := s.Client.State(ctx, "a-"+strconv.Itoa(i))
		if err == nil && st.StartedAt != nil && st.StartedAt.Before(lastHigh) {
			res.FloodStarted++
		}
	}
	return res, nil
}

// waitIntake waits until the runs stream is empty (with lanes) and
// returns when; first in, first out the flood stays there, and it returns
// at once.
func waitIntake(ctx context.Context, s *devstack.Stack, fifo bool, limit time.Duration) (time.Time, error) {
	if fifo {
		return time.Now(), nil
	}
	js, err := jetstream.New(s.Conn)
	if err != nil {
		return time.Time{}, err
	}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		st, err := js.Stream(ctx, events.Names{}.RunsStream())
		if err != nil {
			return time.Time{}, err
		}
		if st.CachedInfo().State.Msgs == 0 {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return time.Time{}, fmt.Errorf("bench: fair: the intake still held requests after %s", limit)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// quantile is the q quantile of sorted d (nearest rank).
func quantile(d []time.Duration, q float64) time.Duration {
	i := int(float64(len(d))*q+0.5) - 1
	return d[max(0, min(i, len(d)-1))]
}

// submitAll submits n requests, 32 at a time.
func submitAll(ctx context.Context, c *events.Client, n int, req func(int) events.RunRequest) error {
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	next := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if _, err := c.Submit(ctx, req(i)); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// waitStarted polls the runs' states until each has started, and returns
// when each did.
func waitStarted(ctx context.Context, c *events.Client, ids []string, limit time.Duration) (map[string]time.Time, error) {
	out := make(map[string]time.Time)
	deadline := time.Now().Add(limit)
	for len(out) < len(ids) {
		for _, id := range ids {
			if _, ok := out[id]; ok {
				continue
			}
			st, _, err := c.State(ctx, id)
			if err == nil && st.StartedAt != nil {
				out[id] = *st.StartedAt
			} else if err != nil && !errors.Is(err, events.ErrStateNotFound) {
				return nil, err
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("bench: fair: %d of %d runs had not started after %s", len(ids)-len(out), len(ids), limit)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return out, nil
}
