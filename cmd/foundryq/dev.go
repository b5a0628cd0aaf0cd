package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

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
	emuAddr := f.String("emulator-addr", "FOUNDRYQ_EMULATOR_ADDR", "127.0.0.1:8089", "address of the Foundry emulator (not started when FOUNDRY_ENDPOINT is set)")
	workers := f.Int("workers", "FOUNDRYQ_DEV_WORKERS", 1, "in-process workers to run (0: none)")
	httpAddr := f.String("http-addr", "FOUNDRYQ_HTTP_ADDR", "127.0.0.1:9090", "address for /metrics and /healthz (empty: off)")
	gatewayAddr := f.String("gateway-addr", "FOUNDRYQ_DEV_GATEWAY_ADDR", "127.0.0.1:8080", "address of the HTTP gateway and web console, open without authentication (empty: off)")
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

	ns, err := natsembed.Start(natsembed.Config{Host: "127.0.0.1", Port: *natsPort, StoreDir: *dataDir})
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
	nc, err := ns.Connect()
	if err != nil {
		return err
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
	var gatewayBanner string
	if *gatewayAddr != "" {
		if gatewayBanner, err = startDevGateway(gctx, g, *gatewayAddr, ns, log.With().Str("component", "gateway").Logger()); err != nil {
			return err
		}
	}
	for i := range *workers {
		wlog := log.With().Str("component", "worker").Logger()
		cfg := wf.config("", &wlog)
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
	if emu != nil {
		fmt.Fprintf(stdout, "  Foundry:  emulator at %s (stats: %s/_emulator/stats)\n", emu.baseURL(), emu.url())
	} else {
		fmt.Fprintf(stdout, "  Foundry:  %s\n", base)
	}
	fmt.Fprintf(stdout, "  Workers:  %d\n", *workers)
	fmt.Fprint(stdout, gatewayBanner)
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
