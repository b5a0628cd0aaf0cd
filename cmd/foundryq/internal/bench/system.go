package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
)

// system is the system under test, each part a process of its own: NATS
// (a `foundryq dev` with no worker, no emulator and no gateway: an embedded
// nats-server with file storage and the provisioned streams), the Foundry
// emulator (`foundryq emulator`, over HTTPS unless Config.HTTP1 or H2C) and
// one worker (`foundryq worker`), plus the bench's own connection and
// watcher.
type system struct {
	cfg      Config
	dir      string
	env      []string // the processes' environment: Config.Env, and SSL_CERT_FILE over HTTPS
	nats     *process
	emulator *process
	worker   *process
	natsURL  string
	natsOps  string // the NATS process's ops address (with ProfileDir)
	emuURL   string // root, e.g. https://127.0.0.1:PORT
	plainURL string // root of the emulator's plain HTTP listener (emuURL unless over HTTPS)
	metrics  string // the worker's /metrics URL
	interval time.Duration
	tr       *http.Transport // the bench's own, trusting the emulator's CA

	nc     *nats.Conn
	js     jetstream.JetStream
	client *events.Client
	names  events.Names
	watch  *watcher
	hc     *http.Client
	tool   *toolServer // started by the first phase that calls it
}

const apiKey = "bench"

// startSystem starts NATS and the emulator (the worker: startWorker).
func startSystem(ctx context.Context, cfg Config) (s *system, err error) {
	s = &system{cfg: cfg, env: cfg.Env, tr: http.DefaultTransport.(*http.Transport).Clone()}
	s.hc = &http.Client{Transport: s.tr, Timeout: time.Minute}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.dir, err = os.MkdirTemp("", "foundryq-bench-"); err != nil {
		return s, fmt.Errorf("bench: %w", err)
	}
	emuPort, err := freePort()
	if err != nil {
		return s, err
	}
	emuAddr := "127.0.0.1:" + strconv.Itoa(emuPort)
	s.emuURL = "http://" + emuAddr
	s.plainURL = s.emuURL
	emuArgs := []string{"emulator", "--addr", emuAddr, "--emulator-api-key", apiKey, "--emulator-record-times", "--log-level", "error"}
	if cfg.transport() == transportHTTPS {
		// HTTPS as an Azure endpoint serves it: a certificate from a CA
		// made for this run, trusted by every process through
		// SSL_CERT_FILE (Go reads it on Linux; the worker's and the
		// reader's transports keep the system's roots) and by the bench's
		// own clients; and a plain listener on the same emulator for the
		// memory phase's HTTP/1.1 row.
		certs, err := makeCerts(s.dir)
		if err != nil {
			return s, err
		}
		plainPort, err := freePort()
		if err != nil {
			return s, err
		}
		s.emuURL = "https://" + emuAddr
		s.plainURL = "http://127.0.0.1:" + strconv.Itoa(plainPort)
		emuArgs = append(emuArgs, "--tls-cert", certs.Cert, "--tls-key", certs.Key, "--plain-addr", "127.0.0.1:"+strconv.Itoa(plainPort))
		s.env = append(slices.Clip(cfg.Env), "SSL_CERT_FILE="+certs.CA)
		s.tr.TLSClientConfig = &tls.Config{RootCAs: certs.Roots}
	}
	if s.emulator, err = startProcess("emulator", cfg.Binary, s.env, emuArgs...); err != nil {
		return s, err
	}
	if err := s.emulator.waitReady(ctx, time.Minute, func(ctx context.Context) error {
		if _, err := httpGet(ctx, s.hc, s.emuURL+"/_emulator/stats"); err != nil {
			return err
		}
		_, err := httpGet(ctx, s.hc, s.plainURL+"/_emulator/stats")
		return err
	}); err != nil {
		return s, err
	}

	natsPort, err := freePort()
	if err != nil {
		return s, err
	}
	s.natsURL = "nats://127.0.0.1:" + strconv.Itoa(natsPort)
	devArgs := []string{"dev", "--nats-port", strconv.Itoa(natsPort),
		"--data-dir", filepath.Join(s.dir, "jetstream"), "--workers", "0", "--gateway-addr", "", "--http-addr", "",
		"--foundry-endpoint", s.foundryURL(), "--foundry-api-key", apiKey, "--log-level", "error"}
	if cfg.ProfileDir != "" {
		opsPort, err := freePort()
		if err != nil {
			return s, err
		}
		s.natsOps = "127.0.0.1:" + strconv.Itoa(opsPort)
		devArgs = append(devArgs, "--http-addr", s.natsOps, "--pprof")
	}
	if s.nats, err = startProcess("nats", cfg.Binary, s.env, devArgs...); err != nil {
		return s, err
	}
	s.names, _ = events.NewNames("")
	if err := s.nats.waitReady(ctx, time.Minute, func(ctx context.Context) error {
		nc, err := events.Connect(s.natsURL, nats.MaxReconnects(-1))
		if err != nil {
			return err
		}
		js, err := jetstream.New(nc)
		if err == nil {
			_, err = js.Stream(ctx, s.names.EventsStream())
		}
		if err != nil {
			nc.Close()
			return err
		}
		s.nc, s.js = nc, js
		return nil
	}); err != nil {
		return s, err
	}
	if s.client, err = events.NewClient(s.nc, events.ClientConfig{}); err != nil {
		return s, err
	}
	if s.watch, err = watch(s.nc, s.names); err != nil {
		return s, err
	}
	return s, nil
}

// toolServer returns the service of benchTool, started on first use.
func (s *system) toolServer() (*toolServer, error) {
	if s.tool == nil {
		srv, err := serveTool(s.natsURL, s.names.Prefix)
		if err != nil {
			return nil, err
		}
		s.tool = srv
	}
	return s.tool, nil
}

// startSyncAlwaysNATS starts a second NATS process like the first, whose
// JetStream fsyncs every write (sync_interval: always), for the ablation
// phase; the caller stops it.
func (s *system) startSyncAlwaysNATS(ctx context.Context) (*process, string, error) {
	conf := filepath.Join(s.dir, "sync-always.conf")
	if err := os.WriteFile(conf, []byte("jetstream {\n  sync_interval: always\n}\n"), 0o600); err != nil {
		return nil, "", err
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	p, err := startProcess("nats-sync-always", s.cfg.Binary, s.env, "dev", "--nats-port", strconv.Itoa(port),
		"--nats-config", conf, "--data-dir", filepath.Join(s.dir, "jetstream-sync-always"), "--workers", "0",
		"--gateway-addr", "", "--http-addr", "", "--foundry-endpoint", s.foundryURL(), "--foundry-api-key", apiKey, "--log-level", "error")
	if err != nil {
		return nil, "", err
	}
	err = p.waitReady(ctx, time.Minute, func(context.Context) error {
		nc, err := nats.Connect(url)
		if err == nil {
			nc.Close()
		}
		return err
	})
	if err != nil {
		_ = p.stop(10 * time.Second)
		return nil, "", err
	}
	return p, url, nil
}

// foundryURL is the emulator's v1 base URL.
func (s *system) foundryURL() string { return s.emuURL + "/openai/v1/" }

// transport returns a transport of its own for a client of the emulator,
// configured as the bench's (trusting the emulator's CA).
func (s *system) transport() *http.Transport { return s.tr.Clone() }

// startWorker (re)starts the worker with event interval interval, reaching
// the emulator as Config says.
func (s *system) startWorker(ctx context.Context, interval time.Duration) error {
	return s.startWorkerOver(ctx, interval, s.cfg.transport())
}

// startWorkerOver (re)starts the worker with event interval interval,
// reaching the emulator over transport: over HTTPS (transportHTTPS), with
// --foundry-h2c (transportH2C), or at the emulator's plain listener over
// HTTP/1.1 (transportHTTP1).
func (s *system) startWorkerOver(ctx context.Context, interval time.Duration, transport string) error {
	if s.worker != nil {
		if err := s.worker.stop(30 * time.Second); err != nil {
			return err
		}
		s.worker = nil
	}
	s.interval = interval
	w, metrics, err := s.startWorkerProcess(ctx, "worker", workerOptions{natsURL: s.natsURL, id: "bench",
		concurrency: s.cfg.workerConcurrency(), interval: interval, transport: transport})
	if err != nil {
		return err
	}
	s.worker, s.metrics = w, metrics
	return nil
}

// workerOptions say how startWorkerProcess starts a worker.
type workerOptions struct {
	natsURL       string // one URL, or a cluster's, comma-separated
	id            string // --worker-id
	concurrency   int
	interval      time.Duration // --event-interval; 0 or less: off
	transport     string        // how it reaches the emulator
	replicas      int           // --replicas; 0: the worker's default (1)
	maxAckPending int           // --max-ack-pending; 0: the worker's default (10,000 runs at once in the fleet)
}

// startWorkerProcess starts a worker as the process called name and waits
// until it is ready; it returns the process and its /metrics URL.
func (s *system) startWorkerProcess(ctx context.Context, name string, o workerOptions) (*process, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	ivl := o.interval.String()
	if o.interval <= 0 {
		ivl = "-1ms"
	}
	endpoint := s.foundryURL()
	if o.transport == transportHTTP1 {
		endpoint = s.plainURL + "/openai/v1/"
	}
	args := []string{"worker", "--nats-url", o.natsURL, "--foundry-endpoint", endpoint, "--foundry-api-key", apiKey,
		"--http-addr", addr, "--concurrency", strconv.Itoa(o.concurrency), "--event-interval", ivl,
		"--worker-id", o.id, "--log-level", "error"}
	// Go's profiles on the bench's loopback address: --profile saves them,
	// and the waiting phase forces a GC through /debug/pprof/heap?gc=1.
	args = append(args, "--pprof")
	if o.transport == transportH2C {
		args = append(args, "--foundry-h2c")
	}
	if o.replicas > 0 {
		args = append(args, "--replicas", strconv.Itoa(o.replicas))
	}
	if o.maxAckPending != 0 {
		args = append(args, "--max-ack-pending", strconv.Itoa(o.maxAckPending))
	}
	p, err := startProcess(name, s.cfg.Binary, s.env, args...)
	if err != nil {
		return nil, "", err
	}
	// Ready: NATS reached, and its one request to the emulator passed
	// (--check-upstream): a certificate it does not trust fails here.
	err = p.waitReady(ctx, time.Minute, func(ctx context.Context) error {
		_, err := httpGet(ctx, s.hc, "http://"+addr+"/readyz")
		return err
	})
	if err != nil {
		_ = p.stop(10 * time.Second)
		return nil, "", err
	}
	return p, "http://" + addr + "/metrics", nil
}

// eventsStored is the number of messages in the events stream.
func (s *system) eventsStored(ctx context.Context) (uint64, error) {
	st, err := s.js.Stream(ctx, s.names.EventsStream())
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// alive reports a process of the system that has exited.
func (s *system) alive() error {
	for _, p := range []*process{s.nats, s.emulator, s.worker} {
		if p == nil {
			continue
		}
		select {
		case <-p.done:
			return p.exited()
		default:
		}
	}
	return nil
}

// close stops everything, the worker first.
func (s *system) close() error {
	var errs []error
	if s.tool != nil {
		errs = append(errs, s.tool.close())
	}
	if s.watch != nil {
		s.watch.close()
	}
	if s.nc != nil {
		s.nc.Close()
	}
	for _, p := range []*process{s.worker, s.emulator, s.nats} {
		if p != nil {
			errs = append(errs, p.stop(30*time.Second))
		}
	}
	if s.dir != "" {
		errs = append(errs, os.RemoveAll(s.dir))
	}
	return errors.Join(errs...)
}
