package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("demo", "demo [flags]")
	toolTime := f.Duration("tool-time", "", 3*time.Second, "how long the emulated MCP tool call of the second run would take")
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
	return demoApproval(ctx, c, stdout, say)
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
		switch {
		case ev.Type == events.TypeInputRequired:
			for _, it := range ev.Items {
				reply, err := c.Approve(ctx, req.RunID, it.ID, true, "approved in the demo")
				if err != nil {
					return fmt.Errorf("demo: approve: %w", err)
				}
				fmt.Fprintf(stdout, "[approved %s: %s]\n", it.Name, reply.Result)
			}
		case ev.Type == events.TypeRunCompleted:
			fmt.Fprintln(stdout, "\nOne run, two responses (one per step), one event subject; the wait held no worker.")
			return nil
		case ev.Type.Terminal():
			return fmt.Errorf("demo: the run that asks ended %s", ev.Type)
		}
	}
}
