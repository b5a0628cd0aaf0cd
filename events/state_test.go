package events_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/foundryq/foundryq/events"
)

// A state read whose request is lost (sent to a stream leader that died
// with it, in a cluster) must not wait for ever when the caller's context
// has no deadline: the workers' run loops call it so, and one such read
// held a run (and its renewed lease) for minutes in the cluster test. Here
// the request reaches a subscriber that never answers.
func TestReadStateWithoutDeadlineIsBounded(t *testing.T) {
	t.Parallel()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("$JS.API.STREAM.MSG.GET.>") // takes the request, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, _, err := events.ReadState(context.Background(), nc, "foundryq-runs", "r1")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want a timeout", err)
		}
		if d := time.Since(start); d < events.StateReadTimeout {
			t.Fatalf("gave up after %s, before StateReadTimeout %s", d, events.StateReadTimeout)
		}
	case <-time.After(events.StateReadTimeout + 20*time.Second):
		t.Fatal("ReadState without a deadline still waits for an answer that will never come")
	}
}
