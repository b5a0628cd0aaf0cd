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
	"time"

	"go.opentelemetry.io/otel"

	"github.com/foundryq/foundryq/internal/secrets"
	"github.com/foundryq/foundryq/internal/tracing"
)

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	hidden  bool // a helper process of another command, not in the usage
}

var commands = map[string]command{
	"worker":       {"run a worker: pull run requests, stream runs from Foundry, answer cancels", runWorker, false},
	"submit":       {"submit a run request (and optionally watch it)", runSubmit, false},
	"watch":        {"follow a run's events: text to stdout, lifecycle to stderr", runWatch, false},
	"cancel":       {"cancel a run server-side", runCancel, false},
	"approve":      {"approve (or --deny) an MCP tool call a waiting run asks about", runApprove, false},
	"output":       {"send the output of a function call a waiting run asks for", runOutput, false},
	"runs":         {"show the recorded state of one run or of all runs", runRuns, false},
	"dev":          {"embedded NATS + Foundry emulator + workers, for development", runDev, false},
	"demo":         {"a self-contained demonstration of streaming and server-side cancel", runDemo, false},
	"emulator":     {"serve the Foundry Responses API emulator", runEmulator, false},
	"conformance":  {"compare the emulator with a real Azure OpenAI / Foundry endpoint, case by case", runConformance, false},
	"bench":        {"measure foundryq (NATS, emulator, worker: separate processes) against a bare reader and raw JetStream", runBench, false},
	"bench-reader": {"the bare SSE reader of foundryq bench", runBenchReader, true},
	"gateway":      {"serve the HTTP/SSE API and the web console", runGateway, false},
	"schema":       {"print the JSON Schema of a message of the wire contract, or list them", runSchema, false},
}

// errHelp means help was printed on request.
var errHelp = errors.New("help requested")

// Exit codes. They never overlap: a script can tell a usage error from a run
// that failed, and NATS that cannot be reached from both.
const (
	exitOK        = 0 // done; for watch and submit --watch: the run completed
	exitError     = 1 // anything else went wrong
	exitUsage     = 2 // bad command, flag or argument (as package flag does)
	exitFailed    = 3 // watch: the run ended run.failed, or run.completed with status incomplete
	exitCancelled = 4 // watch: the run ended run.cancelled
	exitNATS      = 5 // NATS could not be reached
	exitNotFound  = 6 // cancel or runs RUN_ID: no such run
)

// exitCode carries a specific process exit status.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// natsUnreachable marks a failure to connect to NATS (exit 5).
type natsUnreachable struct{ error }

func (e natsUnreachable) Unwrap() error { return e.error }

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
			return exitUsage
		}
		return exitOK
	}
	// Logs and errors go to stderr: scrub every credential given to this
	// command from it, whatever library quotes it.
	stderr = markTerminal(stderr, secrets.NewWriter(stderr, knownSecrets(args[1:], os.LookupEnv)...))
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "foundryq: unknown command %q\n\n", args[0])
		printUsage(stderr)
		return exitUsage
	}
	stopTracing, err := startTracing(ctx, args[0], stderr)
	if err != nil {
		fmt.Fprintln(stderr, "foundryq:", err)
		return exitUsage
	}
	err = cmd.run(ctx, args[1:], stdout, stderr)
	stopTracing()
	var code exitCode
	var usage usageError
	var unreachable natsUnreachable
	switch {
	case err == nil, errors.Is(err, errHelp):
		return exitOK
	case errors.As(err, &code):
		return int(code)
	case errors.As(err, &usage):
		fmt.Fprintln(stderr, "foundryq:", err)
		return exitUsage
	case errors.As(err, &unreachable):
		fmt.Fprintln(stderr, "foundryq:", err)
		return exitNATS
	default:
		fmt.Fprintln(stderr, "foundryq:", err)
		return exitError
	}
}

// startTracing sets up OpenTelemetry tracing as the standard OTEL_*
// environment asks (tracing.PlanFromEnv; off unless it names an exporter)
// for command: the global tracer provider, with service.name
// "foundryq-<command>" unless OTEL_SERVICE_NAME says otherwise, and the W3C
// propagator. console spans go to stderr. The returned function flushes
// the spans, for at most 5s.
func startTracing(ctx context.Context, command string, stderr io.Writer) (func(), error) {
	plan, err := tracing.PlanFromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	tp, err := tracing.NewProvider(ctx, plan, "foundryq-"+command, stderr)
	if err != nil || tp == nil {
		return func() {}, err
	}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(tracing.Propagator)
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			fmt.Fprintln(stderr, "foundryq: flush traces:", err)
		}
	}, nil
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "foundryq runs Azure AI Foundry agent runs over NATS JetStream.\n\nUsage: foundryq <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n, c := range commands {
		if c.hidden {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'foundryq <command> --help' for its settings. Quick start: foundryq dev")
	fmt.Fprintln(w, "\nExit codes: 0 ok (a watched run completed), 1 error, 2 usage error, 3 the run failed,\n4 the run was cancelled, 5 NATS unreachable, 6 no such run.")
}
