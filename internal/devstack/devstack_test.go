package devstack

import (
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A stack with two workers runs a run to its end, stops everything it
// started, and leaves no goroutine behind.
func TestStack(t *testing.T) {
	s, err := Start(t.Context(), Config{Workers: 2, Worker: consumer.Config{WorkerID: "st"}})
	if err != nil {
		t.Fatal(err)
	}
	if ws := s.Workers(); len(ws) != 2 || ws[0].ID() != "st-1" || ws[1].ID() != "st-2" {
		t.Fatalf("workers %v", ws)
	}
	req := events.RunRequest{RunID: "st-run", Model: "m", Input: json.RawMessage(`"hi"`)}
	if _, err := s.Client.Submit(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	w := s.Client.Watch(t.Context(), "st-run", events.WatchOptions{NoHeartbeat: true})
	var last events.RunEvent
	for {
		ev, err := w.Next(t.Context())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		last = ev
	}
	w.Close()
	if last.Type != events.TypeRunCompleted || s.Emulator.Stats().ResponsesByRun["st-run"] != 1 {
		t.Fatalf("run ended %s", last.Type)
	}
	crashed, err := s.StartWorker(consumer.Config{WorkerID: "st-3"})
	if err != nil {
		t.Fatal(err)
	}
	crashed.Crash()
	select {
	case <-crashed.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a crashed worker's Run did not return")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestStartRefusesANegativeWorkerCount(t *testing.T) {
	if _, err := Start(t.Context(), Config{Workers: -1}); err == nil {
		t.Fatal("Workers -1 accepted")
	}
}
