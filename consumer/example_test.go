package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
)

// A worker on an embedded NATS server, running a request against the
// Foundry emulator; the client follows the run's events.
func Example() {
	ns, _ := natsembed.Start(natsembed.Config{InProcess: true})
	defer ns.Shutdown()
	emu := foundrytest.NewServer(foundrytest.Config{})
	defer emu.Close()
	up, _ := foundry.New(foundry.Config{BaseURL: emu.BaseURL(), APIKey: "key"})
	defer up.CloseIdleConnections()
	nc, _ := ns.Connect()
	defer nc.Close()

	// A worker provisions the streams, consumer and bucket when it starts;
	// provisioning first lets the client submit and watch at once.
	js, _ := jetstream.New(nc)
	names, _ := events.NewNames("")
	if _, err := consumer.Provision(context.Background(), js, names, consumer.ProvisionConfig{}); err != nil {
		fmt.Println(err)
		return
	}
	w, err := consumer.New(nc, up, consumer.Config{WorkerID: "example"})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { stop(); <-done }()

	c, _ := events.NewClient(nc, events.ClientConfig{})
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := events.RunRequest{RunID: "example-1", Model: "gpt-4o", Input: json.RawMessage(`"Hello"`), Metadata: map[string]string{"emu_tokens": "5"}}
	if _, err := c.Submit(wctx, req); err != nil {
		fmt.Println(err)
		return
	}
	watch := c.Watch(wctx, "example-1", events.WatchOptions{})
	defer watch.Close()
	for {
		ev, err := watch.Next(wctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		switch ev.Type {
		case events.TypeRunStarted:
			fmt.Println(ev.Seq, ev.Type, "attempt", ev.Attempt, "worker", ev.Worker)
		case events.TypeRunCompleted:
			fmt.Println(ev.Type, ev.Status, "output tokens", ev.Usage.OutputTokens)
		}
	}
	// Output:
	// 1 run.started attempt 1 worker example
	// run.completed completed output tokens 5
}
