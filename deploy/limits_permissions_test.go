package deploy

import (
	"fmt"
	"testing"
	"time"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
)

// TestLimitsPermissions: a worker with concurrency caps and a token
// budget, connected as "worker" to the shipped nats-server.conf, creates the limits bucket, takes, renews and frees slots
// and spends the budget without a single refusal.
func TestLimitsPermissions(t *testing.T) {
	for _, c := range []struct{ conf, user, password string }{
		{"nats-server.conf", "worker", "workerpw1"},
	} {
		t.Run(c.conf, func(t *testing.T) {
			s := startConfig(t, c.conf, serverConfPasswords)
			emu := emulator(t)
			worker := connectAs(t, s, c.user, c.password)
			provisionAs(t, worker, "")
			runWorker(t, worker, emu, consumer.Config{Concurrency: 4, CapPerKey: 1, SlotLease: 2 * time.Second,
				CapRetryDelay: 50 * time.Millisecond, TokensPerMinute: map[string]int{"m": 100000}})
			client := connectAs(t, s, "client", "clientpw1")
			cl, err := events.NewClient(client.nc, events.ClientConfig{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				submit(t, cl, fmt.Sprintf("limits-%d", i), map[string]string{"emu_tokens": "5", "emu_token_ms": "400"})
			}
			for i := range 3 {
				evs := watchToEnd(t, cl, fmt.Sprintf("limits-%d", i), events.FromStart, nil)
				if last := evs[len(evs)-1]; last.Type != events.TypeRunCompleted {
					t.Fatalf("run %d ended %s", i, last.Type)
				}
			}
			if errs := worker.recorded(); len(errs) > 0 {
				t.Fatalf("the worker was refused: %v", errs)
			}
		})
	}
}
