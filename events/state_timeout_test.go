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

// TestReadStateUnansweredIsBounded: a state read whose request is never
// answered (sent while the bucket's stream elects a leader on a cluster,
// the request is dropped) returns an error after a bounded time even when
// its context has no deadline, so that the caller retries. Unbounded, a
// worker finishing a run waited for ever while renewing the run's lease:
// the run never ended (found by deploy's TestClusterContainers, a node cut
// off the network).
func TestReadStateUnansweredIsBounded(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// The stream leader that never answers.
	if _, err := nc.Subscribe("$JS.API.STREAM.MSG.GET.KV_foundryq-runs", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, _, err := events.ReadState(context.Background(), nc, "foundryq-runs", "r1")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("unanswered state read: %v, want a deadline error", err)
		}
		t.Logf("unanswered state read returned after %s: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(30 * time.Second):
		nc.Close() // ends the request
		<-done
		t.Fatal("an unanswered state read with no deadline did not return in 30s")
	}
}
