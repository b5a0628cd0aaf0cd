package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
)

// memory measures the worker's RSS, heap and goroutines per concurrent
// streaming run at each of MemoryRuns: the growth over the idle worker,
// once every run streams, divided by the runs.
func (b *bench) memory(ctx context.Context) error {
	c := b.cfg
	mr := &b.rep.Memory
	mr.Target = TargetMemoryPerRun
	for i, n := range c.MemoryRuns {
		// A fresh worker each time: the idle figures are a clean floor.
		if err := b.sys.startWorker(ctx, c.EventInterval); err != nil {
			return err
		}
		idle, err := b.sys.worker.usage()
		if err != nil {
			return err
		}
		idleGo, err := readGoStats(ctx, b.sys.hc, b.sys.metrics)
		if err != nil {
			return err
		}
		b.progress("memory: %d concurrent runs streaming a token every %s", n, c.MemoryTokenDelay)
		ids, err := b.submit(ctx, b.prefix("mem"), n, streamMD(foundrytest.MaxScenarioTokens, c.MemoryTokenDelay))
		if err != nil {
			return err
		}
		if err := b.sys.watch.waitAll(ctx, ids, events.TypeTextDelta, 5*time.Minute); err != nil {
			return err
		}
		// Two more tokens each: every run is past its start-up.
		select {
		case <-time.After(2 * c.MemoryTokenDelay):
		case <-ctx.Done():
			return ctx.Err()
		}
		u, err := b.sys.worker.usage()
		if err != nil {
			return err
		}
		gs, err := readGoStats(ctx, b.sys.hc, b.sys.metrics)
		if err != nil {
			return err
		}
		if c.ProfileDir != "" && i == len(c.MemoryRuns)-1 {
			b.profile(ctx, "heap", fmt.Sprintf("worker-heap-%d.pprof", n))
			b.profile(ctx, "goroutine", fmt.Sprintf("worker-goroutine-%d.pprof", n))
		}
		pt := MemoryPoint{Runs: n, RSSBytes: u.RSS, IdleRSSBytes: idle.RSS,
			RSSPerRun:        float64(u.RSS-idle.RSS) / 1024 / float64(n),
			HeapPerRun:       float64(gs.HeapInuse-idleGo.HeapInuse) / 1024 / float64(n),
			StackPerRun:      float64(gs.StackInuse-idleGo.StackInuse) / 1024 / float64(n),
			GoroutinesPerRun: float64(gs.Goroutines-idleGo.Goroutines) / float64(n)}
		mr.Points = append(mr.Points, pt)
		mr.Met = pt.RSSPerRun <= TargetMemoryPerRun
		b.progress("memory: %d runs: RSS %.1f KiB/run, heap %.1f KiB/run, stacks %.1f KiB/run, %.1f goroutines/run", n, pt.RSSPerRun, pt.HeapPerRun, pt.StackPerRun, pt.GoroutinesPerRun)
		b.progress("memory: cancelling the %d runs", n)
		if err := b.cancelAll(ctx, ids); err != nil {
			return err
		}
	}
	return nil
}
