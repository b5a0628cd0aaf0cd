package bench

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/foundryq/foundryq/events"
)

// midTool is how long after a tool call started the user asks to cancel.
const midTool = 300 * time.Millisecond

// waste cancels WasteRuns runs mid-tool-call two ways at once: (a) a naive
// client streaming from Foundry drops its connection, (b) foundryq's
// cancel. It counts, from the emulator's records, the tokens generated and
// tool calls completed upstream after the moment the user asked.
func (b *bench) waste(ctx context.Context) error {
	c := b.cfg
	wr := &b.rep.Waste
	*wr = WasteReport{Runs: c.WasteRuns, ToolDelayMS: ms(c.ToolDelay)}
	b.progress("waste: %d runs with a %s MCP tool call, cancelled %s into it: (a) a naive client drops its stream, (b) foundryq cancel", c.WasteRuns, c.ToolDelay, midTool)
	md := map[string]string{"emu_tool_ms": strconv.FormatInt(c.ToolDelay.Milliseconds(), 10), "emu_tokens": "50", "emu_token_ms": "20"}
	naivePrefix, fqPrefix := b.prefix("naive"), b.prefix("wastefq")
	asks := newAskLog()
	var g errgroup.Group
	// (a) The naive client: a foreground stream, dropped mid-tool.
	hc := &http.Client{Transport: b.sys.transport()}
	defer hc.CloseIdleConnections()
	for i := range c.WasteRuns {
		id := fmt.Sprintf("%s-%d", naivePrefix, i)
		g.Go(func() error {
			m := map[string]string{"run_id": id}
			for k, v := range md {
				m[k] = v
			}
			body, err := openStream(ctx, hc, b.sys.foundryURL(), apiKey, m, false)
			if err != nil {
				return err
			}
			defer body.Close()
			started := false
			if err := readStream(body, func(typ string, _ int) bool {
				started = typ == "response.mcp_call_arguments.done"
				return !started
			}); err != nil {
				return err
			}
			if !started {
				return fmt.Errorf("%s: the stream ended before its tool call started", id)
			}
			time.Sleep(midTool) // the user's think time, not a wait for a condition
			asks.ask(id)
			return body.Close() // dropped, as a naive client cancels
		})
	}
	// (b) foundryq: cancel once tool.started is stored.
	ids, err := b.submit(ctx, fqPrefix, c.WasteRuns, md)
	if err != nil {
		return err
	}
	b.cancelMidTool(ctx, &g, ids, asks, func(id string) error {
		return b.sys.watch.waitAll(ctx, []string{id}, events.TypeToolStarted, 2*time.Minute)
	})
	if err := g.Wait(); err != nil {
		return err
	}
	if err := b.sys.watch.waitAll(ctx, ids, events.TypeRunCancelled, time.Minute); err != nil {
		return err
	}
	// Leave time for what a cancel failed to stop to show: the tool call's
	// end and the tokens after it.
	asked := asks.at
	var last time.Time
	for _, t := range asked {
		if t.After(last) {
			last = t
		}
	}
	if err := b.settle(ctx, last.Add(c.ToolDelay+time.Second), naivePrefix, fqPrefix); err != nil {
		return err
	}
	for _, side := range []struct {
		prefix string
		dst    *WasteFigures
	}{{naivePrefix, &wr.Naive}, {fqPrefix, &wr.Foundryq}} {
		recs, err := b.records(ctx, side.prefix)
		if err != nil {
			return err
		}
		for id, r := range recs {
			t0 := asked[id].UnixNano()
			for _, t := range r.TokenTimes {
				if t > t0 {
					side.dst.Tokens++
				}
			}
			for _, tc := range r.ToolCalls {
				if !tc.FinishedAt.IsZero() && tc.FinishedAt.UnixNano() > t0 {
					side.dst.ToolCalls++
				}
			}
		}
	}
	wr.Met = wr.Foundryq == (WasteFigures{}) && wr.Naive.Tokens+wr.Naive.ToolCalls > 0
	b.progress("waste: naive disconnect %d tokens, %d tool calls after the ask; foundryq %d tokens, %d tool calls", wr.Naive.Tokens, wr.Naive.ToolCalls, wr.Foundryq.Tokens, wr.Foundryq.ToolCalls)
	return b.wasteFunctionTools(ctx)
}

// wasteFunctionTools calls a ToolDelay function tool served over NATS
// WasteRuns times two ways at once, and stops each call midTool into it:
// (a) a naive client that runs the tool itself drops its connection, (b)
// foundryq's cancel of a run whose model called the tool. It sums the time
// the service's handlers ran after the moment the user asked.
func (b *bench) wasteFunctionTools(ctx context.Context) error {
	c := b.cfg
	fw := &b.rep.Waste.FunctionTools
	*fw = FunctionToolsWaste{Runs: c.WasteRuns, ToolDelayMS: ms(c.ToolDelay)}
	srv, err := b.sys.toolServer()
	if err != nil {
		return err
	}
	srv.holdFor(c.ToolDelay)
	b.progress("waste: %d calls of a %s function tool served over NATS, stopped %s into them: (a) a naive client drops its connection, (b) foundryq cancel", c.WasteRuns, c.ToolDelay, midTool)
	asks := newAskLog()
	naivePrefix := b.prefix("naivefn")
	naive := make([]string, c.WasteRuns)
	var g errgroup.Group
	for i := range naive {
		naive[i] = fmt.Sprintf("%s-%d", naivePrefix, i)
		g.Go(func() error { return b.naiveCall(ctx, srv, naive[i], midTool, asks.ask) })
	}
	ids, err := b.submit(ctx, b.prefix("wastefn"), c.WasteRuns, functionCallMD, functionTools...)
	if err != nil {
		return err
	}
	// Cancelled once the service has the call: the worker's cancel message
	// cannot overtake it.
	b.cancelMidTool(ctx, &g, ids, asks, func(id string) error { return srv.waitStarted(ctx, []string{id}, 2*time.Minute) })
	if err := g.Wait(); err != nil {
		return err
	}
	if err := b.sys.watch.waitAll(ctx, ids, events.TypeRunCancelled, time.Minute); err != nil {
		return err
	}
	// Every call ends by itself: at its cancel, or at the end of its time.
	if err := srv.waitEnded(ctx, append(naive, ids...), c.ToolDelay+time.Minute); err != nil {
		return err
	}
	fw.Naive, fw.Foundryq = srv.toolWork(naive, asks.at), srv.toolWork(ids, asks.at)
	// At most the cancel target per call after the ask, and none to its end.
	fw.Met = fw.Foundryq.CallsToEnd == 0 && fw.Foundryq.ToolSeconds <= float64(c.WasteRuns)*TargetToolCancelP99/1000 && fw.Naive.CallsToEnd > 0
	b.progress("waste: function tools ran %.2f s after the ask (%d calls to their end) for the naive client, %.3f s (%d) with foundryq",
		fw.Naive.ToolSeconds, fw.Naive.CallsToEnd, fw.Foundryq.ToolSeconds, fw.Foundryq.CallsToEnd)
	return nil
}

// askLog notes when the user asked to stop each run (or call).
type askLog struct {
	mu sync.Mutex
	at map[string]time.Time // read once every ask is made
}

func newAskLog() *askLog { return &askLog{at: map[string]time.Time{}} }

// ask notes that the user asks now to stop id.
func (a *askLog) ask(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.at[id] = time.Now()
}

// cancelMidTool cancels each run of ids through foundryq midTool after
// started(id) returned (its tool call started), noting the ask first; each
// on a goroutine of g.
func (b *bench) cancelMidTool(ctx context.Context, g *errgroup.Group, ids []string, asks *askLog, started func(id string) error) {
	for _, id := range ids {
		g.Go(func() error {
			if err := started(id); err != nil {
				return err
			}
			time.Sleep(midTool) // the user's think time, not a wait for a condition
			asks.ask(id)
			_, err := b.sys.client.Cancel(ctx, id, "bench")
			return err
		})
	}
}

// settle waits until not before, then until every response of the
// prefixes has finished (at most a minute more).
func (b *bench) settle(ctx context.Context, notBefore time.Time, prefixes ...string) error {
	select {
	case <-time.After(time.Until(notBefore)):
	case <-ctx.Done():
		return ctx.Err()
	}
	deadline := time.Now().Add(time.Minute)
	for {
		open := 0
		for _, p := range prefixes {
			recs, err := b.records(ctx, p)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if r.FinishedAt.IsZero() && r.Status != "cancelled" {
					open++
				}
			}
		}
		if open == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d responses still open a minute after the asks", open)
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
