// Package devstack starts a whole foundryq on one machine: an embedded NATS
// server with JetStream, the Foundry emulator (or a real Foundry endpoint),
// provisioned streams and bucket, a client, and any number of workers. It is
// what foundryq dev and foundryq demo run, and what foundryq's own tests
// build on.
//
// It is also a harness for your tests: code that submits runs with an
// events.Client, follows them or cancels them can be tested against a real
// JetStream and real workers, with the emulator in place of Foundry and no
// network. StartT starts a stack for a test and stops it when the test ends:
//
//	func TestMyService(t *testing.T) {
//		s := devstack.StartT(t, devstack.Config{Workers: 1})
//		svc := myservice.New(s.Client) // or a connection of its own: s.Connect("my-service")
//		...
//	}
//
// Config.Emulator sets what the emulated model answers (tokens, delays,
// failures, tool calls); s.Emulator.Stats() tells what it was asked.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
)

// Config configures a Stack. The zero value starts an in-process NATS server
// (no listener), the emulator on a free loopback port and no worker.
type Config struct {
	// NATS configures the embedded server. Default: in process, with
	// temporary storage. Ignored when Cluster is set.
	NATS natsembed.Config
	// Cluster, when set, starts a JetStream cluster of embedded servers on
	// loopback (natsembed.StartCluster) instead of one server; set
	// Worker.Provision.Replicas to replicate the streams and bucket over
	// it. Default nil: one server.
	Cluster *natsembed.ClusterConfig
	// Connect are options for every connection the stack opens (NATS user,
	// inbox prefix, reconnect settings).
	Connect []nats.Option
	// Prefix is the subject prefix. Default events.DefaultPrefix.
	Prefix string
	// Foundry configures the workers' Foundry client. With an empty BaseURL
	// the stack starts the emulator and points the client at it (with
	// Emulator.APIKey, or any key: without one the client would use Entra
	// ID).
	Foundry foundry.Config
	// Emulator configures the emulator, when the stack starts one.
	Emulator foundrytest.Config
	// EmulatorAddr is where the emulator listens. Default 127.0.0.1:0 (a
	// free port).
	EmulatorAddr string
	// Workers is how many workers Start starts, with Worker as their
	// configuration; their ids get "-1", "-2", ... when there are several.
	// Default 0.
	Workers int
	// Worker configures the workers Start starts (its Provision settings
	// are also used to provision before any worker runs). Default WorkerID:
	// "dev".
	Worker consumer.Config
	// Client configures the stack's events client.
	Client events.ClientConfig
}

// Stack is a running foundryq. Close stops everything it started.
type Stack struct {
	NATS     *natsembed.Server   // nil when Config.Cluster was set
	Cluster  *natsembed.Cluster  // nil unless Config.Cluster was set
	Emulator *foundrytest.Server // nil when Config.Foundry.BaseURL was set
	Upstream *foundry.Client     // the workers' Foundry client
	Conn     *nats.Conn          // the client's connection
	Client   *events.Client

	cfg     Config
	mu      sync.Mutex
	workers []*Worker
	closers []func()
}

// Start starts NATS, the emulator (unless Config.Foundry names an
// endpoint), provisions the streams, consumer and bucket (so that clients
// can submit and watch at once, even without a worker) and starts
// Config.Workers workers. On error everything started is stopped.
func Start(ctx context.Context, cfg Config) (_ *Stack, err error) {
	if cfg.Workers < 0 {
		return nil, fmt.Errorf("devstack: Workers must be 0 or more, got %d", cfg.Workers)
	}
	if cfg.NATS == (natsembed.Config{}) && cfg.Cluster == nil {
		cfg.NATS.InProcess = true
	}
	s := &Stack{cfg: cfg}
	defer func() {
		if err != nil {
			_ = s.Close() // s, not the nil result: stop what was started
		}
	}()
	if cfg.Cluster != nil {
		if s.Cluster, err = natsembed.StartCluster(*cfg.Cluster); err != nil {
			return nil, err
		}
		s.closers = append(s.closers, s.Cluster.Shutdown)
	} else {
		if s.NATS, err = natsembed.Start(cfg.NATS); err != nil {
			return nil, err
		}
		s.closers = append(s.closers, s.NATS.Shutdown)
	}

	fcfg := cfg.Foundry
	if fcfg.BaseURL == "" {
		addr := cfg.EmulatorAddr
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		if s.Emulator, err = foundrytest.Listen(addr, cfg.Emulator); err != nil {
			return nil, fmt.Errorf("devstack: emulator: %w", err)
		}
		s.closers = append(s.closers, s.Emulator.Close)
		fcfg.BaseURL, fcfg.APIKey = s.Emulator.BaseURL(), cfg.Emulator.APIKey
		if fcfg.APIKey == "" {
			fcfg.APIKey = "emulator"
		}
	}
	if fcfg.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 512 // many concurrent runs talk to one host
		fcfg.HTTPClient = &http.Client{Transport: tr}
	}
	if s.Upstream, err = foundry.New(fcfg); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.Upstream.CloseIdleConnections)

	if s.Conn, err = s.Connect("foundryq-devstack"); err != nil {
		return nil, err
	}
	js, err := jetstream.New(s.Conn)
	if err != nil {
		return nil, err
	}
	names, err := events.NewNames(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	if _, err := consumer.Provision(ctx, js, names, cfg.Worker.Provision); err != nil {
		return nil, fmt.Errorf("devstack: provision: %w", err)
	}
	ccfg := cfg.Client
	ccfg.Prefix = cfg.Prefix
	if s.Client, err = events.NewClient(s.Conn, ccfg); err != nil {
		return nil, err
	}
	for i := range cfg.Workers {
		wcfg := cfg.Worker
		if wcfg.WorkerID == "" {
			wcfg.WorkerID = "dev"
		}
		if cfg.Workers > 1 {
			wcfg.WorkerID += "-" + strconv.Itoa(i+1)
		}
		if i > 0 {
			wcfg.Registerer = nil // one worker's metrics per registry
		}
		if _, err := s.StartWorker(wcfg); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// StartT starts a stack for the test t, as Start does with t's context,
// and fails the test at once if it cannot. The stack is closed when the
// test and its subtests end (t.Cleanup); an error from Close fails the test
// (t.Errorf).
func StartT(t testing.TB, cfg Config) *Stack {
	t.Helper()
	s, err := Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("stop the stack: %v", err)
		}
	})
	return s
}

// Connect opens another connection to the stack's NATS server, with
// Config.Connect and opts (the caller closes it).
func (s *Stack) Connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	all := append([]nats.Option{nats.Name(name)}, s.cfg.Connect...)
	if s.Cluster != nil {
		return events.Connect(s.Cluster.ClientURLs(), append(all, opts...)...)
	}
	if url := s.NATS.ClientURL(); url != "" {
		return events.Connect(url, append(all, opts...)...)
	}
	return s.NATS.Connect(append(all, opts...)...)
}

// Worker is a worker of the stack, with its two NATS connections (jobs,
// cancels and state; run events).
type Worker struct {
	*consumer.Worker
	Jobs, Events *nats.Conn

	stop context.CancelFunc
	done chan struct{}
	err  error // Run's result, once done is closed
}

// StartWorker starts a worker with cfg (Prefix defaults to the stack's, the
// Foundry client is the stack's; a PublishConn in cfg is replaced by one of
// the worker's own). It runs until Stop, Crash or Close.
func (s *Stack) StartWorker(cfg consumer.Config, opts ...nats.Option) (*Worker, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = s.cfg.Prefix
	}
	jobs, err := s.Connect("foundryq-worker", opts...)
	if err != nil {
		return nil, err
	}
	pub, err := s.Connect("foundryq-worker-events", opts...)
	if err != nil {
		jobs.Close()
		return nil, err
	}
	cfg.PublishConn = pub
	cw, err := consumer.New(jobs, s.Upstream, cfg)
	if err != nil {
		jobs.Close()
		pub.Close()
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	w := &Worker{Worker: cw, Jobs: jobs, Events: pub, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.err = cw.Run(ctx)
	}()
	s.mu.Lock()
	s.workers = append(s.workers, w)
	s.mu.Unlock()
	return w, nil
}

// Workers returns the workers started so far.
func (s *Stack) Workers() []*Worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Worker(nil), s.workers...)
}

// BeginStop starts the worker's graceful shutdown (as SIGTERM does) and
// returns at once; Stop waits for it.
func (w *Worker) BeginStop() { w.stop() }

// Stop shuts the worker down gracefully (its runs are handed off) and
// closes its connections. It returns Run's error, or an error if Run did
// not return within timeout. Safe to call more than once.
func (w *Worker) Stop(timeout time.Duration) error {
	w.stop()
	select {
	case <-w.done:
	case <-time.After(timeout):
		return fmt.Errorf("devstack: worker %s did not stop within %s", w.ID(), timeout)
	}
	w.Jobs.Close()
	w.Events.Close()
	return w.err
}

// Done is closed when the worker's Run has returned; Err then says why.
func (w *Worker) Done() <-chan struct{} { return w.done }

// Err is Run's result, once Done is closed.
func (w *Worker) Err() error { return w.err }

// Crash cuts both of the worker's connections, as if its process had been
// killed: it can no longer publish, ack or renew a lease (its Run then
// returns an error wrapping nats.ErrConnectionClosed).
func (w *Worker) Crash() {
	w.Jobs.Close()
	w.Events.Close()
}

// Close stops the workers (gracefully, each within 30s), then the client's
// connection, the emulator and NATS. It returns the workers' errors, except
// that of a worker whose connection was closed (Crash).
func (s *Stack) Close() error {
	var errs []error
	for _, w := range s.Workers() {
		if err := w.Stop(30 * time.Second); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			errs = append(errs, err)
		}
	}
	if s.Conn != nil {
		s.Conn.Close()
	}
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	return errors.Join(errs...)
}
