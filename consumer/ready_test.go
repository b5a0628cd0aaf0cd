package consumer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

// waitReady waits until w.Ready's answer satisfies ok, and returns it.
func waitReady(t *testing.T, w *consumer.Worker, what string, ok func(error) bool) error {
	t.Helper()
	var last error
	testkit.Eventually(t, 30*time.Second, what, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		last = w.Ready(ctx)
		return ok(last)
	})
	return last
}

func isReady(err error) bool { return err == nil }

func notReadyWith(reason string) func(error) bool {
	return func(err error) bool {
		return errors.Is(err, consumer.ErrNotReady) && strings.Contains(err.Error(), reason)
	}
}

func TestReady(t *testing.T) {
	t.Parallel()
	e := setup(t, withNATS(natsembed.Config{}))

	t.Run("not started", func(t *testing.T) {
		w, err := consumer.New(e.nc, e.up, consumer.Config{WorkerID: "idle"})
		if err != nil {
			t.Fatal(err)
		}
		err = w.Ready(t.Context())
		if !notReadyWith("starting")(err) {
			t.Fatalf("Ready before Run: %v, want not ready: starting", err)
		}
	})

	w := e.startWorker(consumer.Config{WorkerID: "ready", ReadyCheckInterval: 50 * time.Millisecond})
	waitReady(t, w.Worker.Worker, "the worker to be ready", isReady)

	t.Run("NATS down", func(t *testing.T) {
		e.ns.Stop()
		err := waitReady(t, w.Worker.Worker, "not ready while NATS is down", notReadyWith("nats"))
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("reason %q is not one line", err)
		}
		if err := e.ns.Restart(); err != nil {
			t.Fatal(err)
		}
		waitReady(t, w.Worker.Worker, "ready after NATS is back", isReady)
	})

	for _, c := range []struct{ name, stream, reason string }{
		{"events stream deleted", "FOUNDRYQ_EVENTS", "stream FOUNDRYQ_EVENTS missing"},
		{"bucket deleted", "KV_foundryq-runs", "bucket foundryq-runs missing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Deleted again while the worker has not reported it: a
			// re-provisioning already under way (after the NATS restart,
			// or the previous case) may recreate it at once.
			var last error
			testkit.Eventually(t, 30*time.Second, "not ready: "+c.reason, func() bool {
				if err := e.js.DeleteStream(t.Context(), c.stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				last = w.Ready(ctx)
				return notReadyWith(c.reason)(last)
			})
			if strings.Contains(last.Error(), "\n") {
				t.Errorf("reason %q is not one line", last)
			}
			// The check that found it missing has the worker recreate it.
			waitReady(t, w.Worker.Worker, "ready after the worker recreated it", isReady)
			if _, err := e.js.Stream(t.Context(), c.stream); err != nil {
				t.Fatalf("stream %s after the worker is ready again: %v", c.stream, err)
			}
		})
	}

	t.Run("pull loop stopped", func(t *testing.T) {
		w.BeginStop()
		waitReady(t, w.Worker.Worker, "not ready once the pull loop stopped", notReadyWith("pull loop stopped"))
	})
}
