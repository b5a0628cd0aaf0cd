package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
)

// The scale phase runs foundryq past one worker: a three-node JetStream
// cluster in the bench's own process (file storage, streams and bucket
// with replicas 3), ScaleWorkers worker processes connected to all three
// nodes, and at each of ScaleRuns as many runs streaming slowly (a token
// every ScaleTokenDelay), to show that a run costs the workers as much at
// the largest load as at the smallest: per-run memory and CPU per token
// flat.

// TargetScaleRatio: per-run RSS and worker CPU per token at the largest
// load of the scale phase at most this many times the smallest load's.
const TargetScaleRatio = 1.1

// scaleReplicas is the replicas of the scale phase's streams and bucket.
const scaleReplicas = 3

// ScaleReport: the workers' cost per run at each load of the scale phase.
type ScaleReport struct {
	Nodes        int          `json:"nodes"`
	Workers      int          `json:"workers"`
	Replicas     int          `json:"replicas"`
	TokenDelayMS float64      `json:"token_delay_ms"`
	WindowS      float64      `json:"window_s"`
	Points       []ScalePoint `json:"points"`
	// RSSRatio and CPURatio: the largest load's RSSPerRun and
	// WorkerCPUPerToken over the smallest load's.
	RSSRatio float64  `json:"rss_ratio"`
	CPURatio float64  `json:"cpu_ratio"`
	Target   float64  `json:"target_max_ratio"`
	Targets  []Target `json:"targets"`
	Met      bool     `json:"met"`
}

// ScalePoint is one load of the scale phase: figures summed over the
// workers, per-run ones the growth over the idle workers divided by Runs.
type ScalePoint struct {
	Runs int `json:"runs"`
	// RunsPerWorker: the runs each worker started (run.started events
	// naming it), in the workers' order.
	RunsPerWorker    []int   `json:"runs_per_worker"`
	IdleRSSBytes     int64   `json:"idle_rss_bytes"`
	RSSBytes         int64   `json:"rss_bytes"`
	RSSPerRun        float64 `json:"rss_kib_per_run"`
	HeapPerRun       float64 `json:"heap_kib_per_run"`
	GoroutinesPerRun float64 `json:"goroutines_per_run"`
	// Tokens: text.delta events stored over the window (one token each at
	// this pace); WorkerCPUPerToken: the workers' CPU µs over the window
	// per token, their idle use (WorkerIdleCores, measured over a token
	// period before the runs came, a token period after the workers were
	// ready) taken out, so that what a load costs does not shrink with the
	// load only because the idle workers' timers are shared by more
	// tokens; at tiny loads the idle use's noise can make it negative.
	// WorkerCPUPerTokenGross leaves the idle use in.
	Tokens                 int     `json:"tokens"`
	WorkerIdleCores        float64 `json:"worker_idle_cores"`
	WorkerCPUPerToken      float64 `json:"worker_cpu_us_per_token"`
	WorkerCPUPerTokenGross float64 `json:"worker_cpu_us_per_token_gross"`
	// ClusterCPUPerToken: the bench's own process's CPU µs per token over
	// the window: the three NATS nodes, with the bench's client and the
	// watcher that follows every run.
	ClusterCPUPerToken float64 `json:"cluster_cpu_us_per_token"`
	// Start: from a run's submit to its run.started received.
	Start Percentiles `json:"start"`
	// LostOwnership: runs the workers abandoned because another worker
	// wrote their events (foundryq_runs_lost_ownership_total, summed).
	LostOwnership int `json:"lost_ownership"`
}

// finish sets the ratios, the targets and the verdict.
func (sr *ScaleReport) finish() {
	sr.Target = TargetScaleRatio
	sr.Targets = nil
	sr.RSSRatio, sr.CPURatio = 0, 0
	if len(sr.Points) >= 2 {
		lo, hi := sr.Points[0], sr.Points[0]
		for _, pt := range sr.Points {
			if pt.Runs < lo.Runs {
				lo = pt
			}
			if pt.Runs > hi.Runs {
				hi = pt
			}
		}
		// A figure that is not positive (the noise of a tiny load) makes
		// no ratio.
		if lo.RSSPerRun > 0 && lo.WorkerCPUPerToken > 0 && hi.RSSPerRun > 0 && hi.WorkerCPUPerToken > 0 && hi.Runs > lo.Runs {
			sr.RSSRatio = round2(hi.RSSPerRun / lo.RSSPerRun)
			sr.CPURatio = round2(hi.WorkerCPUPerToken / lo.WorkerCPUPerToken)
			at := fmt.Sprintf("at %d runs over at %d runs", hi.Runs, lo.Runs)
			sr.Targets = append(sr.Targets,
				newTarget("worker RSS per streaming run "+at, sr.RSSRatio, TargetScaleRatio, "x"),
				newTarget("worker CPU per token "+at, sr.CPURatio, TargetScaleRatio, "x"))
		}
	}
	for _, pt := range sr.Points {
		sr.Targets = append(sr.Targets, newTarget(fmt.Sprintf("runs that lost their ownership at %d runs", pt.Runs), float64(pt.LostOwnership), 0, "runs"))
	}
	// One load shows nothing about scale: not met.
	sr.Met = allMet(sr.Targets) && sr.RSSRatio > 0
}

// scaleSystem is the cluster, the bench's connection to it and the workers.
type scaleSystem struct {
	cluster *natsembed.Cluster
	client  *events.Client
	watch   *watcher
	workers []*process
	metrics []string // each worker's /metrics URL
	ids     []string // each worker's --worker-id
}

// close stops the workers, then the cluster.
func (ss *scaleSystem) close() error {
	errs := []error{ss.stopWorkers()}
	if ss.watch != nil {
		ss.watch.close()
	}
	ss.cluster.Shutdown()
	return errors.Join(errs...)
}

func (ss *scaleSystem) stopWorkers() error {
	var errs []error
	for _, w := range ss.workers {
		errs = append(errs, w.stop(30*time.Second))
	}
	ss.workers, ss.metrics, ss.ids = nil, nil, nil
	return errors.Join(errs...)
}

// scale runs the scale phase.
func (b *bench) scale(ctx context.Context) (err error) {
	c := b.cfg
	sr := &ScaleReport{Nodes: 3, Workers: c.ScaleWorkers, Replicas: scaleReplicas, TokenDelayMS: ms(c.ScaleTokenDelay), WindowS: c.ScaleWindow.Seconds()}
	b.rep.Scale = sr
	defer sr.finish()
	b.progress("scale: starting a three-node NATS cluster in this process (file storage, replicas %d)", scaleReplicas)
	cl, err := natsembed.StartCluster(natsembed.ClusterConfig{Name: "foundryq-bench", StoreDir: b.sys.dir + "/scale-cluster", ReadyTimeout: time.Minute})
	if err != nil {
		return err
	}
	ss := &scaleSystem{cluster: cl}
	defer func() {
		if cerr := ss.close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	nc, err := cl.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	if ss.client, err = events.NewClient(nc, events.ClientConfig{}); err != nil {
		return err
	}
	if ss.watch, err = watch(nc, b.sys.names); err != nil {
		return err
	}
	for _, n := range c.ScaleRuns {
		pt, err := b.scaleAt(ctx, ss, n)
		if err != nil {
			return err
		}
		sr.Points = append(sr.Points, pt)
	}
	return nil
}

// scaleAt measures one load: fresh workers, n runs spread over them.
func (b *bench) scaleAt(ctx context.Context, ss *scaleSystem, n int) (ScalePoint, error) {
	c := b.cfg
	pt := ScalePoint{Runs: n}
	if err := ss.stopWorkers(); err != nil {
		return pt, err
	}
	// Room for a third more than an even share: the workers' pulls decide
	// who takes which run.
	per := n/c.ScaleWorkers + n/(3*c.ScaleWorkers) + 16
	b.progress("scale: %d workers (concurrency %d each, replicas %d) for %d runs streaming a token every %s", c.ScaleWorkers, per, scaleReplicas, n, c.ScaleTokenDelay)
	for i := range c.ScaleWorkers {
		// One after the other: the first provisions the streams and the
		// bucket with replicas 3, the others find them. The fleet may run
		// all its slots at once (past 10,000 runs the default would queue
		// the rest).
		id := fmt.Sprintf("scale-%d", i+1)
		w, metrics, err := b.sys.startWorkerProcess(ctx, "worker "+id, workerOptions{natsURL: ss.cluster.ClientURLs(), id: id,
			concurrency: per, interval: c.EventInterval, transport: c.transport(), replicas: scaleReplicas, maxAckPending: per * c.ScaleWorkers})
		if err != nil {
			return pt, err
		}
		ss.workers, ss.metrics, ss.ids = append(ss.workers, w), append(ss.metrics, metrics), append(ss.ids, id)
	}
	// A token period for the workers' start-up to settle, then one
	// measured: their idle use.
	select {
	case <-time.After(c.ScaleTokenDelay): // their start-up's CPU is not idle use
	case <-ctx.Done():
		return pt, ctx.Err()
	}
	// Each /metrics scrape costs a worker CPU: the scrapes come before a
	// window's first CPU reading or after its last.
	idleGo, err := b.scaleGoStats(ctx, ss)
	if err != nil {
		return pt, err
	}
	idle, err := ss.usage()
	if err != nil {
		return pt, err
	}
	pt.IdleRSSBytes = idle.RSS
	idleFrom := time.Now()
	select {
	case <-time.After(c.ScaleTokenDelay): // the span measured, not a wait for a condition
	case <-ctx.Done():
		return pt, ctx.Err()
	}
	idleEnd, err := ss.usage()
	if err != nil {
		return pt, err
	}
	pt.WorkerIdleCores = (idleEnd.CPU - idle.CPU).Seconds() / time.Since(idleFrom).Seconds()

	prefix := b.prefix("scale")
	ids, asked, err := submitTimed(ctx, ss.client, prefix, n, streamMD(foundrytest.MaxScenarioTokens, c.ScaleTokenDelay))
	if err != nil {
		return pt, err
	}
	limit := max(5*time.Minute, time.Duration(n)*20*time.Millisecond)
	if err := ss.watch.waitAll(ctx, ids, events.TypeTextDelta, limit); err != nil {
		return pt, err
	}
	var starts []time.Duration
	for _, id := range ids {
		if at := ss.watch.at(id, events.TypeRunStarted); !at.IsZero() {
			starts = append(starts, at.Sub(asked[id]))
		}
	}
	pt.Start = percentiles(starts)
	// A token period more: every run is past its start-up.
	select {
	case <-time.After(c.ScaleTokenDelay):
	case <-ctx.Done():
		return pt, ctx.Err()
	}
	u0, err := ss.usage()
	if err != nil {
		return pt, err
	}
	self0, t0 := selfCPU(), time.Now()
	select {
	case <-time.After(c.ScaleWindow): // the span measured, not a wait for a condition
	case <-ctx.Done():
		return pt, ctx.Err()
	}
	u1, err := ss.usage()
	if err != nil {
		return pt, err
	}
	self1, t1 := selfCPU(), time.Now()
	gs, err := b.scaleGoStats(ctx, ss)
	if err != nil {
		return pt, err
	}
	for _, id := range ids {
		for _, rc := range ss.watch.receipts(id) {
			if rc.At >= t0.UnixNano() && rc.At < t1.UnixNano() {
				pt.Tokens++
			}
		}
	}
	pt.RSSBytes = u1.RSS
	pt.RSSPerRun = float64(u1.RSS-idle.RSS) / 1024 / float64(n)
	pt.HeapPerRun = float64(gs.HeapInuse-idleGo.HeapInuse) / 1024 / float64(n)
	pt.GoroutinesPerRun = float64(gs.Goroutines-idleGo.Goroutines) / float64(n)
	if pt.Tokens > 0 {
		pt.WorkerCPUPerTokenGross = us(u1.CPU-u0.CPU) / float64(pt.Tokens)
		pt.WorkerCPUPerToken = us(u1.CPU-u0.CPU-idleCPU(pt.WorkerIdleCores, t1.Sub(t0))) / float64(pt.Tokens)
		pt.ClusterCPUPerToken = us(self1-self0) / float64(pt.Tokens)
	}
	pt.RunsPerWorker = runsPerWorker(ss, ids)
	if c.ProfileDir != "" {
		// After the measured window: a profile costs the worker CPU.
		b.scaleProfiles(ctx, ss, n)
	}
	b.progress("scale: %d runs (per worker %v): RSS %.1f KiB/run, heap %.1f KiB/run, %.2f goroutines/run; worker CPU %.1f µs/token over %d tokens (idle %.3f cores out); cluster %.1f µs/token; start p50 %.0f ms p99 %.0f ms",
		n, pt.RunsPerWorker, pt.RSSPerRun, pt.HeapPerRun, pt.GoroutinesPerRun, pt.WorkerCPUPerToken, pt.Tokens, pt.WorkerIdleCores, pt.ClusterCPUPerToken, pt.Start.P50, pt.Start.P99)
	b.progress("scale: cancelling the %d runs", n)
	if err := cancelEach(ctx, ss.client, ss.watch, ids, limit); err != nil {
		return pt, err
	}
	for _, m := range ss.metrics {
		ms, err := readMetrics(ctx, b.sys.hc, m)
		if err != nil {
			return pt, err
		}
		pt.LostOwnership += int(ms["foundryq_runs_lost_ownership_total"])
	}
	return pt, nil
}

// scaleProfiles saves each worker's CPU profile over a window as long as
// the measured one, all at once.
func (b *bench) scaleProfiles(ctx context.Context, ss *scaleSystem, n int) {
	var g sync.WaitGroup
	secs := strconv.Itoa(max(1, int(b.cfg.ScaleWindow.Seconds())))
	for i, m := range ss.metrics {
		g.Go(func() {
			b.profileOf(ctx, strings.TrimSuffix(m, "/metrics"), "profile?seconds="+secs, fmt.Sprintf("worker-scale-%d-%s-cpu.pprof", n, ss.ids[i]))
		})
	}
	g.Wait()
}

// usage sums the workers' CPU and RSS.
func (ss *scaleSystem) usage() (ProcUsage, error) {
	var u ProcUsage
	for _, w := range ss.workers {
		wu, err := w.usage()
		if err != nil {
			return u, err
		}
		u.CPU += wu.CPU
		u.RSS += wu.RSS
	}
	return u, nil
}

// scaleGoStats sums the workers' heap, stacks and goroutines.
func (b *bench) scaleGoStats(ctx context.Context, ss *scaleSystem) (GoStats, error) {
	var g GoStats
	for _, m := range ss.metrics {
		gs, err := readGoStats(ctx, b.sys.hc, m)
		if err != nil {
			return g, err
		}
		g.HeapInuse += gs.HeapInuse
		g.StackInuse += gs.StackInuse
		g.Goroutines += gs.Goroutines
	}
	return g, nil
}

// runsPerWorker counts the runs of ids each worker started, from their
// run.started events.
func runsPerWorker(ss *scaleSystem, ids []string) []int {
	counts := make([]int, len(ss.ids))
	for _, id := range ids {
		if i := slices.Index(ss.ids, ss.watch.startedBy(id)); i >= 0 {
			counts[i]++
		}
	}
	return counts
}

// submitTimed submits n runs named prefix-0 ... through client, 32 at a
// time, and notes when each submit began.
func submitTimed(ctx context.Context, client *events.Client, prefix string, n int, md map[string]string) ([]string, map[string]time.Time, error) {
	ids := make([]string, n)
	asked := make(map[string]time.Time, n)
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(32)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		g.Go(func() error {
			t0 := time.Now()
			_, err := client.Submit(ctx, events.RunRequest{RunID: ids[i], Model: "bench", Input: json.RawMessage(`"benchmark"`), Metadata: md})
			mu.Lock()
			asked[ids[i]] = t0
			mu.Unlock()
			return err
		})
	}
	return ids, asked, g.Wait()
}

// cancelEach cancels ids through client, 64 at a time, and waits for
// their run.cancelled for at most limit.
func cancelEach(ctx context.Context, client *events.Client, w *watcher, ids []string, limit time.Duration) error {
	var g errgroup.Group
	g.SetLimit(64)
	for _, id := range ids {
		g.Go(func() error {
			_, err := client.Cancel(ctx, id, "bench")
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return w.waitAll(ctx, ids, events.TypeRunCancelled, limit)
}
