package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/internal/natsembed"
)

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("dev", "dev [flags]")
	natsPort := f.Int("nats-port", "FOUNDRYQ_DEV_NATS_PORT", 4222, "port of the embedded NATS server (on 127.0.0.1)")
	dataDir := f.String("data-dir", "FOUNDRYQ_DEV_DATA_DIR", "", "JetStream data directory (default: a temporary directory, removed at exit)")
	natsConfig := f.String("nats-config", "FOUNDRYQ_DEV_NATS_CONFIG", "", "nats-server config file for the embedded server, e.g. deploy/nats/nats-server.conf (its port and store dir are replaced; dev's workers connect with --nats-user); default: no authentication")
	auth := addNATSAuthFlags(f)
	emuAddr := f.String("emulator-addr", "FOUNDRYQ_EMULATOR_ADDR", "127.0.0.1:8089", "address of the Foundry emulator (not started when FOUNDRY_ENDPOINT is set)")
	workers := f.Int("workers", "FOUNDRYQ_DEV_WORKERS", 1, "in-process workers to run (0: none)")
	httpAddr := f.String("http-addr", "FOUNDRYQ_HTTP_ADDR", "127.0.0.1:9090", "address for /metrics and /healthz (empty: off)")
	ef := addEmulatorFlags(f, 25*time.Millisecond)
	wf := addWorkerFlags(f, true) // with --foundry-endpoint set, dev uses it instead of the emulator
	lf := addLogFlags(f, "console")
	log, err := parseCommand(f, lf, args, stdout, stderr)
	if err != nil {
		return err
	}
	if *workers < 0 {
		return usageError{fmt.Errorf("dev: --workers must be 0 or more, got %d", *workers)}
	}
	if *wf.endpoint != "" {
		if err := checkEndpoint(*wf.endpoint, *wf.allowHTTP); err != nil {
			return err
		}
	}
	resolver, err := wf.resolver()
	if err != nil {
		return err
	}
	authOpts, err := auth.options()
	if err != nil {
		return err
	}

	ns, err := natsembed.Start(natsembed.Config{Host: "127.0.0.1", Port: *natsPort, StoreDir: *dataDir, ConfigFile: *natsConfig})
	if err != nil {
		return fmt.Errorf("dev: start NATS on 127.0.0.1:%d: %w", *natsPort, err)
	}
	defer ns.Shutdown()

	base, key := *wf.endpoint, *wf.apiKey
	var emu *emulator
	if base == "" {
		cfg := ef.config(log.With().Str("component", "emulator").Logger())
		if err := cfg.Validate(); err != nil {
			return usageError{err}
		}
		emu, err = startEmulator(*emuAddr, cfg)
		if err != nil {
			return fmt.Errorf("dev: %w", err)
		}
		defer func() { _ = emu.close() }()
		base, key = emu.baseURL(), *ef.apiKey
		if key == "" {
			key = "emulator" // any key: the emulator checks none, and without one the client would use Entra ID
		}
	}
	up, err := foundry.New(wf.foundryConfig(base, key))
	if err != nil {
		return err
	}
	defer up.CloseIdleConnections()
	// With --nats-config, as a user of that file (its inbox prefix derived).
	nc, err := events.Connect(ns.ClientURL(), append([]nats.Option{nats.Name("foundryq-dev")}, authOpts...)...)
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	defer nc.Close()

	// Provision before saying "running": clients can submit and watch at
	// once, even with --workers 0.
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := events.Provision(ctx, js, events.Names{Prefix: events.DefaultPrefix}, wf.config("", &log).Provision); err != nil {
		return fmt.Errorf("dev: provision streams: %w", err)
	}

	rctx, cancel := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(rctx)
	defer func() { cancel(); _ = g.Wait() }()        // an early return stops what started
	g.Go(func() error { <-gctx.Done(); return nil }) // run until interrupted, even with --workers 0
	reg := prometheus.NewRegistry()
	if *httpAddr != "" {
		// Before any worker starts: a port in use fails here, with nothing to stop.
		if _, err := serveOps(gctx, g, *httpAddr, reg, nc); err != nil {
			return fmt.Errorf("dev: %w", err)
		}
	}
	for i := range *workers {
		wlog := log.With().Str("component", "worker").Logger()
		cfg := wf.config("", &wlog)
		cfg.Secrets = resolver
		if cfg.WorkerID == "" {
			cfg.WorkerID = "dev-" + strconv.Itoa(i+1)
		} else if *workers > 1 {
			cfg.WorkerID += "-" + strconv.Itoa(i+1)
		}
		if i == 0 {
			cfg.Registerer = reg
		}
		w, err := consumer.New(nc, up, cfg)
		if err != nil {
			return err
		}
		g.Go(func() error { return w.Run(gctx) })
	}

	fmt.Fprintf(stdout, "foundryq dev is running.\n  NATS:     %s (JetStream data in %s)\n", ns.ClientURL(), ns.StoreDir())
	if *natsConfig != "" {
		fmt.Fprintf(stdout, "  Users:    from %s: connect as one, e.g. --nats-url nats://client:PASSWORD@%s\n", *natsConfig, strings.TrimPrefix(ns.ClientURL(), "nats://"))
	}
	if emu != nil {
		fmt.Fprintf(stdout, "  Foundry:  emulator at %s (stats: %s/_emulator/stats)\n", emu.baseURL(), emu.url())
	} else {
		fmt.Fprintf(stdout, "  Foundry:  %s\n", base)
	}
	fmt.Fprintf(stdout, "  Workers:  %d\n", *workers)
	if *httpAddr != "" {
		fmt.Fprintf(stdout, "  Metrics:  http://%s/metrics\n", *httpAddr)
	}
	fmt.Fprint(stdout, `
Try, in another terminal:
  go run ./cmd/foundryq submit --model gpt-4o --input "Tell me a story" --watch
  go run ./cmd/foundryq submit --model gpt-4o --input "slow one" --metadata emu_tokens=400 --metadata emu_token_ms=50 --run-id slow1
  go run ./cmd/foundryq watch slow1
  go run ./cmd/foundryq cancel slow1
  go run ./cmd/foundryq runs
Stop with Ctrl-C.
`)
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}
