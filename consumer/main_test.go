package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/events/contract"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is one test's world: a devstack (embedded NATS, the Foundry
// emulator, a Foundry client and an events client) and the workers the test
// starts.
type env struct {
	t      *testing.T
	stack  *devstack.Stack
	nc     *nats.Conn
	ns     *natsembed.Server
	js     jetstream.JetStream
	emu    *foundrytest.Server
	up     *foundry.Client // the workers' Foundry client; a test may replace it before starting workers
	client *events.Client
	prov   consumer.ProvisionConfig
	tap    *contract.Tap // checks the test's traffic against the contract's schemas
}

type envOpt func(*envConfig)

type envConfig struct {
	emu  foundrytest.Config
	prov consumer.ProvisionConfig
	nats *natsembed.Config
}

func withEmulator(c foundrytest.Config) envOpt        { return func(e *envConfig) { e.emu = c } }
func withProvision(p consumer.ProvisionConfig) envOpt { return func(e *envConfig) { e.prov = p } }

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
	scfg := devstack.Config{
		Emulator: cfg.emu,
		Connect:  reconnecting,
		Worker:   consumer.Config{Provision: cfg.prov},
		// Correctness tests, not latency tests: a cancel under the race
		// detector on a loaded machine may take longer than the default
		// 5s to answer.
		Client: events.ClientConfig{CancelTimeout: 30 * time.Second},
	}
	if cfg.nats != nil {
		scfg.NATS = *cfg.nats
		scfg.NATS.StoreDir = t.TempDir()
	}
	s := devstack.StartT(t, scfg)
	// Every message on NATS must match its schema; the tap reads on a
	// connection of its own, apart from the test's client.
	tapConn, err := s.Connect("contract-tap")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tapConn.Close)
	tap := contract.TapT(t, tapConn)
	js, err := jetstream.New(s.Conn)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, tap: tap, stack: s, nc: s.Conn, ns: s.NATS, js: js, emu: s.Emulator, up: s.Upstream, client: s.Client, prov: cfg.prov}
}

// worker is a running consumer.Worker with its connections.
type worker struct {
	*devstack.Worker
	t *testing.T
}

// startWorker runs a worker on connections of its own until the test ends
// (or shutdown).
func (e *env) startWorker(cfg consumer.Config) *worker {
	e.t.Helper()
	if cfg.Provision == (consumer.ProvisionConfig{}) {
		cfg.Provision = e.prov
	}
	e.stack.Upstream = e.up
	w, err := e.stack.StartWorker(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return &worker{Worker: w, t: e.t}
}

// crash cuts both of the worker's connections: it can no longer publish,
// ack or renew a lease.
func (w *worker) crash() { w.Crash() }

// shutdown stops the worker gracefully and waits for Run to return.
func (w *worker) shutdown(t *testing.T) {
	t.Helper()
	// A worker whose connection a test closed stops with an error.
	if err := w.Stop(30 * time.Second); err != nil && !(errors.Is(err, nats.ErrConnectionClosed) && w.Jobs.IsClosed()) {
		t.Errorf("worker %s: Run: %v", w.ID(), err)
	}
}

// waitRunsEmpty waits until every job is acked.
func (e *env) waitRunsEmpty() {
	e.t.Helper()
	testkit.Eventually(e.t, 10*time.Second, "the runs stream to be empty", func() bool {
		for _, name := range []string{"FOUNDRYQ_RUNS", "FOUNDRYQ_QUEUE"} { // the intake and the lanes
			s, err := e.js.Stream(context.Background(), name)
			if err != nil {
				return false
			}
			if info, err := s.Info(context.Background()); err != nil || info.State.Msgs != 0 {
				return false
			}
		}
		return true
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

// testCtx is a context that ends with the test or after 20s.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}
