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
	var mu sync.Mutex
	asked := map[string]time.Time{}
	ask := func(id string) {
		mu.Lock()
		asked[id] = time.Now()
		mu.Unlock()
	}
	var g errgroup.Group
	// (a) The naive client: a foreground stream, dropped mid-tool.
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
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
			ask(id)
			return body.Close() // dropped, as a naive client cancels
		})
	}
	// (b) foundryq: cancel once tool.started is stored.
	ids, err := b.submit(ctx, fqPrefix, c.WasteRuns, md)
	if err != nil {
		return err
	}
	for _, id := range ids {
		g.Go(func() error {
			if err := b.sys.watch.waitAll(ctx, []string{id}, events.TypeToolStarted, 2*time.Minute); err != nil {
				return err
			}
			time.Sleep(midTool)
			ask(id)
			_, err := b.sys.client.Cancel(ctx, id, "bench")
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := b.sys.watch.waitAll(ctx, ids, events.TypeRunCancelled, time.Minute); err != nil {
		return err
	}
	// Leave time for what a cancel failed to stop to show: the tool call's
	// end and the tokens after it.
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
	return nil
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
