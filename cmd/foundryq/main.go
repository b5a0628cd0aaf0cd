// Command foundryq runs Azure AI Foundry agent runs over NATS JetStream:
// workers, the client commands, a development mode and a Foundry emulator.
//
// Usage: foundryq <command> [flags]; foundryq <command> --help lists every
// setting with its environment variable and default.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"worker":   {"run a worker: pull run requests, stream runs from Foundry, answer cancels", runWorker},
	"submit":   {"submit a run request (and optionally watch it)", runSubmit},
	"watch":    {"follow a run's events: text to stdout, lifecycle to stderr", runWatch},
	"cancel":   {"cancel a run server-side", runCancel},
	"runs":     {"show the recorded state of one run or of all runs", runRuns},
	"dev":      {"embedded NATS + Foundry emulator + workers, for development", runDev},
	"demo":     {"a self-contained demonstration of streaming and server-side cancel", runDemo},
	"emulator": {"serve the Foundry Responses API emulator", runEmulator},
	"bench":    {"measure cancel and relay latency on embedded NATS and the emulator", runBench},
	"gateway":  {"serve the HTTP/SSE API and the web console", runGateway},
}

// errHelp means help was printed on request.
var errHelp = errors.New("help requested")

// exitCode carries a specific process exit status.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "foundryq: unknown command %q\n\n", args[0])
		printUsage(stderr)
		return 2
	}
	err := cmd.run(ctx, args[1:], stdout, stderr)
	var code exitCode
	var usage usageError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.As(err, &code):
		return int(code)
	case errors.As(err, &usage):
		fmt.Fprintln(stderr, "foundryq:", err)
		return 2
	default:
		fmt.Fprintln(stderr, "foundryq:", err)
		return 1
	}
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "foundryq runs Azure AI Foundry agent runs over NATS JetStream.\n\nUsage: foundryq <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'foundryq <command> --help' for its settings. Quick start: foundryq dev")
}
