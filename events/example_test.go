package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

func ExampleNames() {
	n, _ := events.NewNames("") // the default prefix "foundryq"
	fmt.Println(n.RunSubject("run_1"))
	fmt.Println(n.EventSubject("run_1"))
	fmt.Println(n.CancelSubject("run_1"))
	fmt.Println(n.RunsStream(), n.EventsStream(), n.DeadStream())
	fmt.Println(n.Bucket(), n.Consumer())
	id, ok := n.RunIDFromSubject("foundryq.events.run_1")
	fmt.Println(id, ok)
	// Output:
	// foundryq.runs.run_1
	// foundryq.events.run_1
	// foundryq.cancel.run_1
	// FOUNDRYQ_RUNS FOUNDRYQ_EVENTS FOUNDRYQ_DEAD
	// foundryq-runs foundryq-workers
	// run_1 true
}

func ExampleDecodeRunRequest() {
	_, err := events.DecodeRunRequest([]byte(`{"run_id":"r1","model":"gpt-4o","input":"hi","metadata":{"run_id":"x"}}`))
	fmt.Println(err)
	fmt.Println(errors.Is(err, events.ErrBadMetadata), errors.Is(err, events.ErrInvalidRequest))

	_, err = events.DecodeRunRequest([]byte(`{"run_id":"r1","model":"gpt-4o","input":"hi","temperature":0.2}`))
	fmt.Println(err)

	_, err = events.DecodeRunRequest([]byte(`{"run_id":"r1","model":"gpt-4o","agent":{"name":"helper"},"input":"hi"}`))
	var ve *events.ValidationError
	if errors.As(err, &ve) {
		fmt.Printf("field=%s rule=%v\n", ve.Field, ve.Err)
	}
	// Output:
	// invalid run request: metadata.run_id: key "run_id" is reserved: foundryq sets it to the run id
	// true true
	// invalid run request: temperature: unknown field "temperature" (not part of the v1 contract)
	// field=model rule=exactly one of model or agent is required
}

// Example_client runs a whole foundryq in the process (embedded NATS, the
// Foundry emulator, one worker), submits a run, follows it to its end, and
// reads its state and the listing.
func Example_client() {
	ctx := context.Background()
	stack, err := devstack.Start(ctx, devstack.Config{Workers: 1})
	if err != nil {
		panic(err)
	}
	defer stack.Close()
	client := stack.Client // events.NewClient(nc, events.ClientConfig{}) on a connection of your own

	req := events.RunRequest{
		RunID: "run_example", Model: "gpt-4o-mini", Input: json.RawMessage(`"Say hi"`),
		Metadata: map[string]string{"emu_tokens": "6"},
	}
	res, err := client.Submit(ctx, req)
	fmt.Println(res.Status, err)

	w := client.Watch(ctx, req.RunID, events.WatchOptions{})
	defer w.Close()
	var text strings.Builder
	for {
		ev, err := w.Next(ctx)
		if errors.Is(err, io.EOF) {
			break // after the terminal event
		}
		if err != nil {
			panic(err)
		}
		switch ev.Type {
		case events.TypeTextDelta:
			text.WriteString(ev.Text)
		case events.TypeRunCompleted:
			fmt.Printf("%q\n%s %s, %d output tokens\n", text.String(), ev.Type, ev.Status, ev.Usage.OutputTokens)
		}
	}

	st, _, err := client.State(ctx, req.RunID)
	fmt.Println(st.Status, st.Terminal, err)
	for st, err := range client.Runs(ctx, events.RunFilter{Status: []events.RunStatus{events.StatusCompleted}}) {
		fmt.Println(st.RunID, st.Status, err)
	}

	// The same request again is a retry: the existing run, nothing new.
	again, err := client.Submit(ctx, req)
	fmt.Println(again.Existing, again.Status, err)
	// Output:
	// queued <nil>
	// "Six runs agent queue fair again"
	// run.completed completed, 6 output tokens
	// completed run.completed <nil>
	// run_example completed <nil>
	// true completed <nil>
}

// summarise is the README's "From Go" example, word for word from its
// comment to its closing brace (docs/snippets_test.go checks that README.md
// shows it so). Example_summarise runs it against a dev stack;
// TestSummariseFaults its failures.

// summarise submits a run, prints its text as it streams in, and cancels
// the run if ctx ends first. natsURL is "nats://127.0.0.1:4222" for
// foundryq dev, and "nats://client:" + os.Getenv("CLIENT_PASSWORD") +
// "@nats:4222" against the deploy/ stack.
func summarise(ctx context.Context, natsURL string, out io.Writer) error {
	// events.Connect is nats.Connect plus the reply inbox prefix _INBOX.<user>
	// that the deploy/ configs allow each user (derived from the URL's user).
	nc, err := events.Connect(natsURL)
	if err != nil {
		return err // exit code 5 in the CLI: NATS could not be reached
	}
	defer nc.Close()
	c, err := events.NewClient(nc, events.ClientConfig{})
	if err != nil {
		return err
	}

	req := events.RunRequest{
		RunID:          events.NewRunID(),
		Model:          "gpt-4o", // your Foundry deployment's name
		Input:          json.RawMessage(`"Summarise the ticket"`),
		Tools:          []json.RawMessage{json.RawMessage(`{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp","require_approval":"never"}`)},
		TimeoutSeconds: 300,
	}
	// errors.Is(err, events.ErrInvalidRequest), ErrAlreadyQueued, ErrRunIDUsed, ErrQueueFull
	res, err := c.Submit(ctx, req)
	if err != nil {
		return err
	}
	// res.Existing: this run id already ran this very request (a retry).
	fmt.Fprintln(out, "submitted:", res.Status)

	w := c.Watch(ctx, req.RunID, events.WatchOptions{}) // from the start; heartbeats on
	defer w.Close()
	for {
		ev, err := w.Next(ctx)
		switch {
		case errors.Is(err, io.EOF):
			return nil // after the terminal event
		case ctx.Err() != nil:
			// The caller gave up: stop the response on Foundry too.
			reply, cerr := c.Cancel(context.WithoutCancel(ctx), req.RunID, "caller gave up")
			fmt.Fprintln(out, "cancel:", reply.Result) // cancelling, cancelled, already_finished, not_found
			return errors.Join(ctx.Err(), cerr)
		case err != nil:
			return err
		}
		switch ev.Type {
		case events.TypeTextDelta:
			fmt.Fprint(out, ev.Text)
		case events.TypeRunCompleted, events.TypeRunCancelled:
			fmt.Fprintln(out, "\n"+string(ev.Type), ev.Status, ev.Reason)
		case events.TypeRunFailed:
			if ev.Error == nil {
				return fmt.Errorf("run %s failed", req.RunID)
			}
			return fmt.Errorf("run %s failed: %s: %s", req.RunID, ev.Error.Code, ev.Error.Message)
		}
	}
}

// Example_summarise runs the README's example against a dev stack whose
// NATS listens on a free port (foundryq dev's is 4222). The text differs
// from run to run (the run id is new each time), so the example prints
// its shape.
func Example_summarise() {
	ctx := context.Background()
	stack, err := devstack.Start(ctx, devstack.Config{NATS: natsembed.Config{Port: -1}, Workers: 1})
	if err != nil {
		panic(err)
	}
	defer stack.Close()

	var out strings.Builder
	if err := summarise(ctx, stack.NATS.ClientURL(), &out); err != nil {
		panic(err)
	}
	lines := strings.Split(out.String(), "\n")
	fmt.Println(lines[0])
	fmt.Println(len(strings.Fields(lines[1])), "words of text")
	fmt.Println(lines[2])
	// Output:
	// submitted: queued
	// 20 words of text
	// run.completed completed
}

// ExampleClient_Submit shows what Submit refuses: a request that breaks a
// rule (nothing is published), and a second request under a run id that
// is still queued. No worker runs here, so the first run stays queued.
func ExampleClient_Submit() {
	ctx := context.Background()
	stack, err := devstack.Start(ctx, devstack.Config{})
	if err != nil {
		panic(err)
	}
	defer stack.Close()
	client := stack.Client

	bad := events.RunRequest{RunID: "run_submit", Model: "gpt-4o-mini"}
	_, err = client.Submit(ctx, bad)
	var ve *events.ValidationError
	fmt.Println(errors.Is(err, events.ErrInvalidRequest), errors.As(err, &ve) && ve.Field == "input", err)

	req := events.RunRequest{RunID: "run_submit", Model: "gpt-4o-mini", Input: json.RawMessage(`"Say hi"`)}
	res, err := client.Submit(ctx, req)
	fmt.Println(res.Status, res.Existing, err)

	_, err = client.Submit(ctx, req)
	fmt.Println(errors.Is(err, events.ErrAlreadyQueued), err)
	// Output:
	// true true invalid run request: input: required: a non-empty string or a non-empty array of input items
	// queued false <nil>
	// true events: submit run run_submit: run already queued
}

// ExampleClient_Watch follows a run from its first event to its last.
func ExampleClient_Watch() {
	ctx := context.Background()
	stack, err := devstack.Start(ctx, devstack.Config{Workers: 1})
	if err != nil {
		panic(err)
	}
	defer stack.Close()
	client := stack.Client

	req := events.RunRequest{
		RunID: "run_watch", Model: "gpt-4o-mini", Input: json.RawMessage(`"Say hi"`),
		Metadata: map[string]string{"emu_tokens": "3"},
	}
	if _, err := client.Submit(ctx, req); err != nil {
		panic(err)
	}
	w := client.Watch(ctx, req.RunID, events.WatchOptions{})
	defer w.Close()
	var text strings.Builder
	for {
		ev, err := w.Next(ctx)
		if errors.Is(err, io.EOF) {
			break // after the terminal event
		}
		if err != nil {
			panic(err)
		}
		switch ev.Type {
		case events.TypeRunStarted:
			fmt.Println(ev.Seq, ev.Type, "attempt", ev.Attempt)
		case events.TypeTextDelta: // one or more tokens each (the worker merges text that arrives within 50ms)
			text.WriteString(ev.Text)
		case events.TypeRunCompleted:
			fmt.Printf("%q\n", text.String())
			fmt.Println(ev.Type, ev.Status, ev.Usage.OutputTokens, "output tokens")
		}
	}
	// Output:
	// 1 run.started attempt 1
	// "Server eight every"
	// run.completed completed 3 output tokens
}

// ExampleClient_Cancel cancels a run while it streams: the worker stops
// the response on Foundry, and the run ends run.cancelled with Foundry's
// word on the response.
func ExampleClient_Cancel() {
	ctx := context.Background()
	stack, err := devstack.Start(ctx, devstack.Config{Workers: 1})
	if err != nil {
		panic(err)
	}
	defer stack.Close()
	client := stack.Client

	req := events.RunRequest{
		RunID: "run_cancel", Model: "gpt-4o-mini", Input: json.RawMessage(`"Write a long story"`),
		Metadata: map[string]string{"emu_tokens": "10000", "emu_token_ms": "10"},
	}
	if _, err := client.Submit(ctx, req); err != nil {
		panic(err)
	}
	w := client.Watch(ctx, req.RunID, events.WatchOptions{})
	defer w.Close()
	cancelled := false
	for {
		ev, err := w.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			panic(err)
		}
		switch ev.Type {
		case events.TypeTextDelta:
			if !cancelled { // the first text: the response streams
				cancelled = true
				reply, err := client.Cancel(ctx, req.RunID, "user pressed stop")
				fmt.Println("cancel:", reply.Result, err)
			}
		case events.TypeRunCancelled:
			fmt.Println(ev.Type, ev.Reason, ev.UpstreamStatus)
		}
	}
	// Output:
	// cancel: cancelling <nil>
	// run.cancelled requested cancelled
}

// ExampleClient_Approve answers a run that asks: its MCP tool needs
// approval (require_approval is not "never"), so the response stops at an
// approval request and the run waits, holding no worker, until the caller
// approves or denies the call.
func ExampleClient_Approve() {
	ctx := context.Background()
	stack, err := devstack.Start(ctx, devstack.Config{Workers: 1})
	if err != nil {
		panic(err)
	}
	defer stack.Close()
	client := stack.Client

	req := events.RunRequest{
		RunID: "run_approve", Model: "gpt-4o-mini", Input: json.RawMessage(`"Look up the customer"`),
		Tools:    []json.RawMessage{json.RawMessage(`{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp","allowed_tools":["lookup"]}`)},
		Metadata: map[string]string{"emu_tool_ms": "10", "emu_tokens": "3"},
	}
	if _, err := client.Submit(ctx, req); err != nil {
		panic(err)
	}
	w := client.Watch(ctx, req.RunID, events.WatchOptions{})
	defer w.Close()
	for {
		ev, err := w.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			panic(err)
		}
		switch ev.Type {
		case events.TypeInputRequired:
			for _, it := range ev.Items {
				fmt.Println("asks:", it.Kind, it.ServerLabel, it.Name)
				reply, err := client.Approve(ctx, req.RunID, it.ID, true, "")
				fmt.Println("approve:", reply.Result, err)
			}
		case events.TypeToolStarted, events.TypeToolCompleted:
			fmt.Println(ev.Type, ev.Tool.Name)
		case events.TypeRunCompleted:
			fmt.Println(ev.Type, ev.Status)
		}
	}
	// Output:
	// asks: approval crm lookup
	// approve: accepted <nil>
	// tool.started lookup
	// tool.completed lookup
	// run.completed completed
}

// ExampleClient_SendOutput answers a function call: the response stops at
// a function_call item, and the run goes on once the caller sends the
// function's output.
func ExampleClient_SendOutput() {
	ctx := context.Background()
	stack, err := devstack.Start(ctx, devstack.Config{Workers: 1})
	if err != nil {
		panic(err)
	}
	defer stack.Close()
	client := stack.Client

	req := events.RunRequest{
		RunID: "run_output", Model: "gpt-4o-mini", Input: json.RawMessage(`"What is the weather in Oslo?"`),
		Tools:    []json.RawMessage{json.RawMessage(`{"type":"function","name":"get_weather"}`)},
		Metadata: map[string]string{"emu_tool_ms": "10", "emu_tokens": "3"},
	}
	if _, err := client.Submit(ctx, req); err != nil {
		panic(err)
	}
	w := client.Watch(ctx, req.RunID, events.WatchOptions{})
	defer w.Close()
	for {
		ev, err := w.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			panic(err)
		}
		switch ev.Type {
		case events.TypeInputRequired:
			for _, it := range ev.Items {
				fmt.Println("asks:", it.Kind, it.Name)
				reply, err := client.SendOutput(ctx, req.RunID, it.ID, `{"celsius":21}`)
				fmt.Println("output:", reply.Result, err)
			}
		case events.TypeRunCompleted:
			fmt.Println(ev.Type, ev.Status)
		}
	}
	// Output:
	// asks: function_call get_weather
	// output: accepted <nil>
	// run.completed completed
}

// TestSummariseFaults drives the README example's failures: a NATS URL
// nobody listens on is an error (not a panic on a nil client later), and a
// caller giving up after the submit cancels the run.
func TestSummariseFaults(t *testing.T) {
	t.Run("NATS unreachable", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // a port nobody listens on
		var out strings.Builder
		err = summarise(testCtx(t), "nats://"+addr, &out)
		if !errors.Is(err, nats.ErrNoServers) || out.Len() != 0 {
			t.Fatalf("summarise on a closed port: %v, printed %q; want nats.ErrNoServers and nothing printed", err, out.String())
		}
	})
	t.Run("caller gives up", func(t *testing.T) {
		// No worker: the run stays queued until the caller gives up.
		stack := devstack.StartT(t, devstack.Config{NATS: natsembed.Config{Port: -1}})
		ctx, cancel := context.WithCancel(testCtx(t))
		defer cancel()
		var out strings.Builder
		giveUp := writerFunc(func(p []byte) (int, error) {
			if strings.HasPrefix(string(p), "submitted:") {
				cancel()
			}
			return out.Write(p)
		})
		err := summarise(ctx, stack.NATS.ClientURL(), giveUp)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("summarise after the caller gave up: %v, want context.Canceled", err)
		}
		if out.String() != "submitted: queued\ncancel: cancelling\n" {
			t.Fatalf("printed %q", out.String())
		}
		// The cancel is on record: the worker that takes the run applies it.
		if _, err := stack.StartWorker(consumer.Config{WorkerID: "late"}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 30*time.Second, "the queued run ends cancelled", func() bool {
			var ended []events.RunStatus
			for st, err := range stack.Client.Runs(testCtx(t), events.RunFilter{}) {
				if err != nil {
					t.Fatal(err)
				}
				ended = append(ended, st.Status)
			}
			return len(ended) == 1 && ended[0] == events.StatusCancelled
		})
	})
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A run's fairness key and priority come from its body or its headers;
// a producer that cannot touch the body sets the headers.
func ExampleFairnessOf() {
	req := events.RunRequest{RunID: "r1", Model: "gpt-4o", Input: json.RawMessage(`"hi"`), Priority: events.PriorityHigh}
	h := nats.Header{}
	h.Set(events.HeaderFairnessKey, "team-a")
	f, err := events.FairnessOf(req, h)
	fmt.Println(f.Key, f.Priority, err)

	h.Set(events.HeaderPriority, "low") // disagrees with the body
	_, err = events.FairnessOf(req, h)
	fmt.Println(errors.Is(err, events.ErrFairnessConflict))
	// Output:
	// team-a high <nil>
	// true
}
