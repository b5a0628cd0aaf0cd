package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/foundryq/foundryq/events"
)

// submitFlags are the settings of a run request on the command line.
type submitFlags struct {
	model, agent, input, instructions, runID, options *string
	fairnessKey, priority                             *string
	timeout, disconnect, inputTimeout                 *time.Duration
	maxTokens                                         *int
	metadata, tools                                   *[]string
}

func addSubmitFlags(f *flags) submitFlags {
	return submitFlags{
		model:        f.String("model", "", "", "model deployment name (or use --agent)"),
		agent:        f.String("agent", "", "", "Foundry agent as NAME or NAME:VERSION (or use --model)"),
		input:        f.String("input", "", "", "input text; a value starting with [ is taken as a JSON array of input items"),
		instructions: f.String("instructions", "", "", "system instructions"),
		runID:        f.String("run-id", "", "", "run id (default: generated)"),
		timeout:      f.Duration("timeout", "", 0, "run deadline; on expiry the run is cancelled server-side (0: worker default)"),
		disconnect:   f.Duration("cancel-on-disconnect", "", 0, "cancel server-side after this long without a watcher (0: never)"),
		inputTimeout: f.Duration("input-timeout", "", 0, "end the run input_timeout when a pause (approvals, function outputs it waits for) lasts longer (0: no bound but the run's)"),
		maxTokens:    f.Int("max-output-tokens", "", 0, "upper bound on output tokens (0: Foundry default)"),
		metadata:     f.Repeated("metadata", "metadata entry as key=value"),
		tools:        f.Repeated("tool", "a Responses tool as JSON, e.g. {\"type\":\"mcp\",\"server_label\":\"x\",\"server_url\":\"https://...\",\"require_approval\":\"never\"}"),
		options:      f.String("options", "", "", "raw Responses fields as a JSON object, e.g. {\"temperature\":0.2}"),
		fairnessKey:  f.String("fairness-key", "", "", "who the run is for (a customer, a team), [A-Za-z0-9_-]{1,64} (default: \"default\")"),
		priority:     f.String("priority", "", "", "high, normal or low (default: normal)"),
	}
}

func runSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("submit", "submit --model M | --agent NAME[:VERSION] --input TEXT [flags]")
	nf := addNATSFlags(f)
	sf := addSubmitFlags(f)
	watch := f.Bool("watch", "", false, "watch the run after submitting (exit code as for watch)")
	if err := f.parse(args, stdout); err != nil {
		return err
	}
	if err := needArgs(f, 0, "no arguments"); err != nil {
		return err
	}
	req, err := sf.request()
	if err != nil {
		return usageError{fmt.Errorf("submit: %w", err)}
	}
	c, closeConn, err := nf.client("foundryq-submit")
	if err != nil {
		return err
	}
	defer closeConn()
	submitted := time.Now()
	res, err := c.Submit(ctx, req)
	if err != nil {
		if errors.Is(err, events.ErrInvalidRequest) {
			return usageError{fmt.Errorf("submit: %w", err)}
		}
		return fmt.Errorf("submit: %w", err)
	}
	fmt.Fprintln(stdout, req.RunID)
	if res.Existing {
		fmt.Fprintf(stderr, "run %s already ran this request (a retry): it is %s\n", req.RunID, res.Status)
	}
	if !*watch {
		return nil
	}
	return watchRun(ctx, c, req.RunID, submitted, events.WatchOptions{}, false, stdout, stderr)
}

// request builds and validates the run request the flags describe.
func (sf submitFlags) request() (events.RunRequest, error) {
	req := events.RunRequest{
		RunID:                     *sf.runID,
		Model:                     *sf.model,
		Instructions:              *sf.instructions,
		MaxOutputTokens:           *sf.maxTokens,
		TimeoutSeconds:            int((*sf.timeout + time.Second - 1) / time.Second),
		CancelOnDisconnectSeconds: int((*sf.disconnect + time.Second - 1) / time.Second),
		InputTimeoutSeconds:       int((*sf.inputTimeout + time.Second - 1) / time.Second),
		FairnessKey:               *sf.fairnessKey,
		Priority:                  events.Priority(*sf.priority),
	}
	if req.RunID == "" {
		req.RunID = events.NewRunID()
	}
	if *sf.agent != "" {
		name, version, _ := strings.Cut(*sf.agent, ":")
		req.Agent = &events.AgentRef{Name: name, Version: version}
	}
	if input := *sf.input; strings.HasPrefix(strings.TrimSpace(input), "[") {
		req.Input = json.RawMessage(input)
	} else {
		b, _ := json.Marshal(input)
		req.Input = b
	}
	for _, kv := range *sf.metadata {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return req, fmt.Errorf("--metadata %q: want key=value", kv)
		}
		if req.Metadata == nil {
			req.Metadata = map[string]string{}
		}
		req.Metadata[k] = v
	}
	for _, t := range *sf.tools {
		if !json.Valid([]byte(t)) {
			return req, fmt.Errorf("--tool %q: not valid JSON", t)
		}
		req.Tools = append(req.Tools, json.RawMessage(t))
	}
	if *sf.options != "" {
		if err := json.Unmarshal([]byte(*sf.options), &req.Options); err != nil {
			return req, fmt.Errorf("--options: want a JSON object: %w", err)
		}
	}
	return req, req.Validate()
}

func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("watch", "watch RUN_ID [flags]")
	nf := addNATSFlags(f)
	fromNow := f.Bool("from-now", "", false, "show only events from now on (default: from the start)")
	asJSON := f.Bool("json", "", false, "print every event as a JSON line on stdout")
	noBeat := f.Bool("no-heartbeat", "", false, "do not send watcher heartbeats (the run may then be cancelled as abandoned)")
	if err := f.parse(args, stdout); err != nil {
		return err
	}
	runID, err := runIDArg(f)
	if err != nil {
		return err
	}
	c, closeConn, err := nf.client("foundryq-watch")
	if err != nil {
		return err
	}
	defer closeConn()
	opts := events.WatchOptions{NoHeartbeat: *noBeat}
	if *fromNow {
		opts.From = events.FromNow
	}
	return watchRun(ctx, c, runID, time.Time{}, opts, *asJSON, stdout, stderr)
}

// watchRun prints a run's events until its terminal event, and while they
// are quiet what the run waits for (progress). submitted is when the run
// was submitted, if known. The exit code says how it ended: exitOK
// completed, exitFailed failed or incomplete (run.completed with status
// incomplete did not finish its work), exitCancelled.
func watchRun(ctx context.Context, c *events.Client, runID string, submitted time.Time, opts events.WatchOptions, asJSON bool, stdout, stderr io.Writer) error {
	ctx, stop := context.WithCancelCause(ctx)
	p := newProgress(c, runID, submitted, stderr)
	polled := make(chan struct{})
	go func() { defer close(polled); p.run(ctx, stop) }()
	defer func() { stop(nil); <-polled }() // no progress line after the watch's last word
	w := c.Watch(ctx, runID, opts)
	defer w.Close()
	for {
		ev, err := w.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if errors.Is(context.Cause(ctx), errNoSuchRun) {
			fmt.Fprintf(stderr, "watch %s: no such run (none recorded, none queued)\n", runID)
			return exitCode(exitNotFound)
		}
		if err != nil {
			return fmt.Errorf("watch %s: %w", runID, err)
		}
		p.sawEvent(time.Now())
		if asJSON {
			b, _ := json.Marshal(ev)
			fmt.Fprintln(stdout, string(b))
		} else {
			printEvent(ev, stdout, stderr)
		}
		switch ev.Type {
		case events.TypeRunCompleted:
			if ev.Status == "incomplete" {
				return exitCode(exitFailed)
			}
			return nil
		case events.TypeRunFailed:
			return exitCode(exitFailed)
		case events.TypeRunCancelled:
			return exitCode(exitCancelled)
		}
	}
}

// printEvent writes text to stdout and everything else as a line to stderr.
func printEvent(ev events.RunEvent, stdout, stderr io.Writer) {
	switch ev.Type {
	case events.TypeTextDelta, events.TypeRefusalDelta:
		fmt.Fprint(stdout, ev.Text)
	case events.TypeRunStarted:
		fmt.Fprintf(stderr, "[run %s started: response %s, attempt %d, worker %s]\n", ev.RunID, ev.ResponseID, ev.Attempt, ev.Worker)
	case events.TypeToolStarted, events.TypeToolCompleted, events.TypeToolFailed:
		verb := strings.TrimPrefix(string(ev.Type), "tool.")
		line := fmt.Sprintf("[tool %s %s", ev.Tool.Name, verb)
		if ev.Tool.ServerLabel != "" {
			line += " on " + ev.Tool.ServerLabel
		}
		if ev.Error != nil {
			line += ": " + ev.Error.Message
		}
		fmt.Fprintln(stderr, line+"]")
	case events.TypeInputRequired:
		fmt.Fprintln(stdout)
		for _, it := range ev.Items {
			fmt.Fprintln(stderr, describeAsked(ev.RunID, it))
		}
	case events.TypeInputReceived:
		fmt.Fprintf(stderr, "[answer to %s received]\n", ev.Input.ID)
	case events.TypeStepStarted:
		fmt.Fprintf(stderr, "[step %d started: response %s]\n", ev.Step, ev.ResponseID)
	case events.TypeRunCompleted:
		fmt.Fprintln(stdout)
		line := "[run completed"
		if ev.Status == "incomplete" {
			line = "[run incomplete (" + ev.IncompleteReason + ")"
		}
		if ev.Refusal {
			line += ": the model refused"
		}
		fmt.Fprintln(stderr, line+usageText(ev)+"]")
	case events.TypeRunFailed:
		fmt.Fprintln(stdout)
		line := fmt.Sprintf("[run failed: %s: %s", ev.Error.Code, ev.Error.Message)
		if ev.Error.RequestID != "" {
			line += " (request id " + ev.Error.RequestID + ")"
		}
		fmt.Fprintln(stderr, line+"]")
	case events.TypeRunCancelled:
		fmt.Fprintln(stdout)
		why := map[string]string{
			events.ReasonRequested: "a cancel was requested",
			events.ReasonTimeout:   "the run passed its deadline",
			events.ReasonAbandoned: "no watcher was left",
		}[ev.Reason]
		if why == "" {
			why = ev.Reason
		}
		upstream := ev.UpstreamStatus
		if upstream == "" {
			upstream = "never started"
		}
		fmt.Fprintf(stderr, "[run cancelled: %s; Foundry status: %s%s]\n", why, upstream, usageText(ev))
	default:
		fmt.Fprintf(stderr, "[%s]\n", ev.Type)
	}
}

// describeAsked says what a waiting run asks and how to answer it.
func describeAsked(runID string, it events.InputItem) string {
	if it.Kind == events.InputApproval {
		return fmt.Sprintf("[run %s waits for approval of %s on MCP server %s, arguments %s;\n answer: foundryq approve %s %s   (or --deny --reason TEXT)]",
			runID, it.Name, it.ServerLabel, it.Arguments, runID, it.ID)
	}
	return fmt.Sprintf("[run %s waits for the output of function %s, arguments %s;\n answer: foundryq output %s %s --output JSON   (or --output @FILE)]",
		runID, it.Name, it.Arguments, runID, it.ID)
}

func usageText(ev events.RunEvent) string {
	switch {
	case ev.Usage != nil:
		return fmt.Sprintf("; tokens in %d, out %d", ev.Usage.InputTokens, ev.Usage.OutputTokens)
	case ev.UsageUnknown:
		return "; usage unknown"
	}
	return ""
}

func runCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("cancel", "cancel RUN_ID [flags]")
	nf := addNATSFlags(f)
	reason := f.String("reason", "", "", "a note on why (logged by the worker)")
	if err := f.parse(args, stdout); err != nil {
		return err
	}
	runID, err := runIDArg(f)
	if err != nil {
		return err
	}
	c, closeConn, err := nf.client("foundryq-cancel")
	if err != nil {
		return err
	}
	defer closeConn()
	reply, err := c.Cancel(ctx, runID, *reason)
	if err != nil {
		return fmt.Errorf("cancel %s: %w", runID, err)
	}
	if reply.Error != "" {
		return fmt.Errorf("cancel %s: %s", runID, reply.Error)
	}
	fmt.Fprintln(stdout, describeCancel(reply))
	if reply.Result == events.CancelNotFound {
		return exitCode(exitNotFound)
	}
	return nil
}

func describeCancel(r events.CancelReply) string {
	switch r.Result {
	case events.CancelCancelling:
		watch := "foundryq watch " + r.RunID
		if r.Unrecorded {
			// The worker told the owner, but JetStream could not store the
			// cancel (its store is full): nothing on record to fall back on.
			return "run " + r.RunID + ": cancelling, but the cancel could not be stored (JetStream's store is full); " +
				"the run's owner was told and stops it upstream. Send the cancel again if the run does not end (" + watch + ")"
		}
		s := "run " + r.RunID + ": cancelling; the cancel is recorded, not yet confirmed"
		if r.UpstreamStatus != "" {
			s += " (Foundry status now: " + r.UpstreamStatus + ")"
		}
		return s + ". Foundry's outcome follows on the run's events (" + watch + ")"
	case events.CancelCancelled:
		if r.UpstreamStatus != "" {
			return "run " + r.RunID + ": cancelled while it waited for answers; its last response had ended (Foundry status: " + r.UpstreamStatus + ")"
		}
		return "run " + r.RunID + ": cancelled before it started; Foundry was never called"
	case events.CancelAlreadyFinished:
		if r.Terminal == events.TypeRunCancelled {
			// Also the answer when the run's owner ended it from the stored
			// cancel before the request was answered.
			s := "run " + r.RunID + ": cancelled"
			if r.UpstreamStatus != "" {
				s += " (Foundry status: " + r.UpstreamStatus + ")"
			}
			return s
		}
		return "run " + r.RunID + ": already finished (" + string(r.Terminal) + "); nothing to cancel"
	case events.CancelNotFound:
		return "run " + r.RunID + ": not found (no queued, running or recorded run has this id)"
	}
	return fmt.Sprintf("run %s: %s", r.RunID, r.Result)
}
