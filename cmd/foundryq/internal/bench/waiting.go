package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
)

// askingTool is an MCP tool with require_approval left at its default
// ("always"): the emulator's response stops on an approval request and the
// run waits for its caller's answer.
const askingTool = `{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp","allowed_tools":["lookup"]}`

// waitingInFlight is how many runs that ask the waiting phase has
// submitted and not yet seen waiting: runs come to wait a few at a time,
// as people's runs do, not in one burst. A burst of N runs streams N
// responses at once, and the HTTP transport keeps up to 512 of their
// connections idle for 90 s (two goroutines and their buffers each):
// megabytes that belong to the burst, not to the waiting, and that would
// be gone before anyone answers.
const waitingInFlight = 16

// waitingWarmup is how many runs that ask the worker serves (and sees
// cancelled) before the floor is measured: one-time costs (lazily made
// pools and caches, metric series, the transport's few connections) are
// not the cost of waiting runs.
const waitingWarmup = 200

// waiting measures what runs that ask cost the worker while they wait: on
// a fresh worker, warmed up, the RSS, heap in use and goroutines after
// forced GCs (the floor); then WaitingRuns runs that ask, and once every
// one is recorded waiting and the worker owns none, the same again. Last,
// the runs are cancelled (which calls no one: their responses have ended)
// and the same measured once more (after_cancel), for scale.
func (b *bench) waiting(ctx context.Context) error {
	c := b.cfg
	wr := &b.rep.Waiting
	*wr = WaitingReport{Runs: c.WaitingRuns, Target: TargetWaitingPerRun}
	if err := b.sys.startWorker(ctx, c.EventInterval); err != nil {
		return err
	}
	md := map[string]string{foundrytest.KeyToolMS: "100", foundrytest.KeyTokens: "4"}
	b.progress("waiting: warming the worker up with %d runs that ask, then cancelled", waitingWarmup)
	warm, err := b.submitAsking(ctx, b.prefix("waitwarm"), waitingWarmup, md)
	if err != nil {
		return err
	}
	if err := b.untilWaiting(ctx, warm, waitingWarmup); err != nil {
		return err
	}
	if err := b.cancelAll(ctx, warm); err != nil {
		return err
	}
	if err := b.untilIdle(ctx); err != nil {
		return err
	}
	before, err := b.settledUsage(ctx)
	if err != nil {
		return err
	}
	b.progress("waiting: %d runs that ask for approval, %d at a time until each waits", c.WaitingRuns, waitingInFlight)
	ids, err := b.submitAsking(ctx, b.prefix("wait"), c.WaitingRuns, md)
	if err != nil {
		return err
	}
	if err := b.untilWaiting(ctx, ids, waitingWarmup+c.WaitingRuns); err != nil {
		return err
	}
	if err := b.allWaiting(ctx, ids); err != nil {
		return err
	}
	during, err := b.settledUsage(ctx)
	if err != nil {
		return err
	}
	if c.ProfileDir != "" {
		b.profile(ctx, "heap", fmt.Sprintf("worker-heap-waiting-%d.pprof", c.WaitingRuns))
		b.profile(ctx, "goroutine", fmt.Sprintf("worker-goroutine-waiting-%d.pprof", c.WaitingRuns))
	}
	b.progress("waiting: cancelling the %d waiting runs", c.WaitingRuns)
	if err := b.cancelAll(ctx, ids); err != nil {
		return err
	}
	if err := b.untilIdle(ctx); err != nil {
		return err
	}
	after, err := b.settledUsage(ctx)
	if err != nil {
		return err
	}
	wr.Before, wr.Waiting, wr.AfterCancel = before, during, after
	n := float64(c.WaitingRuns)
	wr.RSSGrowthBytes = during.RSSBytes - before.RSSBytes
	wr.HeapGrowthBytes = during.HeapInuseBytes - before.HeapInuseBytes
	wr.GoroutineGrowth = during.Goroutines - before.Goroutines
	wr.RSSPerRun = float64(wr.RSSGrowthBytes) / 1024 / n
	wr.HeapPerRun = float64(wr.HeapGrowthBytes) / 1024 / n
	wr.GoroutinesPerRun = float64(wr.GoroutineGrowth) / n
	wr.Met = wr.RSSPerRun <= TargetWaitingPerRun && wr.HeapPerRun <= TargetWaitingPerRun
	b.progress("waiting: %d waiting runs add RSS %.2f MiB (%.2f KiB/run), heap in use %.2f MiB (%.2f KiB/run), %d goroutines; after cancelling them RSS %+.2f MiB, heap %+.2f MiB, %+d goroutines over the floor",
		c.WaitingRuns, mib(wr.RSSGrowthBytes), wr.RSSPerRun, mib(wr.HeapGrowthBytes), wr.HeapPerRun, wr.GoroutineGrowth,
		mib(after.RSSBytes-before.RSSBytes), mib(after.HeapInuseBytes-before.HeapInuseBytes), after.Goroutines-before.Goroutines)
	return nil
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// submitAsking submits n runs that ask, named prefix-0 ..., each once
// fewer than waitingInFlight of those before it have not yet asked.
func (b *bench) submitAsking(ctx context.Context, prefix string, n int, md map[string]string) ([]string, error) {
	ids := make([]string, n)
	var g errgroup.Group
	g.SetLimit(waitingInFlight)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		g.Go(func() error {
			_, err := b.sys.client.Submit(ctx, events.RunRequest{RunID: ids[i], Model: "bench", Input: json.RawMessage(`"benchmark"`),
				Metadata: md, Tools: []json.RawMessage{json.RawMessage(askingTool)}})
			if err != nil {
				return err
			}
			return b.sys.watch.waitAll(ctx, ids[i:i+1], events.TypeInputRequired, 2*time.Minute)
		})
	}
	return ids, g.Wait()
}

// untilWaiting waits for every run of ids to publish input.required, and
// for the worker to have paused paused runs in all and to own none: each
// run's goroutine has ended and its job is acked.
func (b *bench) untilWaiting(ctx context.Context, ids []string, paused int) error {
	if err := b.sys.watch.waitAll(ctx, ids, events.TypeInputRequired, 5*time.Minute); err != nil {
		return err
	}
	return b.untilMetrics(ctx, func(m map[string]float64) bool {
		return m["foundryq_runs_paused_total"] >= float64(paused) && m["foundryq_runs_active"] == 0
	})
}

// untilIdle waits until the worker owns no run.
func (b *bench) untilIdle(ctx context.Context) error {
	return b.untilMetrics(ctx, func(m map[string]float64) bool { return m["foundryq_runs_active"] == 0 })
}

// untilMetrics polls the worker's /metrics until ok holds, for at most a
// minute.
func (b *bench) untilMetrics(ctx context.Context, ok func(map[string]float64) bool) error {
	deadline := time.Now().Add(time.Minute)
	for {
		m, err := readMetrics(ctx, b.sys.hc, b.sys.metrics)
		if err != nil {
			return err
		}
		if ok(m) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("worker metrics not as awaited after a minute: runs_active %v, runs_paused_total %v",
				m["foundryq_runs_active"], m["foundryq_runs_paused_total"])
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// allWaiting checks that every run of ids is recorded waiting, owned by
// no worker.
func (b *bench) allWaiting(ctx context.Context, ids []string) error {
	var g errgroup.Group
	g.SetLimit(64)
	for _, id := range ids {
		g.Go(func() error {
			st, _, err := b.sys.client.State(ctx, id)
			if err != nil {
				return fmt.Errorf("state of %s: %w", id, err)
			}
			if st.Status != events.StatusWaiting || st.Owner != "" {
				return fmt.Errorf("run %s is %s (owner %q), not waiting", id, st.Status, st.Owner)
			}
			return nil
		})
	}
	return g.Wait()
}

// settledUsage reads the worker's RSS, heap in use and goroutines after
// forced GCs: the worker's pprof heap endpoint with gc=1 runs runtime.GC
// before it writes the profile. Two in a row, as sync.Pool's contents
// survive one GC (its victim cache). The GC frees the garbage, but the
// pages it frees go back to the OS only as the runtime's background
// scavenger returns them: RSS is read again, a GC before each reading,
// every half second until it moves by less than 256 KiB (at most 20
// times).
func (b *bench) settledUsage(ctx context.Context) (WorkerUsage, error) {
	base := b.sys.metrics[:len(b.sys.metrics)-len("/metrics")]
	var last WorkerUsage
	for i := range 20 {
		for range 2 {
			if _, err := httpGet(ctx, b.sys.hc, base+"/debug/pprof/heap?gc=1"); err != nil {
				return WorkerUsage{}, fmt.Errorf("force a GC in the worker: %w", err)
			}
		}
		gs, err := readGoStats(ctx, b.sys.hc, b.sys.metrics)
		if err != nil {
			return WorkerUsage{}, err
		}
		u, err := b.sys.worker.usage()
		if err != nil {
			return WorkerUsage{}, err
		}
		now := WorkerUsage{RSSBytes: u.RSS, HeapInuseBytes: gs.HeapInuse, StackInuseBytes: gs.StackInuse, Goroutines: gs.Goroutines}
		if i > 0 && abs(now.RSSBytes-last.RSSBytes) < 256<<10 {
			return now, nil
		}
		last = now
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return WorkerUsage{}, ctx.Err()
		}
	}
	return last, nil
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// readMetrics reads the samples without labels of a /metrics page.
func readMetrics(ctx context.Context, hc *http.Client, url string) (map[string]float64, error) {
	body, err := httpGet(ctx, hc, url)
	if err != nil {
		return nil, err
	}
	return parseMetrics(body)
}

// parseMetrics parses the samples without labels of a Prometheus text
// page: "name value" lines; comments and labelled samples are skipped.
func parseMetrics(body []byte) (map[string]float64, error) {
	out := map[string]float64{}
	for line := range strings.Lines(string(body)) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.Contains(name, "{") {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return nil, fmt.Errorf("metrics %s: %w", name, err)
		}
		out[name] = f
	}
	if len(out) == 0 {
		return nil, errors.New("metrics: no samples")
	}
	return out, nil
}
