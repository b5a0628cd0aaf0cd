package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
)

// memory measures the worker's RSS, heap and goroutines per concurrent
// streaming run at each of MemoryRuns: the growth over the idle worker,
// once every run streams, divided by the runs. Unless everything runs over
// HTTP/1.1 already (HTTP1), a last row measures the largest load again
// with the worker at the emulator's plain listener over HTTP/1.1, for
// comparison; the target applies to the first transport's largest load.
func (b *bench) memory(ctx context.Context) error {
	c := b.cfg
	mr := &b.rep.Memory
	defer mr.finish(c.transport())
	largest := slices.Max(c.MemoryRuns)
	for i, n := range c.MemoryRuns {
		if _, err := b.memoryAt(ctx, n, c.transport(), c.ProfileDir != "" && i == len(c.MemoryRuns)-1); err != nil {
			return err
		}
	}
	if c.transport() == transportHTTP1 {
		return nil
	}
	_, err := b.memoryAt(ctx, largest, transportHTTP1, false)
	return err
}

// memoryAt measures one row: n runs on a fresh worker that reaches the
// emulator over transport. It checks, from the emulator's records, that
// the runs' creates came over the protocol the transport means.
func (b *bench) memoryAt(ctx context.Context, n int, transport string, profile bool) (MemoryPoint, error) {
	c := b.cfg
	// A fresh worker each time: the idle figures are a clean floor.
	if err := b.sys.startWorkerOver(ctx, c.EventInterval, transport); err != nil {
		return MemoryPoint{}, err
	}
	idle, err := b.sys.worker.usage()
	if err != nil {
		return MemoryPoint{}, err
	}
	idleGo, err := readGoStats(ctx, b.sys.hc, b.sys.metrics)
	if err != nil {
		return MemoryPoint{}, err
	}
	idleSettled, err := b.settledUsage(ctx)
	if err != nil {
		return MemoryPoint{}, err
	}
	b.progress("memory: %d concurrent runs streaming a token every %s, the worker over %s", n, c.MemoryTokenDelay, transportNames[transport])
	p := b.prefix("mem")
	ids, err := b.submit(ctx, p, n, streamMD(foundrytest.MaxScenarioTokens, c.MemoryTokenDelay))
	if err != nil {
		return MemoryPoint{}, err
	}
	if err := b.sys.watch.waitAll(ctx, ids, events.TypeTextDelta, 5*time.Minute); err != nil {
		return MemoryPoint{}, err
	}
	// Two more tokens each: every run is past its start-up.
	select {
	case <-time.After(2 * c.MemoryTokenDelay):
	case <-ctx.Done():
		return MemoryPoint{}, ctx.Err()
	}
	u, err := b.sys.worker.usage()
	if err != nil {
		return MemoryPoint{}, err
	}
	gs, err := readGoStats(ctx, b.sys.hc, b.sys.metrics)
	if err != nil {
		return MemoryPoint{}, err
	}
	if profile {
		b.profile(ctx, "heap", fmt.Sprintf("worker-heap-%d.pprof", n))
		b.profile(ctx, "goroutine", fmt.Sprintf("worker-goroutine-%d.pprof", n))
	}
	settled, err := b.settledUsage(ctx)
	if err != nil {
		return MemoryPoint{}, err
	}
	proto, err := b.upstreamProto(ctx, p)
	if err != nil {
		return MemoryPoint{}, err
	}
	if want := protoOf[transport]; proto != want {
		return MemoryPoint{}, fmt.Errorf("memory: the worker's creates reached the emulator over %s, not %s (%s)", proto, want, transportNames[transport])
	}
	pt := MemoryPoint{Runs: n, Transport: transport, UpstreamProto: proto, RSSBytes: u.RSS, IdleRSSBytes: idle.RSS,
		RSSPerRun:         float64(u.RSS-idle.RSS) / 1024 / float64(n),
		HeapPerRun:        float64(gs.HeapInuse-idleGo.HeapInuse) / 1024 / float64(n),
		StackPerRun:       float64(gs.StackInuse-idleGo.StackInuse) / 1024 / float64(n),
		GoroutinesPerRun:  float64(gs.Goroutines-idleGo.Goroutines) / float64(n),
		SettledRSSPerRun:  float64(settled.RSSBytes-idleSettled.RSSBytes) / 1024 / float64(n),
		SettledHeapPerRun: float64(settled.HeapInuseBytes-idleSettled.HeapInuseBytes) / 1024 / float64(n)}
	b.rep.Memory.Points = append(b.rep.Memory.Points, pt)
	b.progress("memory: %d runs over %s: RSS %.1f KiB/run, heap %.1f KiB/run, stacks %.1f KiB/run, %.1f goroutines/run; after GCs: RSS %.1f, heap %.1f KiB/run", n, proto, pt.RSSPerRun, pt.HeapPerRun, pt.StackPerRun, pt.GoroutinesPerRun, pt.SettledRSSPerRun, pt.SettledHeapPerRun)
	b.progress("memory: cancelling the %d runs", n)
	return pt, b.cancelAll(ctx, ids)
}

// protoOf is the protocol the emulator sees over each transport, as
// http.Request.Proto has it.
var protoOf = map[string]string{transportHTTPS: "HTTP/2.0", transportH2C: "HTTP/2.0", transportHTTP1: "HTTP/1.1"}

// upstreamProto is the protocol of the create requests of the runs named
// prefix-*, as the emulator recorded them: one, or several joined by
// commas.
func (b *bench) upstreamProto(ctx context.Context, prefix string) (string, error) {
	recs, err := b.records(ctx, prefix)
	if err != nil {
		return "", err
	}
	var protos []string
	for _, r := range recs {
		if !slices.Contains(protos, r.Proto) {
			protos = append(protos, r.Proto)
		}
	}
	slices.Sort(protos)
	return strings.Join(protos, ","), nil
}
