package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/foundryq/foundryq/events"
)

// runApprove answers an approval request of a waiting run.
func runApprove(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("approve", "approve RUN_ID ID [--deny] [--reason TEXT] [flags]")
	nf := addNATSFlags(f)
	deny := f.Bool("deny", "", false, "deny the call instead of approving it")
	reason := f.String("reason", "", "", "a reason, sent to Foundry with the answer")
	if err := f.parse(args, stdout); err != nil {
		return err
	}
	runID, id, err := answerArgs(f)
	if err != nil {
		return err
	}
	return sendAnswer(ctx, nf, "foundryq-approve", runID, events.InputAnswer{ID: id, Approve: new(!*deny), Reason: *reason}, stdout)
}

// runOutput answers a function call of a waiting run with its output.
func runOutput(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("output", "output RUN_ID CALL_ID --output TEXT|@FILE [flags]")
	nf := addNATSFlags(f)
	output := f.String("output", "", "", "the function's output (usually JSON), or @FILE to read it from a file (@- for stdin)")
	if err := f.parse(args, stdout); err != nil {
		return err
	}
	runID, id, err := answerArgs(f)
	if err != nil {
		return err
	}
	out, err := readOutput(*output)
	if err != nil {
		return usageError{err}
	}
	return sendAnswer(ctx, nf, "foundryq-output", runID, events.InputAnswer{ID: id, Output: &out}, stdout)
}

// answerArgs returns the RUN_ID and ID arguments.
func answerArgs(f *flags) (runID, id string, err error) {
	if f.NArg() != 2 {
		return "", "", usageError{errors.New("want RUN_ID and the ID of what the run asks (see foundryq watch)")}
	}
	runID, id = f.Arg(0), f.Arg(1)
	if !events.ValidRunID(runID) {
		return "", "", usageError{fmt.Errorf("run id %q: %w", runID, events.ErrBadRunID)}
	}
	if !events.ValidInputID(id) {
		return "", "", usageError{fmt.Errorf("id %q: %w", id, events.ErrBadAnswer)}
	}
	return runID, id, nil
}

// readOutput reads --output: the text itself, or @FILE (@- is stdin).
func readOutput(v string) (string, error) {
	path, ok := strings.CutPrefix(v, "@")
	if !ok {
		if v == "" {
			return "", errors.New("--output is required (the function's output, or @FILE)")
		}
		return v, nil
	}
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(io.LimitReader(os.Stdin, events.MaxInputOutputLen+1))
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return "", fmt.Errorf("--output %s: %w", v, err)
	}
	return string(b), nil
}

func sendAnswer(ctx context.Context, nf natsFlags, name, runID string, a events.InputAnswer, stdout io.Writer) error {
	c, closeConn, err := nf.client(name)
	if err != nil {
		return err
	}
	defer closeConn()
	reply, err := c.Answer(ctx, runID, a)
	if err != nil {
		return err
	}
	switch reply.Result {
	case events.InputAccepted:
		fmt.Fprintf(stdout, "run %s: answer to %s accepted; the run goes on once everything it asked is answered (foundryq watch %s)\n", runID, a.ID, runID)
	case events.InputAlreadyAnswered:
		fmt.Fprintf(stdout, "run %s: %s was answered before; the first answer stands\n", runID, a.ID)
	case events.InputRunFinished:
		fmt.Fprintf(stdout, "run %s has ended; the answer changes nothing\n", runID)
		return exitCode(exitFailed)
	case events.InputUnknownID:
		why := ""
		if reply.Error != "" {
			why = " (" + reply.Error + ")"
		}
		fmt.Fprintf(stdout, "run %s does not wait for %s%s\n", runID, a.ID, why)
		return exitCode(exitNotFound)
	}
	return nil
}
