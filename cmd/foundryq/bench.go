package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/foundryq/foundryq/cmd/foundryq/internal/bench"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("bench", "bench [flags]")
	quick := f.Bool("quick", "", false, "smaller counts: finishes in under a minute")
	asJSON := f.Bool("json", "", false, "write the figures to stdout as one JSON object (progress and table go to stderr)")
	plotFile := f.String("plot", "", "", "draw token latency against load to this file (.png, .svg or .pdf)")
	profile := f.String("profile", "", "", "save CPU profiles of the worker and NATS (throughput phase) and of the workers (relay phase, each scale load), and the worker's heap and goroutines (largest memory load) in this directory")
	interval := f.Duration("event-interval", "", 50*time.Millisecond, "the worker's --event-interval in the relay, cancel, tool_cancel, waste and memory phases")
	memRuns := f.String("memory-runs", "", "", "concurrent runs of the memory phase, comma-separated (default 1000,5000; quick 200,500)")
	scaleRuns := f.String("scale-runs", "", "", "concurrent runs of the scale phase, comma-separated (default 5000,20000)")
	scaleDelay := f.Duration("scale-token-delay", "", 5*time.Second, "the pause between two tokens of each run of the scale phase")
	waitRuns := f.Int("waiting-runs", "", 0, "runs that ask, waiting at once in the waiting phase (default 5000; quick 300)")
	phases := f.String("phases", "", "", "run only these phases, comma-separated: "+strings.Join(bench.Phases, ", ")+" (raw_publish, latency and cancel need throughput; default all but "+strings.Join(bench.OptInPhases, ", ")+")")
	h2c := f.Bool("h2c", "", false, "the emulator serves plain HTTP, and the worker and the bare reader speak HTTP/2 without TLS to it (default: HTTPS with HTTP/2, as an Azure endpoint)")
	http1 := f.Bool("http1", "", false, "the emulator serves plain HTTP, and the worker, the bare reader and the bench speak HTTP/1.1 to it (default: HTTPS with HTTP/2, as an Azure endpoint, and a memory row over HTTP/1.1)")
	fairFlood := f.Int("fair-flood", "", 0, "runs of key A queued at once in the fair phase, which runs alone: --phases fair (default 10000; quick 1000)")
	lf := addLogFlags(f, "console")
	*lf.level = "error"
	if _, err := parseCommand(f, lf, args, stdout, stderr); err != nil {
		return err
	}
	if *h2c && *http1 {
		return usageError{errors.New("bench: --h2c and --http1 exclude each other (the default is HTTPS with HTTP/2)")}
	}
	cfg := bench.Config{Quick: *quick, ProfileDir: *profile, EventInterval: *interval, H2C: *h2c, HTTP1: *http1, ScaleTokenDelay: *scaleDelay}
	var err error
	if cfg.MemoryRuns, err = parseCounts("memory-runs", *memRuns); err != nil {
		return err
	}
	if cfg.ScaleRuns, err = parseCounts("scale-runs", *scaleRuns); err != nil {
		return err
	}
	if *scaleDelay < 10*time.Millisecond {
		return usageError{fmt.Errorf("bench: --scale-token-delay: %s is under 10ms", *scaleDelay)}
	}
	if *waitRuns < 0 {
		return usageError{fmt.Errorf("bench: --waiting-runs: %d is not a positive count", *waitRuns)}
	}
	cfg.WaitingRuns = *waitRuns
	if *phases != "" {
		for _, s := range strings.Split(*phases, ",") {
			cfg.Phases = append(cfg.Phases, strings.TrimSpace(s))
		}
	}
	if *profile != "" {
		if err := os.MkdirAll(*profile, 0o755); err != nil {
			return fmt.Errorf("bench: --profile: %w", err)
		}
	}
	table := stdout
	if *asJSON {
		table = stderr
	}
	cfg.Progress = stderr
	if slices.Equal(cfg.Phases, []string{"fair"}) { // bench_fair.go
		return runFairBench(ctx, fairBench{Flood: *fairFlood}.withQuick(*quick), *asJSON, table, stderr)
	}
	rep, err := bench.Run(ctx, cfg)
	printReport(table, rep)
	if err != nil {
		return err
	}
	if *plotFile != "" {
		if err := bench.Plot(rep, *plotFile); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "plot: %s\n", *plotFile)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return nil
}

// parseCounts parses flag name's comma-separated positive counts (nil
// for "").
func parseCounts(name, v string) ([]int, error) {
	if v == "" {
		return nil, nil
	}
	var out []int
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, usageError{fmt.Errorf("bench: --%s: %q is not a positive count", name, s)}
		}
		out = append(out, n)
	}
	return out, nil
}

// printReport writes the figures as a table.
func printReport(w io.Writer, r bench.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	verdict := func(met bool) string {
		if met {
			return "met"
		}
		return "MISSED"
	}
	fmt.Fprintln(tw, "figure\tfoundryq\tfloor\tratio / target")
	if rp := r.RawPublish; rp.RawPerSec > 0 {
		fmt.Fprintf(tw, "throughput: events/s, interval off (raw: %d msgs of %d B)\t%.0f/s\traw JetStream %.0f/s\t%.2f (≥ %.1f: %s)\n",
			rp.Messages, rp.MessageBytes, rp.FoundryqPerSec, rp.RawPerSec, rp.Ratio, rp.Target, verdict(rp.Met))
	}
	for _, pt := range r.Latency.Points {
		fmt.Fprintf(tw, "latency at %.0f%% (%d runs, %.0f tokens/s): p50 / p99\t%.1f / %.1f ms\tbare reader %.1f / %.1f ms\tadded %.1f / %.1f ms\n",
			pt.Fraction*100, pt.Runs, pt.OfferedPerSec, pt.Foundryq.P50, pt.Foundryq.P99, pt.Reader.P50, pt.Reader.P99, pt.AddedP50, pt.AddedP99)
	}
	if rl := r.Relay; rl.ReaderCPUPerToken > 0 {
		fmt.Fprintf(tw, "relay: worker CPU per token (%d runs x %d tokens, interval %gms)\t%.2f µs\tbare reader %.2f µs\t%.2f (≤ %.1f: %s)\n",
			rl.Runs, rl.Tokens, rl.EventIntervalMS, rl.WorkerCPUPerToken, rl.ReaderCPUPerToken, rl.Ratio, rl.Target, verdict(rl.Met))
		fmt.Fprintf(tw, "relay: NATS CPU per stored event (%d events)\t%.2f µs\t\t\n", rl.EventsStored, rl.NATSCPUPerEvent)
		fmt.Fprintf(tw, "relay: NATS CPU per run of one token (%.1f events); per further event (idle %.3f cores out)\t%.0f µs; %.2f µs\t\t\n", rl.EventsPerShortRun, rl.NATSIdleCores, rl.NATSCPUPerRun, rl.NATSCPUPerFurtherEvent)
		fmt.Fprintf(tw, "relay: emulator CPU per token (for scale)\t%.2f µs\t\t\n", rl.EmulatorCPUPerToken)
		for _, l := range rl.Loads {
			fmt.Fprintf(tw, "relay: worker CPU per token (%d runs x %d tokens, a token every %gms)\t%.2f µs\tbare reader %.2f µs\t%.2f\n",
				l.Runs, l.Tokens, l.TokenDelayMS, l.WorkerCPUPerToken, l.ReaderCPUPerToken, l.Ratio)
		}
	}
	for _, pt := range r.Memory.Points {
		fmt.Fprintf(tw, "memory at %d runs, worker over %s (%s): RSS / heap / stacks per run, goroutines per run; RSS / heap after GCs\t%.1f / %.1f / %.1f KiB, %.2f; %.1f / %.1f KiB\t\t(≤ %.0f KiB RSS)\n",
			pt.Runs, pt.Transport, pt.UpstreamProto, pt.RSSPerRun, pt.HeapPerRun, pt.StackPerRun, pt.GoroutinesPerRun, pt.SettledRSSPerRun, pt.SettledHeapPerRun, r.Memory.Target)
	}
	for _, pt := range r.Cancel.Points {
		fmt.Fprintf(tw, "cancel at %.0f%% (%d runs, %d measured): reply p50 / p99\t%.1f / %.1f ms\t\t\n", pt.Fraction*100, pt.Runs, pt.Cancelled, pt.Reply.P50, pt.Reply.P99)
		fmt.Fprintf(tw, "cancel at %.0f%%: run.cancelled stored p50 / p99\t%.1f / %.1f ms\t\t%d not cancelled\n", pt.Fraction*100, pt.Stored.P50, pt.Stored.P99, pt.NotCancelled)
	}
	if tc := r.ToolCancel; tc.Runs > 0 {
		fmt.Fprintf(tw, "tool cancel (%d runs in a served function tool call): to the service's ctx p50 / p99\t%.1f / %.1f ms\t\t≤ %.0f ms, %d not reached: %s\n",
			tc.Runs, tc.CtxCancelled.P50, tc.CtxCancelled.P99, tc.Target, tc.NotReached, verdict(tc.Met))
	}
	wa := r.Waste
	if wa.Runs > 0 {
		fmt.Fprintf(tw, "waste (%d runs, cancelled mid %gms tool): tokens, tool calls after the ask\t%d, %d\tnaive disconnect %d, %d\t%s\n",
			wa.Runs, wa.ToolDelayMS, wa.Foundryq.Tokens, wa.Foundryq.ToolCalls, wa.Naive.Tokens, wa.Naive.ToolCalls, verdict(wa.Met))
	}
	if fn := wa.FunctionTools; fn.Runs > 0 {
		fmt.Fprintf(tw, "waste, function tools (%d calls, stopped mid %gms served call): tool-seconds, calls run to their end after the ask\t%.3f s, %d\tnaive disconnect %.1f s, %d\t%s\n",
			fn.Runs, fn.ToolDelayMS, fn.Foundryq.ToolSeconds, fn.Foundryq.CallsToEnd, fn.Naive.ToolSeconds, fn.Naive.CallsToEnd, verdict(fn.Met))
	}
	if wt := r.Waiting; wt.Runs > 0 && wt.Waiting.RSSBytes > 0 {
		fmt.Fprintf(tw, "waiting (%d runs that ask, after a GC): RSS / heap in use added, goroutines added\t%.2f / %.2f MiB, %d\t\t\n",
			wt.Runs, mib(wt.RSSGrowthBytes), mib(wt.HeapGrowthBytes), wt.GoroutineGrowth)
		fmt.Fprintf(tw, "waiting: RSS / heap per waiting run, goroutines per run\t%.3f / %.3f KiB, %.3f\t\t≤ %.3f KiB: %s\n",
			wt.RSSPerRun, wt.HeapPerRun, wt.GoroutinesPerRun, wt.Target, verdict(wt.Met))
	}
	for _, row := range r.Ablation.Rows {
		fmt.Fprintf(tw, "ablation: NATS CPU per event, %s\t%.1f µs\traw %.2fx\t%s\n", row.Variant, row.NATSCPUPerEvent, row.RatioToRaw, row.Off)
	}
	if ab := r.Ablation; len(ab.Rows) > 0 {
		fmt.Fprintf(tw, "ablation: foundryq's way against raw publishing (%d runs x %d events of %d B)\t%.2fx\t\t≤ %.1fx: %s\n",
			ab.Runs, ab.EventsPerRun, ab.MessageBytes, ab.FoundryqRatio, ab.Target, verdict(ab.Met))
		fmt.Fprintf(tw, "ablation: the same at the relay phase's pace\t%.2fx\t\t\n", ab.PacedRatio)
	}
	if sc := r.Scale; sc != nil {
		for _, pt := range sc.Points {
			fmt.Fprintf(tw, "scale at %d runs (%d workers %v, %d nodes, R%d, a token every %gs): RSS / heap per run, goroutines per run\t%.1f / %.1f KiB, %.2f\t\t\n",
				pt.Runs, sc.Workers, pt.RunsPerWorker, sc.Nodes, sc.Replicas, sc.TokenDelayMS/1000, pt.RSSPerRun, pt.HeapPerRun, pt.GoroutinesPerRun)
			fmt.Fprintf(tw, "scale at %d runs: worker CPU per token (%d tokens in %gs, idle %.3f cores out); cluster CPU per token\t%.1f µs; %.1f µs\t\t\n",
				pt.Runs, pt.Tokens, sc.WindowS, pt.WorkerIdleCores, pt.WorkerCPUPerToken, pt.ClusterCPUPerToken)
			fmt.Fprintf(tw, "scale at %d runs: submit to run.started p50 / p99; runs that lost ownership\t%.0f / %.0f ms; %d\t\t\n",
				pt.Runs, pt.Start.P50, pt.Start.P99, pt.LostOwnership)
		}
	}
	printTargets(tw, r, verdict)
	_ = tw.Flush()
}

// printTargets writes a row for each target of the keys that carry a list
// of them, with its verdict.
func printTargets(w io.Writer, r bench.Report, verdict func(bool) string) {
	for _, sec := range []struct {
		key     string
		targets []bench.Target
	}{
		{"latency", r.Latency.Targets}, {"relay", r.Relay.Targets}, {"cancel", r.Cancel.Targets},
		{"memory", r.Memory.Targets}, {"ablation", r.Ablation.Targets}, {"scale", scaleTargets(r.Scale)},
	} {
		for _, t := range sec.targets {
			fmt.Fprintf(w, "target, %s: %s\t%.2f %s\t≤ %g %s\t%s\n", sec.key, t.What, t.Measured, t.Unit, t.Max, t.Unit, verdict(t.Met))
			if t.Note != "" {
				fmt.Fprintf(w, "  (%s)\t\t\t\n", t.Note)
			}
		}
	}
}

func scaleTargets(s *bench.ScaleReport) []bench.Target {
	if s == nil {
		return nil
	}
	return s.Targets
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// runBenchReader is the bare reader of foundryq bench, in a process of its
// own: it streams responses straight from the emulator, decodes and
// discards them, and writes what it measured as JSON.
func runBenchReader(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("bench-reader", "bench-reader [flags] (started by foundryq bench)")
	url := f.String("url", "", "", "Foundry v1 base URL (the emulator's)")
	key := f.String("api-key", "", "bench", "API key")
	prefix := f.String("prefix", "", "reader", "run id prefix (metadata.run_id PREFIX-N)")
	runs := f.Int("runs", "", 1, "responses streamed at once")
	tokens := f.Int("tokens", "", 50, "emu_tokens of each response")
	delay := f.Duration("token-delay", "", 0, "emu_token_ms of each response")
	out := f.String("out", "", "", "write the result here (default stdout)")
	h2c := f.Bool("h2c", "", false, "HTTP/2 without TLS")
	lf := addLogFlags(f, "console")
	if _, err := parseCommand(f, lf, args, stdout, stderr); err != nil {
		return err
	}
	res, err := bench.RunReader(ctx, bench.ReaderConfig{BaseURL: *url, APIKey: *key, Prefix: *prefix, Runs: *runs, Tokens: *tokens, TokenDelay: *delay, H2C: *h2c})
	if err != nil {
		return err
	}
	data, err := json.Marshal(res)
	if err != nil {
		return err
	}
	if *out == "" {
		_, err = stdout.Write(data)
		return err
	}
	return os.WriteFile(*out, data, 0o644)
}
