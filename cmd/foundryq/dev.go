package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/devstack"
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
	httpAddr := f.String("http-addr", "FOUNDRYQ_HTTP_ADDR", "127.0.0.1:9090", "address for /metrics, /healthz and /readyz (empty: off)", hostPortOrEmpty())
	profiles := f.Bool("pprof", "FOUNDRYQ_PPROF", false, "also serve Go's profiles at /debug/pprof/ on --http-addr (of the whole process: NATS included)")
	gatewayAddr := f.String("gateway-addr", "FOUNDRYQ_DEV_GATEWAY_ADDR", "127.0.0.1:8080", "address of the HTTP gateway and web console, open without authentication (empty: off)")
	gatewayUser := f.String("gateway-nats-user", "FOUNDRYQ_DEV_GATEWAY_NATS_USER", "gateway", "with --nats-config: the NATS user the gateway connects as (the deploy configs' gateway role)")
	gatewayPassword := f.Secret("gateway-nats-password", "FOUNDRYQ_DEV_GATEWAY_NATS_PASSWORD", "with --nats-config: password of --gateway-nats-user (the gateway is off without it)")
	ef := addEmulatorFlags(f, 25*time.Millisecond)
	wf := addWorkerFlags(f, true) // with --foundry-endpoint set, dev uses it instead of the emulator
	checkUpstream := addCheckUpstreamFlag(f)
	lf := addLogFlags(f, "console")
	log, err := parseCommand(f, lf, args, stdout, stderr)
	if err != nil {
		return err
	}
	wlog := log.With().Str("component", "worker").Logger()
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

	scfg := devstack.Config{
		NATS:         natsembed.Config{Host: "127.0.0.1", Port: *natsPort, StoreDir: *dataDir, ConfigFile: *natsConfig},
		Connect:      authOpts, // with --nats-config, as a user of that file (its inbox prefix derived)
		EmulatorAddr: *emuAddr,
		Workers:      *workers,
		Worker:       wf.config("", &wlog),
	}
	scfg.Worker.Secrets = resolver
	reg := prometheus.NewRegistry()
	scfg.Worker.Registerer = reg // the first worker's metrics
	if *wf.endpoint != "" {
		scfg.Foundry = wf.foundryConfig(*wf.endpoint, *wf.apiKey)
	} else {
		scfg.Emulator = ef.config(log.With().Str("component", "emulator").Logger())
		if err := scfg.Emulator.Validate(); err != nil {
			return usageError{err}
		}
		key := *ef.apiKey
		if key == "" {
			key = "emulator" // any key: the emulator checks none, and without one the client would use Entra ID
		}
		scfg.Foundry = wf.foundryConfig("", key)
	}
	// Every address dev listens on is checked before anything starts: a
	// port in use is one line naming the setting to change, at once.
	withGateway := *gatewayAddr != "" && (*natsConfig == "" || *gatewayPassword != "")
	if err := checkDevPorts(*natsPort, *wf.endpoint == "", *emuAddr, *httpAddr, withGateway, *gatewayAddr); err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	// Provisioned before anything says "running": clients can submit and
	// watch at once, even with --workers 0.
	stack, err := devstack.Start(ctx, scfg)
	if err != nil {
		return fmt.Errorf("dev: %w", asListenError(err, *emuAddr, emulatorAddrSetting))
	}
	defer func() { _ = stack.Close() }()
	if *checkUpstream {
		checkStackUpstream(ctx, stack, wlog)
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { <-gctx.Done(); return nil }) // run until interrupted
	if *httpAddr != "" {
		if _, err := serveOps(gctx, g, *httpAddr, reg, stack.Conn, stackReady(stack), *profiles); err != nil {
			return fmt.Errorf("dev: %w", err)
		}
	}
	ns := stack.NATS
	var gatewayBanner string
	switch {
	case *gatewayAddr != "" && *natsConfig != "" && *gatewayPassword == "":
		// The gateway needs a user of the file with its rights (the deploy
		// configs' gateway role), not the workers'.
		gatewayBanner = "  Console:  off with --nats-config until --gateway-nats-password is set (the gateway connects as --gateway-nats-user)\n"
	case *gatewayAddr != "":
		var opts []nats.Option
		if *natsConfig != "" {
			opts = append(opts, nats.UserInfo(*gatewayUser, *gatewayPassword))
		}
		if gatewayBanner, err = startDevGateway(gctx, g, *gatewayAddr, stack, log.With().Str("component", "gateway").Logger(), opts...); err != nil {
			return err
		}
	}

	fmt.Fprintf(stdout, "foundryq dev is running.\n  NATS:     %s (JetStream data in %s)\n", ns.ClientURL(), ns.StoreDir())
	if *natsConfig != "" {
		fmt.Fprintf(stdout, "  Users:    from %s: connect as one, e.g. --nats-url nats://client:PASSWORD@%s\n", *natsConfig, strings.TrimPrefix(ns.ClientURL(), "nats://"))
	}
	if emu := stack.Emulator; emu != nil {
		fmt.Fprintf(stdout, "  Foundry:  emulator at %s (stats: %s/_emulator/stats)\n", emu.BaseURL(), emu.URL())
	} else {
		fmt.Fprintf(stdout, "  Foundry:  %s\n", *wf.endpoint)
	}
	fmt.Fprintf(stdout, "  Workers:  %d\n", *workers)
	fmt.Fprint(stdout, gatewayBanner)
	if *httpAddr != "" {
		fmt.Fprintf(stdout, "  Metrics:  http://%s/metrics\n", *httpAddr)
	}
	fmt.Fprint(stdout, devHints(devClientURL(ns.ClientURL(), *natsConfig != "")))
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// stackReady is dev's readiness: every worker of the stack is ready (with
// --workers 0, the stack's connection is up).
func stackReady(stack *devstack.Stack) func(context.Context) error {
	return func(ctx context.Context) error {
		if !stack.Conn.IsConnected() {
			return fmt.Errorf("%w: nats: %s", consumer.ErrNotReady, stack.Conn.Status())
		}
		for _, w := range stack.Workers() {
			if err := w.Ready(ctx); err != nil {
				return fmt.Errorf("worker %s: %w", w.ID(), err)
			}
		}
		return nil
	}
}

// checkStackUpstream runs the check of the Foundry endpoint (worker's
// --check-upstream) on every worker of the stack, at once: each one's
// readiness reports a failure until a check passes.
func checkStackUpstream(ctx context.Context, stack *devstack.Stack, log zerolog.Logger) {
	var wg sync.WaitGroup
	for _, w := range stack.Workers() {
		wg.Go(func() {
			checkWorkerUpstream(ctx, w.Worker, stack.Upstream.Check, log.With().Str("worker", w.ID()).Logger())
		})
	}
	wg.Wait()
}

// checkDevPorts checks, before dev starts anything, that the addresses it
// will listen on are free: NATS's port (on 127.0.0.1; 0 picks one), the
// emulator's when it runs, the metrics' and the gateway's when on.
func checkDevPorts(natsPort int, withEmulator bool, emuAddr, httpAddr string, withGateway bool, gatewayAddr string) error {
	if natsPort != 0 {
		if err := checkFree(net.JoinHostPort("127.0.0.1", strconv.Itoa(natsPort)), devNATSPortSetting); err != nil {
			return err
		}
	}
	checks := []struct {
		on   bool
		addr string
		s    setting
	}{
		{withEmulator, emuAddr, emulatorAddrSetting},
		{httpAddr != "", httpAddr, opsAddrSetting},
		{withGateway, gatewayAddr, devGatewaySetting},
	}
	for _, c := range checks {
		if !c.on {
			continue
		}
		if err := checkFree(c.addr, c.s); err != nil {
			return err
		}
	}
	return nil
}

// devClientURL is the --nats-url a client of dev gives: none (empty) for
// the default URL, else dev's URL; with --nats-config, with the deploy
// configs' client user in it.
func devClientURL(url string, withUsers bool) string {
	switch {
	case withUsers:
		return "nats://client:PASSWORD@" + strings.TrimPrefix(url, "nats://")
	case url == nats.DefaultURL:
		return ""
	}
	return url
}

// devHints are the commands dev suggests, with the --nats-url that reaches
// this dev (none on the default port).
func devHints(natsURL string) string {
	var b strings.Builder
	b.WriteString("\nTry, in another terminal:\n")
	for _, args := range []string{
		`submit --model gpt-4o --input "Tell me a story" --watch`,
		`submit --model gpt-4o --input "slow one" --metadata emu_tokens=400 --metadata emu_token_ms=50 --run-id slow1`,
		`watch slow1`,
		`cancel slow1`,
		`runs`,
	} {
		name, rest, _ := strings.Cut(args, " ")
		b.WriteString("  go run ./cmd/foundryq " + name)
		if natsURL != "" {
			b.WriteString(" --nats-url " + natsURL)
		}
		if rest != "" {
			b.WriteString(" " + rest)
		}
		b.WriteString("\n")
	}
	b.WriteString("Stop with Ctrl-C.\n")
	return b.String()
}
