package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/foundryq/foundryq/internal/loadtest"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("bench", "bench [flags]")
	runs := f.Int("runs", "", 500, "concurrent runs in each phase")
	workers := f.Int("workers", "", 2, "in-process workers")
	tokens := f.Int("tokens", "", 50, "tokens per run in the relay phase")
	tokenDelay := f.Duration("token-delay", "", 0, "pause between tokens in the relay phase")
	streamDelay := f.Duration("stream-token-delay", "", 20*time.Millisecond, "pause between tokens of the runs being cancelled")
	spread := f.Duration("cancel-spread", "", 5*time.Second, "send the cancels evenly over this time (0: all at once, 64 in flight)")
	interval := f.Duration("event-interval", "", 50*time.Millisecond, "the workers' least time between two text.delta events of a run (negative: off)")
	lf := addLogFlags(f, "console")
	*lf.level = "error"
	log, err := parseCommand(f, lf, args, stdout, stderr)
	if err != nil {
		return err
	}
	if *runs < 1 || *workers < 1 || *tokens < 1 {
		return usageError{fmt.Errorf("bench: --runs, --workers and --tokens must be at least 1")}
	}
	if *spread == 0 {
		*spread = -1 // loadtest: negative means all at once
	}
	fmt.Fprintf(stdout, "foundryq bench: %d concurrent runs, %d workers (event interval %s); embedded NATS (file storage) and the Foundry emulator in this process\n", *runs, *workers, *interval)
	rep, err := loadtest.Run(ctx, loadtest.Config{
		Runs: *runs, Workers: *workers, Tokens: *tokens, TokenDelay: *tokenDelay,
		StreamTokenDelay: *streamDelay, CancelSpread: *spread, EventInterval: *interval, Logger: &log,
	})
	printReport(stdout, rep)
	return err
}

func printReport(w io.Writer, r loadtest.Report) {
	if r.RelayElapsed > 0 {
		secs := r.RelayElapsed.Seconds()
		fmt.Fprintf(w, "relay:  %d runs x %d tokens in %s: %.0f tokens/s relayed, %d events stored (%.0f/s)\n",
			r.Config.Runs, r.Config.Tokens, r.RelayElapsed.Round(time.Millisecond), float64(r.RelayTokens)/secs, r.RelayEvents, float64(r.RelayEvents)/secs)
		fmt.Fprintf(w, "relay:  submit -> first text.delta stored  %s\n", r.FirstToken)
	}
	if r.CancelReply.N > 0 {
		how := fmt.Sprintf("spread over %s", r.Config.CancelSpread)
		if r.Config.CancelSpread <= 0 {
			how = "all at once"
		}
		fmt.Fprintf(w, "cancel: %d streaming runs (a token every %s each), cancels %s\n", r.Config.Runs, r.Config.StreamTokenDelay, how)
		fmt.Fprintf(w, "cancel: request -> reply                   %s\n", r.CancelReply)
		fmt.Fprintf(w, "cancel: request -> run.cancelled stored    %s\n", r.CancelToEvent)
		fmt.Fprintf(w, "cancel: Foundry emulator: %d responses cancelled, %d not cancelled, %d tokens and %d tool calls after a cancel; %d replies other than cancelling, %d runs without run.cancelled\n",
			r.UpstreamCancelled, r.ResponsesNotCancelled, r.TokensAfterCancel, r.ToolCallsAfterCancel, r.CancelResultsUnwanted, r.CancelledEventsMissing)
	}
}
