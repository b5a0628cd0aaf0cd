package consumer

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
)

// A JetStream cluster answers a listing of the queue's consumers only
// once every consumer's leader has answered, or after 4 s when one has
// none: a lane's consumer just created (a new fairness key, or one the
// server removed while idle) or between leaders. Measured on the bench's
// three-node cluster: every worker's listing took 4.0 s right after the
// first lane was created, and every run of the first load started 4.2 s
// after its submit. A worker must not hold the runs of the lanes it knows
// for a listing that late.
func TestLateLaneListingDoesNotHoldRuns(t *testing.T) {
	t.Parallel()
	_, nc := natsembed.RunTest(t)
	emu := foundrytest.NewServer(foundrytest.Config{APIKey: "k"})
	t.Cleanup(emu.Close)
	up, err := foundry.New(foundry.Config{BaseURL: emu.BaseURL(), APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(nc, up, Config{WorkerID: "late-listing"})
	if err != nil {
		t.Fatal(err)
	}
	// Every listing is as late as the server's bound, and later.
	list := w.sched.listConsumers
	w.sched.listConsumers = func(ctx context.Context) jetstream.ConsumerInfoLister {
		select {
		case <-ctx.Done():
		case <-time.After(30 * time.Second):
		}
		return list(ctx)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the worker did not stop")
		}
	})

	client, err := events.NewClient(nc, events.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = client.Submit(wctx, events.RunRequest{RunID: "late-listing-1", Model: "m", Input: json.RawMessage(`"hi"`)})
	if err != nil {
		t.Fatal(err)
	}
	watch := client.Watch(wctx, "late-listing-1", events.WatchOptions{})
	defer watch.Close()
	for {
		ev, err := watch.Next(wctx)
		if err != nil {
			t.Fatalf("no run.started while the lanes' listing is late: %v", err)
		}
		if ev.Type == events.TypeRunStarted {
			return
		}
	}
}
