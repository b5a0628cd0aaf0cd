package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/tools"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("demo", "demo [flags]")
	toolTime := f.Duration("tool-time", "", 3*time.Second, "how long the emulated MCP tool call of the second run, and the served function tool's call of the fifth, would take")
	lf := addLogFlagsLevel(f, "console", "warn")
	log, err := parseCommand(f, lf, args, stdout, stderr)
	if err != nil {
		return err
	}
	stack, err := devstack.Start(ctx, devstack.Config{
		Emulator: foundrytest.Config{APIKey: "demo-key", DefaultTokenDelay: 15 * time.Millisecond},
		Workers:  2,
		Worker:   consumer.Config{WorkerID: "demo", Logger: &log},
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer func() { _ = stack.Close() }()
	c, emu := stack.Client, stack.Emulator

	say := func(format string, a ...any) { fmt.Fprintf(stdout, "\n== "+format+"\n", a...) }

	say("1. A run streamed to the terminal (embedded NATS, Foundry emulator, two workers)")
	first := events.RunRequest{
		RunID: events.NewRunID(), Model: "gpt-4o", Input: json.RawMessage(`"Tell me about NATS"`),
		Metadata: map[string]string{"emu_tokens": "40"},
	}
	if _, err := c.Submit(ctx, first); err != nil {
		return fmt.Errorf("demo: submit: %w", err)
	}
	if err := watchRun(ctx, c, first.RunID, time.Time{}, events.WatchOptions{}, false, stdout, stdout); err != nil {
		return fmt.Errorf("demo: first run did not complete: %w", err)
	}

	say("2. A slow run with an MCP tool call (%s), cancelled while the tool runs", *toolTime)
	second := events.RunRequest{
		RunID: events.NewRunID(), Model: "gpt-4o", Input: json.RawMessage(`"Look up the customer, then write a long report"`),
		Tools:    []json.RawMessage{json.RawMessage(`{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp","require_approval":"never"}`)},
		Metadata: map[string]string{"emu_tool_ms": fmt.Sprint(toolTime.Milliseconds()), "emu_tokens": "500", "emu_token_ms": "20"},
	}
	if _, err := c.Submit(ctx, second); err != nil {
		return fmt.Errorf("demo: submit: %w", err)
	}
	w := c.Watch(ctx, second.RunID, events.WatchOptions{})
	defer w.Close()
	var cancelledAt time.Time
	var final events.RunEvent
	for {
		ev, err := w.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("demo: watch: %w", err)
		}
		printEvent(ev, stdout, stdout)
		if ev.Type == events.TypeToolStarted && cancelledAt.IsZero() {
			cancelledAt = time.Now()
			reply, err := c.Cancel(ctx, second.RunID, "demo")
			if err != nil {
				return fmt.Errorf("demo: cancel: %w", err)
			}
			fmt.Fprintf(stdout, "[cancel sent while the tool runs: %s]\n", describeCancel(reply))
		}
		if ev.Type.Terminal() {
			final = ev
			break
		}
	}
	if final.Type != events.TypeRunCancelled {
		return fmt.Errorf("demo: second run ended %s, want run.cancelled", final.Type)
	}
	fmt.Fprintf(stdout, "[run.cancelled stored %s after the cancel was sent]\n", time.Since(cancelledAt).Round(time.Millisecond))

	// Give the emulated tool the time it would have needed, so that a tool
	// call that went on after the cancel would show in the counts.
	time.Sleep(*toolTime)
	say("3. What the Foundry emulator saw")
	stats := emu.Stats()
	status := stats.Statuses[final.ResponseID]
	fmt.Fprintf(stdout, "server-side status of %s: %s\n", final.ResponseID, status)
	fmt.Fprintf(stdout, "tool calls aborted by the cancel:        %d\n", stats.ToolCallsAborted)
	fmt.Fprintf(stdout, "tool calls completed after the cancel:   %d\n", stats.ToolCallsCompletedAfterCancel)
	fmt.Fprintf(stdout, "tokens generated after the cancel:       %d\n", stats.TokensAfterCancel)
	var problems []string
	if status != "cancelled" {
		problems = append(problems, "server-side status is "+status)
	}
	if stats.ToolCallsCompletedAfterCancel != 0 || stats.TokensAfterCancel != 0 {
		problems = append(problems, "work went on after the cancel")
	}
	if len(problems) > 0 {
		return fmt.Errorf("demo: %s", strings.Join(problems, "; "))
	}
	fmt.Fprintln(stdout, "\nThe cancel reached Foundry: generation and the tool call stopped server-side.")
	if err := demoApproval(ctx, c, stdout, say); err != nil {
		return err
	}
	return demoServedTool(ctx, stack, *toolTime, stdout, say)
}

// demoApproval runs a run that asks: its MCP tool needs approval (Foundry's
// default), the run waits, the demo approves as a person would with
// `foundryq approve`, and the run goes on.
func demoApproval(ctx context.Context, c *events.Client, stdout io.Writer, say func(string, ...any)) error {
	say("4. A run that asks: its MCP tool needs approval (Foundry's default), the run waits, the demo approves")
	req := events.RunRequest{
		RunID: events.NewRunID(), Model: "gpt-4o", Input: json.RawMessage(`"Look up the customer"`),
		Tools:    []json.RawMessage{json.RawMessage(`{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp","allowed_tools":["lookup_customer"]}`)},
		Metadata: map[string]string{"emu_tool_ms": "300", "emu_tokens": "30"},
	}
	return demoRun(ctx, c, req, stdout, func(ev events.RunEvent) (bool, error) {
		switch {
		case ev.Type == events.TypeInputRequired:
			for _, it := range ev.Items {
				reply, err := c.Approve(ctx, req.RunID, it.ID, true, "approved in the demo")
				if err != nil {
					return false, fmt.Errorf("demo: approve: %w", err)
				}
				fmt.Fprintf(stdout, "[approved %s: %s]\n", it.Name, reply.Result)
			}
		case ev.Type == events.TypeRunCompleted:
			fmt.Fprintln(stdout, "\nOne run, two responses (one per step), one event subject; the wait held no worker.")
			return true, nil
		case ev.Type.Terminal():
			return false, fmt.Errorf("demo: the run that asks ended %s", ev.Type)
		}
		return false, nil
	})
}

// demoRun submits req and prints its events as they come, each then
// passed to on, until on says the demo of the run is done or fails.
func demoRun(ctx context.Context, c *events.Client, req events.RunRequest, stdout io.Writer, on func(events.RunEvent) (done bool, err error)) error {
	if _, err := c.Submit(ctx, req); err != nil {
		return fmt.Errorf("demo: submit: %w", err)
	}
	w := c.Watch(ctx, req.RunID, events.WatchOptions{})
	defer w.Close()
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			return fmt.Errorf("demo: watch: %w", err)
		}
		printEvent(ev, stdout, stdout)
		if done, err := on(ev); done || err != nil {
			return err
		}
	}
}

// demoServedTool serves the function tool get_weather in this process
// (tools.Serve: a NATS service that the workers call), starts a run whose
// model calls it, cancels the run while the slow call runs, and shows
// that the service's ctx ended at the worker's cancel message, and how
// soon after the cancel was sent.
func demoServedTool(ctx context.Context, stack *devstack.Stack, slow time.Duration, stdout io.Writer, say func(string, ...any)) error {
	say("5. A function tool served over NATS by this process (tools.Serve), the run cancelled while its slow call (%s) runs", slow)
	nc, err := stack.Connect("demo-tool")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer nc.Close()
	weather := newSlowTool(slow)
	svc, err := tools.Serve(nc, "get_weather", weather.handle, tools.WithDescription("the weather in a city, slowly (foundryq demo)"))
	if err != nil {
		return fmt.Errorf("demo: serve get_weather: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	fmt.Fprintf(stdout, "[serving get_weather on %s]\n", svc.Subject())
	req := events.RunRequest{
		RunID: events.NewRunID(), Model: "gpt-4o", Input: json.RawMessage(`"What is the weather in Paris?"`),
		Tools:    []json.RawMessage{json.RawMessage(`{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}`)},
		Metadata: map[string]string{"emu_tool_ms": "1", "emu_tokens": "30"},
	}
	var cancelledAt time.Time
	return demoRun(ctx, stack.Client, req, stdout, func(ev events.RunEvent) (done bool, err error) {
		switch {
		case ev.Type == events.TypeToolStarted && cancelledAt.IsZero():
			cancelledAt, err = cancelServedCall(ctx, stack.Client, req.RunID, weather, stdout)
			return false, err
		case ev.Type == events.TypeInputRequired:
			return false, errors.New("demo: the worker asked the caller for the output of get_weather instead of calling its service")
		case ev.Type == events.TypeRunCancelled && !cancelledAt.IsZero():
			fmt.Fprintf(stdout, "[run.cancelled stored %s after the cancel was sent]\n", time.Since(cancelledAt).Round(time.Millisecond))
			fmt.Fprintln(stdout, "\nThe cancel reached the tool's service: its call stopped instead of running to its end.")
			return true, nil
		case ev.Type.Terminal():
			return false, fmt.Errorf("demo: the run with a served tool ended %s, want run.cancelled during the call", ev.Type)
		}
		return false, nil
	})
}

// cancelServedCall cancels run runID once tool's call runs, and shows when
// the call's ctx ended and why. It returns when the cancel was sent.
func cancelServedCall(ctx context.Context, c *events.Client, runID string, tool *slowTool, stdout io.Writer) (time.Time, error) {
	if err := tool.wait(ctx, tool.started); err != nil {
		return time.Time{}, fmt.Errorf("demo: the service of get_weather did not start the call: %w", err)
	}
	sent := time.Now()
	reply, err := c.Cancel(ctx, runID, "demo")
	if err != nil {
		return sent, fmt.Errorf("demo: cancel: %w", err)
	}
	fmt.Fprintf(stdout, "[cancel sent while get_weather runs: %s]\n", describeCancel(reply))
	if err := tool.wait(ctx, tool.ended); err != nil {
		return sent, fmt.Errorf("demo: the call of get_weather did not end: %w", err)
	}
	end := tool.end()
	if !errors.Is(end.cause, tools.ErrCancelled) {
		return sent, fmt.Errorf("demo: the call of get_weather ended %v, not at the worker's cancel", end.cause)
	}
	fmt.Fprintf(stdout, "[the service's ctx ended %s after the cancel was sent: %v]\n", end.at.Sub(sent).Round(time.Microsecond), end.cause)
	return sent, nil
}

// slowTool is the demo's function tool: it answers after its delay,
// unless its ctx ends first, and says when its one call started and
// ended.
type slowTool struct {
	delay          time.Duration
	started, ended chan struct{} // closed when the call starts, when it ends
	once           [2]sync.Once
	last           callEnd
}

// callEnd is how a call ended: when, and its ctx's cause (nil if it ran to
// its end).
type callEnd struct {
	at    time.Time
	cause error
}

func newSlowTool(delay time.Duration) *slowTool {
	return &slowTool{delay: delay, started: make(chan struct{}), ended: make(chan struct{})}
}

func (s *slowTool) handle(ctx context.Context, call tools.Call) (string, error) {
	s.once[0].Do(func() { close(s.started) })
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-t.C:
		s.finish(callEnd{at: time.Now()})
		return `{"city":"Paris","temp_c":21}`, nil
	case <-ctx.Done():
		end := callEnd{at: time.Now(), cause: context.Cause(ctx)}
		s.finish(end)
		return "", end.cause
	}
}

// finish records the first call's end.
func (s *slowTool) finish(end callEnd) { s.once[1].Do(func() { s.last = end; close(s.ended) }) }

// end is how the first call ended (after ended is closed).
func (s *slowTool) end() callEnd { return s.last }

// wait waits for ch to close, at most 30 s.
func (s *slowTool) wait(ctx context.Context, ch <-chan struct{}) error {
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return errors.New("not within 30s")
	case <-ctx.Done():
		return ctx.Err()
	}
}
