package bench

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/foundryq/foundryq/tools"
)

// toolCancel measures how soon a cancel reaches the function tools a run
// is calling: ToolCancelRuns runs, each in a call to benchTool (served by
// the bench, holding until its ctx ends), are cancelled over CancelSpread
// in random order; for each, the time from the cancel request to the
// handler seeing its ctx end.
func (b *bench) toolCancel(ctx context.Context) error {
	c := b.cfg
	tr := &b.rep.ToolCancel
	*tr = ToolCancelReport{Runs: c.ToolCancelRuns, Target: TargetToolCancelP99}
	srv, err := b.sys.toolServer()
	if err != nil {
		return err
	}
	srv.holdFor(0)
	b.progress("tool cancel: %d runs, each in a call to a function tool served over NATS (until its ctx ends), cancelled over %s", c.ToolCancelRuns, c.CancelSpread)
	ids, err := b.submit(ctx, b.prefix("toolcancel"), c.ToolCancelRuns, functionCallMD, functionTools...)
	if err != nil {
		return err
	}
	if err := srv.waitStarted(ctx, ids, 2*time.Minute); err != nil {
		return err
	}
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	sc, err := b.spreadCancels(ctx, ids, c.CancelSpread)
	if err != nil {
		return err
	}
	// A call the cancel missed holds until the worker's deadline for it:
	// counted as not reached, not waited for.
	_ = srv.waitEnded(ctx, ids, 10*time.Second)
	var reached []time.Duration
	for _, id := range ids {
		call, _ := srv.call(id)
		if call.ended.IsZero() || !errors.Is(call.cause, tools.ErrCancelled) {
			tr.NotReached++
			continue
		}
		reached = append(reached, call.ended.Sub(sc.asked[id]))
	}
	tr.NotReached += sc.notStored
	tr.CtxCancelled, tr.Stored = percentiles(reached), percentiles(sc.stored)
	tr.Met = tr.NotReached == 0 && sc.notCancelling == 0 && tr.CtxCancelled.P99 <= TargetToolCancelP99
	b.progress("tool cancel: the service's ctx ended p50 %.1fms p99 %.1fms after the cancel; run.cancelled p50 %.1fms p99 %.1fms; %d not reached",
		tr.CtxCancelled.P50, tr.CtxCancelled.P99, tr.Stored.P50, tr.Stored.P99, tr.NotReached)
	return nil
}

// functionCallMD makes the emulator's model call the request's function
// tool at once, and write a few tokens in the next step.
var functionCallMD = map[string]string{"emu_tool_ms": "1", "emu_tokens": "20", "emu_token_ms": "20"}
