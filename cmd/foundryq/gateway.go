package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/gateway"
)

// gatewayFlags are the settings of `foundryq gateway`.
type gatewayFlags struct {
	addr, tenantsFile, tokens, cors, tlsCert, tlsKey *string
	cbSecret, cbSecretFile, cbAllowCIDR, cbKeyFiles  *string
	allowedHosts, rateLimit                          *string
	noAuth, noAuthAnyAddr, cbLoopback                *bool
	maxBody, listLimit, cbAttempts                   *int
	maxStreams, rateBurst                            *int
	sseHeartbeat, cancelTimeout, shutdown, cbTimeout *time.Duration
	cbBackoff, cbMaxBackoff                          *time.Duration
	readTimeout, readHeaderTimeout, idleTimeout      *time.Duration
	writeTimeout                                     *time.Duration
}

func addGatewayFlags(f *flags) gatewayFlags {
	return gatewayFlags{
		addr:              f.String("addr", "FOUNDRYQ_GATEWAY_ADDR", gateway.DefaultAddr, "address to serve the HTTP API and the console on"),
		tenantsFile:       f.String("tenants-file", "FOUNDRYQ_GATEWAY_TENANTS_FILE", "", `tenants file: {"tenants":[{"name","token_sha256":["sha256:<hex>"],"nats_url","nats_creds","prefix"}]}`),
		tokens:            f.String("tokens", "FOUNDRYQ_GATEWAY_TOKENS", "", "SHA-256 digests (sha256:<hex>, comma-separated) of the bearer tokens of the default tenant, whose NATS settings are --nats-url, --nats-creds, --prefix; make one with: printf %s \"$TOKEN\" | sha256sum"),
		noAuth:            f.Bool("no-auth", "FOUNDRYQ_GATEWAY_NO_AUTH", false, "serve without authentication, as the default tenant (development only; loopback addresses only)"),
		noAuthAnyAddr:     f.Bool("no-auth-any-addr", "FOUNDRYQ_GATEWAY_NO_AUTH_ANY_ADDR", false, "allow --no-auth on a non-loopback address (behind an authenticating proxy)"),
		cors:              f.String("cors-origins", "FOUNDRYQ_GATEWAY_CORS_ORIGINS", "", "origins allowed to call the API from a browser, comma-separated (https://app.example.com, or *)"),
		maxBody:           f.Int("max-body", "FOUNDRYQ_GATEWAY_MAX_BODY", gateway.DefaultMaxBodyBytes, "largest request body in bytes (larger: 413)"),
		listLimit:         f.Int("list-limit", "FOUNDRYQ_GATEWAY_LIST_LIMIT", gateway.DefaultListLimit, "runs GET /v1/runs returns without a limit parameter (at most 1000)"),
		sseHeartbeat:      f.Duration("sse-heartbeat", "FOUNDRYQ_GATEWAY_SSE_HEARTBEAT", gateway.DefaultSSEHeartbeat, "comment line on an event stream silent for this long"),
		cancelTimeout:     f.Duration("cancel-timeout", "FOUNDRYQ_GATEWAY_CANCEL_TIMEOUT", gateway.DefaultCancelTimeout, "bound on a whole cancel: storing it, asking the workers, re-checking the record"),
		shutdown:          f.Duration("shutdown-timeout", "FOUNDRYQ_GATEWAY_SHUTDOWN_TIMEOUT", gateway.DefaultShutdownTimeout, "bound on finishing requests at shutdown (event streams end at once)"),
		tlsCert:           f.String("tls-cert", "FOUNDRYQ_GATEWAY_TLS_CERT", "", "TLS certificate file (PEM); with --tls-key the gateway serves HTTPS"),
		tlsKey:            f.String("tls-key", "FOUNDRYQ_GATEWAY_TLS_KEY", "", "TLS private key file (PEM)"),
		cbSecret:          f.Secret("callbacks-secret", "FOUNDRYQ_GATEWAY_CALLBACKS_SECRET", "gateway-wide HMAC secret of completion callbacks, first signature version (Foundryq-Signature; at least 16 bytes); give tenants keys of their own in the tenants file (callback_secret_files, signature v2) and drop this once receivers check v2"),
		cbSecretFile:      f.String("callbacks-secret-file", "FOUNDRYQ_GATEWAY_CALLBACKS_SECRET_FILE", "", "file holding the gateway-wide callback secret"),
		cbKeyFiles:        f.String("callbacks-key-files", "FOUNDRYQ_GATEWAY_CALLBACKS_KEY_FILES", "", "files holding the callback keys of the default tenant (--tokens), comma-separated: one, or two during a rotation; signature v2 (tenant \"default\"). Other tenants: callback_secret_files in the tenants file"),
		cbLoopback:        f.Bool("callbacks-allow-loopback", "FOUNDRYQ_GATEWAY_CALLBACKS_ALLOW_LOOPBACK", false, "accept callback URLs on loopback addresses (development only)"),
		cbAllowCIDR:       f.String("callbacks-allow-cidr", "FOUNDRYQ_GATEWAY_CALLBACKS_ALLOW_CIDR", "", "address ranges callbacks may reach although refused by default (private, shared, link-local, unique-local, cloud-internal), comma-separated CIDRs (10.20.0.0/16)"),
		allowedHosts:      f.String("allowed-hosts", "FOUNDRYQ_GATEWAY_ALLOWED_HOSTS", "", "host names the gateway answers (Host header), comma-separated; default with --no-auth: localhost, 127.0.0.1, ::1 and the --addr host (required with --no-auth-any-addr); with tokens: any"),
		readTimeout:       f.Duration("read-timeout", "FOUNDRYQ_GATEWAY_READ_TIMEOUT", gateway.DefaultReadTimeout, "bound on reading a request body (slower: 408 and disconnected)"),
		readHeaderTimeout: f.Duration("read-header-timeout", "FOUNDRYQ_GATEWAY_READ_HEADER_TIMEOUT", gateway.DefaultReadHeaderTimeout, "bound on reading a request's headers"),
		idleTimeout:       f.Duration("idle-timeout", "FOUNDRYQ_GATEWAY_IDLE_TIMEOUT", gateway.DefaultIdleTimeout, "how long a kept-alive connection may wait for its next request"),
		writeTimeout:      f.Duration("write-timeout", "FOUNDRYQ_GATEWAY_WRITE_TIMEOUT", gateway.DefaultWriteTimeout, "bound on each answer; an event stream's on each write (a stream whose client stops reading is closed)"),
		maxStreams:        f.Int("max-streams-per-token", "FOUNDRYQ_GATEWAY_MAX_STREAMS_PER_TOKEN", gateway.DefaultMaxStreamsPerToken, "event streams open at once per token (without auth: per client address); more: 429"),
		rateLimit:         f.String("rate-limit", "FOUNDRYQ_GATEWAY_RATE_LIMIT", strconv.FormatFloat(gateway.DefaultRateLimit, 'g', -1, 64), "requests per second per token (without auth: per client address), on average; more: 429 with Retry-After"),
		rateBurst:         f.Int("rate-burst", "FOUNDRYQ_GATEWAY_RATE_BURST", gateway.DefaultRateBurst, "requests a token may make at once above --rate-limit"),
		cbAttempts:        f.Int("callbacks-max-attempts", "FOUNDRYQ_GATEWAY_CALLBACKS_MAX_ATTEMPTS", 8, "attempts before a callback is dead-lettered"),
		cbBackoff:         f.Duration("callbacks-backoff", "FOUNDRYQ_GATEWAY_CALLBACKS_BACKOFF", 2*time.Second, "delay after the first failed attempt (doubles each time)"),
		cbMaxBackoff:      f.Duration("callbacks-max-backoff", "FOUNDRYQ_GATEWAY_CALLBACKS_MAX_BACKOFF", 5*time.Minute, "longest delay between attempts"),
		cbTimeout:         f.Duration("callbacks-timeout", "FOUNDRYQ_GATEWAY_CALLBACKS_TIMEOUT", 10*time.Second, "bound on one callback attempt"),
	}
}

// config builds the gateway's configuration; a bad setting is a usage error.
func (gf gatewayFlags) config(nf natsFlags, log *zerolog.Logger) (gateway.Config, error) {
	cfg := gateway.Config{
		Addr: *gf.addr, NATSURL: *nf.url, Prefix: *nf.prefix,
		NoAuth: *gf.noAuth, NoAuthAnyAddr: *gf.noAuthAnyAddr,
		MaxBodyBytes: int64(*gf.maxBody), ListLimit: *gf.listLimit, SSEHeartbeat: *gf.sseHeartbeat,
		CancelTimeout: *gf.cancelTimeout, ShutdownTimeout: *gf.shutdown,
		TLSCertFile: *gf.tlsCert, TLSKeyFile: *gf.tlsKey, Logger: log,
		ReadTimeout: *gf.readTimeout, ReadHeaderTimeout: *gf.readHeaderTimeout, IdleTimeout: *gf.idleTimeout,
		WriteTimeout: *gf.writeTimeout, MaxStreamsPerToken: *gf.maxStreams, RateBurst: *gf.rateBurst,
		AllowedHosts: splitList(*gf.allowedHosts),
		Callbacks: gateway.CallbackConfig{
			AllowLoopback: *gf.cbLoopback, MaxAttempts: *gf.cbAttempts, Backoff: *gf.cbBackoff,
			MaxBackoff: *gf.cbMaxBackoff, Timeout: *gf.cbTimeout,
		},
	}
	cfg.CORSOrigins = splitList(*gf.cors)
	rl, err := strconv.ParseFloat(strings.TrimSpace(*gf.rateLimit), 64)
	if err != nil || rl <= 0 || math.IsInf(rl, 0) || math.IsNaN(rl) {
		return cfg, usageError{fmt.Errorf("gateway: --rate-limit %q: want requests per second above 0 (20, 0.5)", *gf.rateLimit)}
	}
	cfg.RateLimit = rl
	for _, c := range splitList(*gf.cbAllowCIDR) {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return cfg, usageError{fmt.Errorf("gateway: --callbacks-allow-cidr %q: want CIDRs such as 10.20.0.0/16 or fd12::/64: %w", c, err)}
		}
		cfg.Callbacks.AllowCIDRs = append(cfg.Callbacks.AllowCIDRs, p.Masked())
	}
	switch {
	case *gf.cbSecret != "" && *gf.cbSecretFile != "":
		return cfg, usageError{fmt.Errorf("gateway: give --callbacks-secret or --callbacks-secret-file, not both")}
	case *gf.cbSecret != "":
		cfg.Callbacks.Secret = []byte(*gf.cbSecret)
	case *gf.cbSecretFile != "":
		data, err := os.ReadFile(*gf.cbSecretFile)
		if err != nil {
			return cfg, usageError{fmt.Errorf("gateway: --callbacks-secret-file: %w", err)}
		}
		cfg.Callbacks.Secret = []byte(strings.TrimSpace(string(data)))
	}
	if *gf.tenantsFile != "" {
		fh, err := os.Open(*gf.tenantsFile)
		if err != nil {
			return cfg, usageError{fmt.Errorf("gateway: --tenants-file: %w", err)}
		}
		ts, err := gateway.LoadTenants(fh)
		fh.Close()
		if err != nil {
			return cfg, usageError{fmt.Errorf("gateway: --tenants-file %s: %w", *gf.tenantsFile, err)}
		}
		cfg.Tenants = ts
	}
	hashes, err := gateway.ParseTokenHashes(*gf.tokens)
	if err != nil {
		return cfg, usageError{fmt.Errorf("gateway: --tokens: %w", err)}
	}
	if len(hashes) > 0 || cfg.NoAuth {
		// The default tenant connects as every command does (--nats-*
		// settings: user, credentials, TLS, reply inbox).
		cfg.Tenants = append(cfg.Tenants, gateway.Tenant{Name: "default", TokenSHA256: hashes, CallbackSecretFiles: splitList(*gf.cbKeyFiles)})
	}
	if len(cfg.Tenants) == 0 {
		return cfg, usageError{fmt.Errorf("gateway: no tokens: give --tokens (or FOUNDRYQ_GATEWAY_TOKENS) or --tenants-file; --no-auth serves without any (development only)")}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usageError{err}
	}
	return cfg, nil
}

// splitList splits a comma-separated setting, dropping empty items.
func splitList(s string) []string {
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func runGateway(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("gateway", "gateway [flags]")
	nf := addNATSFlags(f)
	gf := addGatewayFlags(f)
	lf := addLogFlags(f, "json")
	printConfig := f.Bool("print-config", "", false, "print the effective configuration (flag, environment or default; secrets redacted) after checking it, and exit")
	log, err := parseCommand(f, lf, args, stdout, stderr)
	if err != nil {
		return err
	}
	cfg, err := gf.config(nf, &log)
	if err != nil {
		return err
	}
	if *printConfig {
		return f.printConfig(stdout)
	}
	if err := checkFree(*gf.addr, gatewayAddrSetting); err != nil {
		return err // before connecting: a port in use is one line
	}
	for i, t := range cfg.Tenants {
		if t.Name == "default" && t.Conn == nil {
			nc, err := nf.connect("foundryq-gateway", true)
			if err != nil {
				return err
			}
			defer nc.Close()
			cfg.Tenants[i].Conn = nc
		}
	}
	g, err := gateway.New(cfg)
	if err != nil {
		return usageError{err}
	}
	return asListenError(g.Run(ctx), *gf.addr, gatewayAddrSetting)
}

// startDevGateway runs the gateway of `foundryq dev` in g until ctx ends:
// open (no authentication, which it logs loudly), on a connection of its
// own to the embedded server, with callbacks signed by a fresh secret and
// loopback callback URLs allowed. It returns once the gateway listens, with
// the lines dev prints about it. opts (with --nats-config: the gateway
// user) are added to the stack's connection options.
func startDevGateway(ctx context.Context, g *errgroup.Group, addr string, stack *devstack.Stack, log zerolog.Logger, opts ...nats.Option) (string, error) {
	nc, err := stack.Connect("foundryq-dev-gateway", opts...)
	if err != nil {
		return "", err
	}
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	key := []byte(hex.EncodeToString(secret))
	gw, err := gateway.New(gateway.Config{
		Addr: addr, NoAuth: true, Tenants: []gateway.Tenant{{Name: "dev", Conn: nc, CallbackSecrets: [][]byte{key}}}, Logger: &log,
		Callbacks: gateway.CallbackConfig{Secret: key, AllowLoopback: true},
	})
	if err != nil {
		nc.Close()
		return "", usageError{fmt.Errorf("dev: --gateway-addr: %w", err)}
	}
	done := make(chan error, 1)
	g.Go(func() error {
		defer nc.Close()
		err := gw.Run(ctx)
		done <- err
		return err
	})
	select {
	case <-gw.Ready():
	case err := <-done:
		if err == nil {
			err = ctx.Err()
		}
		return "", fmt.Errorf("dev: gateway: %w", asListenError(err, addr, devGatewaySetting))
	}
	url := "http://" + gw.Addr()
	return fmt.Sprintf("  Console:  %s/ (HTTP API under %s/v1/; OPEN: no authentication, development only)\n"+
		"  Callbacks: signed with key %s (v2 as tenant \"dev\", and sha256=; loopback URLs allowed)\n", url, url, key), nil
}
