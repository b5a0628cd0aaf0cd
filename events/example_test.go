package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/events"
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
