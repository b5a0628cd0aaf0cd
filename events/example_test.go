package events_test

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
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

// Example_client submits a run, plays the worker's part by publishing two
// events, and watches the run to its end, all on an embedded server.
func Example_client() {
	srv, err := natsembed.Start(natsembed.Config{InProcess: true})
	if err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	ctx := context.Background()
	js, _ := jetstream.New(nc)
	names := events.Names{}
	if _, err := events.Provision(ctx, js, names, events.ProvisionConfig{}); err != nil {
		panic(err)
	}

	client, _ := events.NewClient(nc, events.ClientConfig{})
	res, err := client.Submit(ctx, events.RunRequest{RunID: "run_example", Model: "gpt-4o-mini", Input: []byte(`"Say hi"`)})
	fmt.Println(res.Stream, res.Sequence, err)

	// What a worker would publish.
	for i, ev := range []events.RunEvent{
		{Type: events.TypeTextDelta, Text: "Hi!"},
		{Type: events.TypeRunCompleted, Status: "completed", Usage: &events.Usage{InputTokens: 2, OutputTokens: 1, TotalTokens: 3}},
	} {
		ev.RunID, ev.Seq = "run_example", uint64(i+1)
		msg, _ := events.NewEventMsg(names, ev, -1)
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			panic(err)
		}
	}

	w := client.Watch(ctx, "run_example", events.WatchOptions{NoHeartbeat: true})
	defer w.Close()
	for {
		ev, err := w.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			panic(err)
		}
		fmt.Println(ev.Seq, ev.Type, ev.Text)
	}
	// Output:
	// FOUNDRYQ_RUNS 1 <nil>
	// 1 text.delta Hi!
	// 2 run.completed
}
