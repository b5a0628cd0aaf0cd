package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is one test's world: an embedded NATS server, the Foundry emulator,
// a Foundry client and an events client.
type env struct {
	t      *testing.T
	nc     *nats.Conn
	ns     *natsembed.Server
	js     jetstream.JetStream
	emu    *foundrytest.Server
	up     *foundry.Client
	client *events.Client
	prov   events.ProvisionConfig
}

type envOpt func(*envConfig)

type envConfig struct {
	emu  foundrytest.Config
	prov events.ProvisionConfig
	nats *natsembed.Config
}

func withEmulator(c foundrytest.Config) envOpt      { return func(e *envConfig) { e.emu = c } }
func withProvision(p events.ProvisionConfig) envOpt { return func(e *envConfig) { e.prov = p } }

// withNATS runs the test's NATS server on a loopback TCP port with c, so
// that it can be stopped and restarted (natsembed.Server.Stop, Restart);
// every connection of the test reconnects.
func withNATS(c natsembed.Config) envOpt { return func(e *envConfig) { e.nats = &c } }

// reconnecting are the options of every connection in a test whose server
// may go away for a while.
var reconnecting = []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond), nats.ReconnectJitter(0, 0)}

func setup(t *testing.T, opts ...envOpt) *env {
	t.Helper()
	var cfg envConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.emu.APIKey == "" {
		cfg.emu.APIKey = "test-key"
	}
	var ns *natsembed.Server
	var nc *nats.Conn
	if cfg.nats == nil {
		ns, nc = natsembed.RunTest(t)
	} else {
		ncfg := *cfg.nats
		ncfg.StoreDir = t.TempDir()
		var err error
		if ns, err = natsembed.Start(ncfg); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ns.Shutdown)
		if nc, err = ns.Connect(reconnecting...); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
	}
	emu := foundrytest.NewServer(cfg.emu)
	t.Cleanup(emu.Close)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 512 // hundreds of concurrent runs talk to one host
	hc := &http.Client{Transport: tr}
	t.Cleanup(hc.CloseIdleConnections)
	up, err := foundry.New(foundry.Config{BaseURL: emu.BaseURL(), APIKey: cfg.emu.APIKey, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	// Correctness tests, not latency tests: a cancel under the race detector
	// on a loaded machine may take longer than the default 5s to answer.
	client, err := events.NewClient(nc, events.ClientConfig{CancelTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, nc: nc, ns: ns, js: js, emu: emu, up: up, client: client, prov: cfg.prov}
}

// worker is a running consumer.Worker.

// crash cuts both of the worker's connections: it can no longer publish,
// ack or renew a lease.
func (w *worker) crash() {
	w.nc.Close()
	w.pub.Close()
}

type worker struct {
	*consumer.Worker
	nc   *nats.Conn // jobs, cancels, state
	pub  *nats.Conn // run events
	stop context.CancelFunc
	done chan error
	once sync.Once
}

// startWorker runs a worker on its own NATS connection until the test ends
// (or stopWorker).
func (e *env) startWorker(cfg consumer.Config) *worker {
	e.t.Helper()
	nc, err := e.ns.Connect(reconnecting...)
	if err != nil {
		e.t.Fatal(err)
	}
	if cfg.Provision == (events.ProvisionConfig{}) {
		cfg.Provision = e.prov
	}
	pub, err := e.ns.Connect(reconnecting...)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.PublishConn = pub
	w, err := consumer.New(nc, e.up, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wk := &worker{Worker: w, nc: nc, pub: pub, stop: cancel, done: make(chan error, 1)}
	go func() { wk.done <- w.Run(ctx) }()
	e.t.Cleanup(func() { wk.shutdown(e.t) })
	e.waitProvisioned()
	return wk
}

// shutdown stops the worker gracefully and waits for Run to return.
func (w *worker) shutdown(t *testing.T) {
	t.Helper()
	w.once.Do(func() {
		w.stop()
		select {
		case err := <-w.done:
			// A worker whose connection a test closed stops with an error.
			if err != nil && !(errors.Is(err, nats.ErrConnectionClosed) && w.nc.IsClosed()) {
				t.Errorf("worker %s: Run: %v", w.ID(), err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("worker %s did not stop within 30s", w.ID())
		}
		w.nc.Close()
		w.pub.Close()
	})
}

// waitProvisioned waits until the runs stream exists.
func (e *env) waitProvisioned() {
	e.t.Helper()
	eventually(e.t, 10*time.Second, "streams provisioned", func() bool {
		_, err := e.js.Stream(context.Background(), "FOUNDRYQ_EVENTS")
		_, err2 := e.js.KeyValue(context.Background(), "foundryq-runs")
		return err == nil && err2 == nil
	})
}

// waitRunsEmpty waits until every job is acked.
func (e *env) waitRunsEmpty() {
	e.t.Helper()
	eventually(e.t, 10*time.Second, "the runs stream to be empty", func() bool {
		s, err := e.js.Stream(context.Background(), "FOUNDRYQ_RUNS")
		if err != nil {
			return false
		}
		info, err := s.Info(context.Background())
		return err == nil && info.State.Msgs == 0
	})
}

func (e *env) submit(req events.RunRequest) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.client.Submit(ctx, req); err != nil {
		e.t.Fatalf("submit %s: %v", req.RunID, err)
	}
}

// collect watches a run from the start until its terminal event.
func (e *env) collect(runID string, limit time.Duration) []events.RunEvent {
	e.t.Helper()
	evs, err := collectErr(e.client, runID, limit)
	if err != nil {
		e.t.Fatal(err)
	}
	return evs
}

func collectErr(c *events.Client, runID string, limit time.Duration) ([]events.RunEvent, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	w := c.Watch(ctx, runID, events.WatchOptions{})
	defer w.Close()
	var evs []events.RunEvent
	for {
		ev, err := w.Next(ctx)
		if errors.Is(err, io.EOF) {
			return evs, nil
		}
		if err != nil {
			return evs, fmt.Errorf("watch %s after %d events: %w", runID, len(evs), err)
		}
		evs = append(evs, ev)
	}
}

func request(runID string, md map[string]string) events.RunRequest {
	return events.RunRequest{RunID: runID, Model: "gpt-test", Input: json.RawMessage(`"hello there"`), Metadata: md}
}

// text concatenates the text deltas.
func text(evs []events.RunEvent) string {
	var s string
	for _, ev := range evs {
		if ev.Type == events.TypeTextDelta {
			s += ev.Text
		}
	}
	return s
}

// checkWellFormed asserts contiguous seqs from 1 and exactly one terminal
// event, at the end.
func checkWellFormed(t *testing.T, evs []events.RunEvent) events.RunEvent {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d, want %d (events %v)", i, ev.Seq, i+1, types(evs))
		}
		if ev.Type.Terminal() != (i == len(evs)-1) {
			t.Fatalf("terminal event at %d of %d: %v", i, len(evs), types(evs))
		}
	}
	return evs[len(evs)-1]
}

func types(evs []events.RunEvent) []events.EventType {
	out := make([]events.EventType, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

// emulatorText is the output text the emulator stored for a run's only
// response.
func (e *env) emulatorText(runID string) string {
	e.t.Helper()
	recs := e.emu.Records(runID)
	if len(recs) != 1 {
		e.t.Fatalf("emulator has %d responses for run %s, want 1", len(recs), runID)
	}
	return recs[0].Text
}

// eventually polls cond until it holds or limit passes.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitEvent watches a run until an event of type typ arrives.
func (e *env) waitEvent(runID string, typ events.EventType, limit time.Duration) events.RunEvent {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	w := e.client.Watch(ctx, runID, events.WatchOptions{NoHeartbeat: true})
	defer w.Close()
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			e.t.Fatalf("waiting for %s on run %s: %v", typ, runID, err)
		}
		if ev.Type == typ {
			return ev
		}
	}
}
