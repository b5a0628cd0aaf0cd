package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("demo", "demo [flags]")
	toolTime := f.Duration("tool-time", "", 3*time.Second, "how long the emulated MCP tool call of the second run would take")
	lf := addLogFlags(f, "console")
	*lf.level = "warn"
	log, err := parseCommand(f, lf, args, stdout, stderr)
	if err != nil {
		return err
	}

	ns, err := natsembed.Start(natsembed.Config{InProcess: true})
	if err != nil {
		return fmt.Errorf("demo: start NATS: %w", err)
	}
	defer ns.Shutdown()
	emu := foundrytest.NewServer(foundrytest.Config{APIKey: "demo-key", DefaultTokenDelay: 15 * time.Millisecond})
	defer emu.Close()
	up, err := foundry.New(foundry.Config{BaseURL: emu.BaseURL(), APIKey: "demo-key"})
	if err != nil {
		return err
	}
	defer up.CloseIdleConnections()
	nc, err := ns.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()

	wctx, stopWorkers := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(wctx)
	for i := range 2 {
		w, err := consumer.New(nc, up, consumer.Config{WorkerID: fmt.Sprintf("demo-%d", i+1), Logger: &log})
		if err != nil {
			stopWorkers()
			return err
		}
		g.Go(func() error { return w.Run(gctx) })
	}
	defer func() {
		stopWorkers()
		_ = g.Wait()
	}()

	c, err := events.NewClient(nc, events.ClientConfig{})
	if err != nil {
		return err
	}
	// The workers provision too, concurrently; doing it here first means
	// the first submit cannot beat them to it.
	if _, err := events.Provision(ctx, c.JetStream(), c.Names(), events.ProvisionConfig{}); err != nil {
		return err
	}
	say := func(format string, a ...any) { fmt.Fprintf(stdout, "\n== "+format+"\n", a...) }

	say("1. A run streamed to the terminal (embedded NATS, Foundry emulator, two workers)")
	first := events.RunRequest{
		RunID: events.NewRunID(), Model: "gpt-4o", Input: json.RawMessage(`"Tell me about NATS"`),
		Metadata: map[string]string{"emu_tokens": "40"},
	}
	if _, err := c.Submit(ctx, first); err != nil {
		return fmt.Errorf("demo: submit: %w", err)
	}
	if err := watchRun(ctx, c, first.RunID, events.WatchOptions{}, false, stdout, stdout); err != nil {
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
	return nil
}
