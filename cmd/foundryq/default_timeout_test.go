package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

// --default-timeout 0 means no deadline: the flag's 0 becomes the
// config's negative (runTimeout), which the worker takes for none, where
// a 0 in consumer.Config would be its 1 h default. A worker started with
// it records no deadline for a run without timeout_seconds (and still the
// run's own one for a run that has it).
func TestWorkerDefaultTimeoutZeroIsNoDeadline(t *testing.T) {
	for _, tt := range []struct {
		args []string
		env  string
		want time.Duration
	}{
		{nil, "", consumer.DefaultRunTimeout},
		{[]string{"--default-timeout", "90s"}, "", 90 * time.Second},
		{[]string{"--default-timeout", "0"}, "", -1},
		{nil, "0s", -1},
	} {
		t.Run(fmt.Sprintf("%q env %q", tt.args, tt.env), func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("FOUNDRYQ_DEFAULT_TIMEOUT", tt.env)
			}
			f := newFlags("worker", "")
			wf := addWorkerFlags(f, true)
			if err := f.parse(tt.args, io.Discard); err != nil {
				t.Fatal(err)
			}
			if got := wf.config("", nil).DefaultTimeout; got != tt.want {
				t.Errorf("DefaultTimeout %s, want %s", got, tt.want)
			}
		})
	}

	ns := natsembed.StartT(t, natsembed.Config{StoreDir: t.TempDir()})
	emu := foundrytest.NewServer(foundrytest.Config{APIKey: "k"})
	t.Cleanup(emu.Close)
	startCommand(t, "worker", "--nats-url", ns.ClientURL(), "--foundry-endpoint", emu.BaseURL(), "--foundry-api-key", "k",
		"--http-addr", "", "--log-level", "error", "--default-timeout", "0")

	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := events.NewClient(nc, events.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, timeout := range []int{0, 600} {
		id := "nodeadline-" + map[int]string{0: "default", 600: "own"}[timeout]
		req := events.RunRequest{RunID: id, Model: "gpt-test", Input: json.RawMessage(`"hello"`), TimeoutSeconds: timeout,
			Metadata: map[string]string{"emu_tokens": "5"}}
		if _, err := c.Submit(tctx, req); err != nil {
			t.Fatal(err)
		}
		var st events.RunState
		testkit.Eventually(t, 30*time.Second, id+" to complete", func() bool {
			st, _, err = c.State(tctx, id)
			return err == nil && st.Finished()
		})
		switch {
		case st.Status != events.StatusCompleted || st.StartedAt == nil:
			t.Fatalf("%s: %s, started %v: want completed", id, st.Status, st.StartedAt)
		case timeout == 0 && st.Deadline != nil:
			t.Errorf("%s: deadline %s (started %s), want none with --default-timeout 0", id, st.Deadline, st.StartedAt)
		case timeout > 0 && (st.Deadline == nil || !st.Deadline.Equal(st.StartedAt.Add(time.Duration(timeout)*time.Second))):
			t.Errorf("%s: deadline %v (started %s), want its own timeout_seconds", id, st.Deadline, st.StartedAt)
		}
	}
}
