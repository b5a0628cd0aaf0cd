package devstack_test

import (
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
)

// TestStartT is what a test of your own looks like: StartT starts NATS,
// the emulator and a worker for the test and stops them when it ends; the
// test submits a run through the stack's client and follows it to its end.
func TestStartT(t *testing.T) {
	s := devstack.StartT(t, devstack.Config{
		Workers:  1,
		Emulator: foundrytest.Config{APIKey: "example-key"},
	})

	req := events.RunRequest{
		RunID: "run_harness", Model: "gpt-4o-mini", Input: json.RawMessage(`"Say hi"`),
		Metadata: map[string]string{"emu_tokens": "3"},
	}
	if _, err := s.Client.Submit(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	w := s.Client.Watch(t.Context(), req.RunID, events.WatchOptions{})
	defer w.Close()
	var last events.RunEvent
	for {
		ev, err := w.Next(t.Context())
		if errors.Is(err, io.EOF) {
			break // after the terminal event
		}
		if err != nil {
			t.Fatal(err)
		}
		last = ev
	}
	if last.Type != events.TypeRunCompleted || last.Usage.OutputTokens != 3 {
		t.Fatalf("the run ended with %s, %+v", last.Type, last.Usage)
	}
	if n := s.Emulator.Stats().ResponsesByRun[req.RunID]; n != 1 {
		t.Fatalf("the emulator was asked %d times for the run, want once", n)
	}
}
