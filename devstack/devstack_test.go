package devstack

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
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

// With Cluster set the stack runs on a three-node JetStream cluster, and
// the streams and bucket are replicated on it.
func TestStackOnACluster(t *testing.T) {
	s, err := Start(t.Context(), Config{
		Cluster: &natsembed.ClusterConfig{StoreDir: t.TempDir()},
		Workers: 1,
		Worker:  consumer.Config{WorkerID: "cl", Provision: consumer.ProvisionConfig{Replicas: 3}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.NATS != nil || s.Cluster == nil || s.Cluster.Size() != 3 {
		t.Fatalf("NATS %v, Cluster %v", s.NATS, s.Cluster)
	}
	js, err := jetstream.New(s.Conn)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"FOUNDRYQ_RUNS", "FOUNDRYQ_EVENTS", "KV_foundryq-runs"} {
		st, err := js.Stream(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if r := st.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("%s: %d replicas, want 3", name, r)
		}
	}
	req := events.RunRequest{RunID: "cl-run", Model: "m", Input: json.RawMessage(`"hi"`)}
	if _, err := s.Client.Submit(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	w := s.Client.Watch(t.Context(), "cl-run", events.WatchOptions{NoHeartbeat: true})
	defer w.Close()
	for {
		ev, err := w.Next(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type.Terminal() {
			if ev.Type != events.TypeRunCompleted {
				t.Fatalf("run ended %s", ev.Type)
			}
			break
		}
	}
}

// A stack that cannot start (here: its NATS port is taken) returns the
// reason, stops what it had started, and does not panic.
func TestStartReportsAPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	_, err = Start(t.Context(), Config{NATS: natsembed.Config{Host: "127.0.0.1", Port: port, StoreDir: t.TempDir(), ReadyTimeout: 2 * time.Second}})
	if err == nil || !strings.Contains(err.Error(), strconv.Itoa(port)) {
		t.Fatalf("Start on a taken port: %v", err)
	}
}
