package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/foundryq/foundryq/events"
)

// Gateway serves the HTTP API, the event streams and the console, and runs
// the callback notifier of every tenant. It keeps no state of its own
// between requests: any number of gateways may serve the same tenants
// behind a load balancer.
type Gateway struct {
	cfg Config
	log zerolog.Logger

	tenants  []*tenant
	byDigest map[string]*tenant // token digest (hex) → tenant

	started atomic.Bool
	ready   chan struct{}
	mu      sync.Mutex
	addr    string

	// streams ends every open event stream when the gateway shuts down
	// (http.Server.Shutdown does not end running handlers).
	streams    context.Context
	endStreams context.CancelFunc

	liveBuffer int // see defaultLiveBuffer; tests make it small
	limits     *limits
}

// tenant is a tenant at run time: its connection and clients.
type tenant struct {
	cfg    Tenant
	nc     *nats.Conn
	owned  bool // dialed by the gateway, closed by it
	client *events.Client
	js     jetstream.JetStream
	names  events.Names
	cb     *callbacks // nil when callbacks are off
	cbKeys [][]byte   // the tenant's own callback keys (signature v2)
}

// New checks cfg and returns a Gateway; Run connects and serves.
func New(cfg Config) (*Gateway, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g := &Gateway{cfg: cfg, log: *cfg.Logger, byDigest: map[string]*tenant{}, ready: make(chan struct{}), liveBuffer: defaultLiveBuffer, limits: newLimits(cfg)}
	g.streams, g.endStreams = context.WithCancel(context.Background())
	for _, tc := range cfg.Tenants {
		names, _ := events.NewNames(tc.Prefix) // checked by validate
		keys, err := tc.callbackKeys()
		if err != nil {
			return nil, err
		}
		t := &tenant{cfg: tc, names: names, cbKeys: keys}
		g.tenants = append(g.tenants, t)
		for _, h := range tc.TokenSHA256 {
			n, _ := normalizeHash(h)
			g.byDigest[n] = t
		}
	}
	return g, nil
}

// Ready is closed once the gateway listens (Addr is then set).
func (g *Gateway) Ready() <-chan struct{} { return g.ready }

// Addr returns the address the gateway listens on, once Ready is closed.
func (g *Gateway) Addr() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.addr
}

// Run connects to every tenant's NATS, listens, and serves until ctx ends.
// Shutdown order: stop accepting connections and end every event stream
// (clients resume with Last-Event-ID elsewhere), let other requests finish
// within ShutdownTimeout, stop the callback notifiers (a delivery in flight
// is retried by another gateway or after a restart), then close the NATS
// connections the gateway opened. It returns nil after a shutdown caused by
// ctx, or the error that stopped it. Run may be called once.
func (g *Gateway) Run(ctx context.Context) error {
	if !g.started.CompareAndSwap(false, true) {
		return errors.New("gateway: Run called twice")
	}
	defer g.endStreams()
	if err := g.connect(); err != nil {
		g.closeConns()
		return err
	}
	defer g.closeConns()
	if g.cfg.NoAuth {
		g.log.Warn().Str("addr", g.cfg.Addr).Msg("THE GATEWAY IS OPEN: no authentication (--no-auth); anyone who reaches it can submit, read and cancel runs")
	} else if g.cfg.TLSCertFile == "" {
		if host, _, _ := net.SplitHostPort(g.cfg.Addr); !isLoopbackHost(host) {
			g.log.Warn().Str("addr", g.cfg.Addr).Msg("bearer tokens over plain HTTP: set TLS (--tls-cert, --tls-key) or terminate TLS in front of the gateway")
		}
	}
	srv := &http.Server{
		Handler:           g.Handler(),
		ReadHeaderTimeout: g.cfg.ReadHeaderTimeout,
		IdleTimeout:       g.cfg.IdleTimeout,
		// Every answer is bounded by WriteTimeout; an event stream moves
		// its deadline forward at each write (sseWriter), and is the only
		// one exempt. Bodies: see bodyDeadline.
		WriteTimeout: g.cfg.WriteTimeout,
		ErrorLog:     log.New(zerologWriter{g.log}, "", 0),
	}
	if g.cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(g.cfg.TLSCertFile, g.cfg.TLSKeyFile)
		if err != nil {
			return fmt.Errorf("gateway: load TLS certificate %s and key %s: %w", g.cfg.TLSCertFile, g.cfg.TLSKeyFile, err)
		}
		srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	}
	// Callback resources before listening: a run accepted with a callback
	// must find its bucket and the notifier's consumers in place.
	for _, t := range g.tenants {
		if t.cb != nil {
			if err := t.cb.provision(ctx); err != nil {
				return err
			}
		}
	}
	ln, err := net.Listen("tcp", g.cfg.Addr)
	if err != nil {
		return fmt.Errorf("gateway: listen on %s: %w", g.cfg.Addr, err)
	}
	g.mu.Lock()
	g.addr = ln.Addr().String()
	g.mu.Unlock()
	close(g.ready)
	scheme := "http"
	if srv.TLSConfig != nil {
		scheme = "https"
	}
	g.log.Info().Str("url", scheme+"://"+ln.Addr().String()+"/").Int("tenants", len(g.tenants)).Msg("gateway listening")

	eg, ectx := errgroup.WithContext(ctx)
	eg.Go(func() error {
		var err error
		if srv.TLSConfig != nil {
			err = srv.ServeTLS(ln, "", "")
		} else {
			err = srv.Serve(ln)
		}
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("gateway: serve: %w", err)
	})
	eg.Go(func() error {
		<-ectx.Done()
		g.endStreams()
		sctx, cancel := context.WithTimeout(context.Background(), g.cfg.ShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
		}
		return nil
	})
	for _, t := range g.tenants {
		if t.cb != nil {
			eg.Go(func() error { return t.cb.run(ectx) })
		}
	}
	err = eg.Wait()
	if ctx.Err() != nil && err == nil {
		return nil
	}
	return err
}

// connect dials every tenant that has no connection of its own and makes
// its clients. A server that is not up yet is retried in the background:
// requests get 503 until it answers.
func (g *Gateway) connect() error {
	for _, t := range g.tenants {
		nc := t.cfg.Conn
		if nc == nil {
			opts := []nats.Option{
				nats.Name("foundryq-gateway/" + t.cfg.Name),
				nats.MaxReconnects(-1), nats.ReconnectWait(time.Second), nats.Timeout(5 * time.Second),
				nats.RetryOnFailedConnect(true),
				nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
					// A slow client's event stream loses live messages; its
					// follower fills the gap from the stream.
					ev := g.log.Warn()
					if errors.Is(err, nats.ErrSlowConsumer) {
						ev = g.log.Debug()
					}
					if sub != nil {
						ev = ev.Str("subject", sub.Subject)
					}
					ev.Err(err).Str("tenant", t.cfg.Name).Msg("nats")
				}),
			}
			if t.cfg.NATSCreds != "" {
				opts = append(opts, nats.UserCredentials(t.cfg.NATSCreds))
			}
			var err error
			// events.Connect: the reply inbox of the NATS user, which the
			// deploy configs allow each user only.
			if nc, err = events.Connect(t.cfg.NATSURL, opts...); err != nil {
				return fmt.Errorf("gateway: tenant %s: connect to NATS at %s: %w", t.cfg.Name, redactURL(t.cfg.NATSURL), err)
			}
			t.owned = true
		}
		t.nc = nc
		client, err := events.NewClient(nc, events.ClientConfig{
			Prefix: t.cfg.Prefix, CancelTimeout: g.cfg.CancelTimeout, HeartbeatInterval: g.cfg.WatchHeartbeat,
		})
		if err != nil {
			return fmt.Errorf("gateway: tenant %s: %w", t.cfg.Name, err)
		}
		t.client = client
		if t.js, err = jetstream.New(nc); err != nil {
			return fmt.Errorf("gateway: tenant %s: %w", t.cfg.Name, err)
		}
		if len(g.cfg.Callbacks.Secret) > 0 || len(t.cbKeys) > 0 {
			t.cb = newCallbacks(g.cfg.Callbacks, t, g.log.With().Str("tenant", t.cfg.Name).Logger())
		}
	}
	return nil
}

func (g *Gateway) closeConns() {
	for _, t := range g.tenants {
		if t.owned && t.nc != nil {
			t.nc.Close()
		}
	}
}

// Handler returns the gateway's HTTP handler: the API under /v1/, the
// health check at /healthz, the API's OpenAPI document at /openapi.json
// and the console at /. It is valid once Run has
// connected (Ready is closed).
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	api := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, g.authenticate(h)) }
	api("POST /v1/runs", g.createRun)
	api("GET /v1/runs", g.listRuns)
	mux.Handle("/v1/runs", methodNotAllowed("GET, POST"))
	api("GET /v1/runs/{id}", g.getRun)
	mux.Handle("/v1/runs/{id}", methodNotAllowed("GET"))
	api("GET /v1/runs/{id}/events", g.streamEvents)
	mux.Handle("/v1/runs/{id}/events", methodNotAllowed("GET"))
	api("POST /v1/runs/{id}/cancel", g.cancelRun)
	mux.Handle("/v1/runs/{id}/cancel", methodNotAllowed("POST"))
	api("POST /v1/runs/{id}/input", g.answerRun)
	mux.Handle("/v1/runs/{id}/input", methodNotAllowed("POST"))
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, apiErr(http.StatusNotFound, CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	mux.HandleFunc("GET /healthz", g.health)
	mux.HandleFunc("GET /openapi.json", serveOpenAPI)
	mux.Handle("/", g.console()) // GET only: see console
	return g.guard(mux)
}

func methodNotAllowed(allow string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, apiErr(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "%s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow))
	})
}

// health answers 200 while every tenant's NATS connection is up.
func (g *Gateway) health(w http.ResponseWriter, _ *http.Request) {
	up := 0
	for _, t := range g.tenants {
		if t.nc != nil && t.nc.IsConnected() {
			up++
		}
	}
	if up < len(g.tenants) {
		writeError(w, apiErr(http.StatusServiceUnavailable, CodeUnavailable, "%d of %d tenants connected to NATS", up, len(g.tenants)))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "tenants": len(g.tenants)})
}

// zerologWriter takes the HTTP server's own log lines (TLS handshake
// errors, ...) at debug level.
type zerologWriter struct{ l zerolog.Logger }

func (z zerologWriter) Write(p []byte) (int, error) {
	z.l.Debug().Str("component", "http").Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}

// redactURL hides the passwords of a comma-separated list of URLs, for
// logs and errors.
func redactURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			parts[i] = "(unparsable URL)"
			continue
		}
		parts[i] = u.Redacted()
	}
	return strings.Join(parts, ",")
}
