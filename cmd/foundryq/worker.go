package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/internal/secrets"
)

// workerFlags are the settings of a worker (shared by worker and dev).
type workerFlags struct {
	endpoint, apiKey, scope, agentField              *string
	allowHTTP, h2c                                   *bool
	secretsDir, secretHosts                          *string
	concurrency, maxDeliver, maxAckPending, replicas *int
	metricKeys                                       *int
	workerID                                         *string
	defaultTimeout, cancelConfirm, shutdown          *time.Duration
	queuedTimeout, storeFullTimeout, streamIdle      *time.Duration
	obfuscation                                      *bool
	ackWait, eventsMaxAge, retryDelay, stateTTL      *time.Duration
	newerFieldsGrace                                 *time.Duration
	eventInterval, cancelAudit, foregroundPoll       *time.Duration
	stuckAfter                                       *time.Duration
	toolTimeout, toolCancelGrace                     *time.Duration
	toolTimeouts, toolIdempotent                     *string
	serveTools                                       *bool
	limits                                           limitFlags
	lanes                                            laneFlags // lanes_flags.go
}

func addWorkerFlags(f *flags, withEndpoint bool) workerFlags {
	var w workerFlags
	if withEndpoint {
		w.endpoint = f.String("foundry-endpoint", "FOUNDRY_ENDPOINT", "", "Foundry v1 base URL: https://RES.openai.azure.com/openai/v1/ or https://RES.services.ai.azure.com/api/projects/PROJECT/openai/v1/")
		w.allowHTTP = f.Bool("foundry-allow-http", "FOUNDRY_ALLOW_HTTP", false, "allow an http:// --foundry-endpoint on a host other than loopback (an emulator on a private network; never Azure)")
		w.h2c = f.Bool("foundry-h2c", "FOUNDRY_H2C", false, "speak HTTP/2 without TLS to an http:// --foundry-endpoint (the emulator accepts it; over https HTTP/2 is negotiated by itself)")
		w.apiKey = f.Secret("foundry-api-key", "FOUNDRY_API_KEY", "Foundry API key; without it Entra ID (DefaultAzureCredential) is used")
		w.scope = f.String("foundry-scope", "FOUNDRY_SCOPE", "", "Entra token scope; default chosen from the endpoint's host", rule[string]{validScope, `"" (chosen from the endpoint) or an absolute URL such as https://ai.azure.com/.default`})
		w.agentField = f.String("agent-field", "FOUNDRY_AGENT_FIELD", "agent_reference", "request field that carries a Foundry agent reference", rule[string]{func(v string) bool { return foundry.ValidFieldName(v) }, "a JSON field name of [A-Za-z0-9_-], at most 64 characters"})
	}
	w.streamIdle = f.Duration("foundry-stream-idle-timeout", "FOUNDRY_STREAM_IDLE_TIMEOUT", foundry.DefaultStreamIdleTimeout, "a Foundry stream that sends nothing, not even a keepalive, for this long is re-read and re-attached once; silent again, the run fails upstream_stalled", positive())
	w.obfuscation = f.Bool("foundry-stream-obfuscation", "FOUNDRY_STREAM_OBFUSCATION", false, "let Foundry pad every streamed delta with random characters (stream_options.include_obfuscation); off by default: the padding protects token lengths on untrusted networks and costs bytes on every delta")
	w.concurrency = f.Int("concurrency", "FOUNDRYQ_CONCURRENCY", 64, "runs one worker owns at once", atLeast(1))
	w.workerID = f.String("worker-id", "FOUNDRYQ_WORKER_ID", "", "worker id in events and state (default <hostname>-<pid>)", idOrEmpty())
	w.defaultTimeout = f.Duration("default-timeout", "FOUNDRYQ_DEFAULT_TIMEOUT", consumer.DefaultRunTimeout, "run deadline for requests without timeout_seconds (0: none)", notNegative("none"))
	w.eventInterval = f.Duration("event-interval", "FOUNDRYQ_EVENT_INTERVAL", 50*time.Millisecond, "least time between two text.delta events of a run; text arriving sooner merges (negative: off)", positiveOrOff(5*time.Second))
	w.cancelConfirm = f.Duration("cancel-confirm-timeout", "FOUNDRYQ_CANCEL_CONFIRM_TIMEOUT", 10*time.Minute, "how long the owner keeps calling Foundry's cancel until Foundry confirms it; then the run ends cancelled with upstream_status unconfirmed", positive())
	w.queuedTimeout = f.Duration("queued-timeout", "FOUNDRYQ_QUEUED_TIMEOUT", 10*time.Minute, "how long a response may stay queued upstream before it is cancelled and the run fails upstream_queued", positive())
	w.storeFullTimeout = f.Duration("store-full-timeout", "FOUNDRYQ_STORE_FULL_TIMEOUT", 30*time.Second, "how long JetStream may refuse a run's events (store full) before its response is cancelled upstream and the run fails store_full", positive())
	w.cancelAudit = f.Duration("cancel-audit-delay", "FOUNDRYQ_CANCEL_AUDIT_DELAY", 30*time.Second, "read a cancelled response back after this long to catch a late completion (negative: off)", positiveOrOff(0))
	w.foregroundPoll = f.Duration("foreground-poll-timeout", "FOUNDRYQ_FOREGROUND_POLL_TIMEOUT", time.Minute, "how long to poll a foreground response (hosted agents) whose stream broke before the run ends stream_lost", positive())
	w.stuckAfter = f.Duration("stuck-after", "FOUNDRYQ_STUCK_AFTER", 5*time.Minute, "a run that stores no event for this long counts in the foundryq_runs_stuck gauge", positive())
	w.metricKeys = f.Int("metric-keys", "FOUNDRYQ_METRIC_KEYS", consumer.DefaultMetricKeys, "fairness keys, besides those --weights and --cap name, that get a label value of their own in the per-key metrics (the first seen); later keys share _other (0: none)", between(0, 10000))
	w.shutdown = f.Duration("shutdown-timeout", "FOUNDRYQ_SHUTDOWN_TIMEOUT", 15*time.Second, "bound on handing off runs at shutdown", positive())
	w.retryDelay = f.Duration("retry-delay", "FOUNDRYQ_RETRY_DELAY", 2*time.Second, "delay before retrying a job after a retryable Foundry error (times the failures so far), unless Foundry asks for another", positive())
	w.newerFieldsGrace = f.Duration("newer-fields-grace", "FOUNDRYQ_NEWER_FIELDS_GRACE", 10*time.Minute, "how long after its submit a run request whose only fault is fields this worker does not know (a newer version's) is handed back for a newer worker, before it fails invalid_request (negative: fails at once)", positiveOrOff(0))
	w.ackWait = f.Duration("ack-wait", "FOUNDRYQ_ACK_WAIT", 30*time.Second, "job lease: redelivery after a worker vanishes", durAtLeast(time.Second))
	w.maxDeliver = f.Int("max-deliver", "FOUNDRYQ_MAX_DELIVER", 10, "failed attempts a run may use before it ends run.failed (hand-offs and lease renewals do not count)", atLeast(1))
	w.maxAckPending = f.Int("max-ack-pending", "FOUNDRYQ_MAX_ACK_PENDING", events.DefaultMaxAckPending, "runs the whole fleet may run at once: the jobs its consumers let be in flight (a run holds its job until it ends; a run that waits for answers holds none); -1: no limit", unlimitedOrAtLeast(1))
	w.eventsMaxAge = f.Duration("events-max-age", "FOUNDRYQ_EVENTS_MAX_AGE", 24*time.Hour, "how long run events are kept", durAtLeast(time.Second))
	w.stateTTL = f.Duration("state-ttl", "FOUNDRYQ_STATE_TTL", 7*24*time.Hour, "how long run state records are kept", durAtLeast(time.Second))
	f.checkAfter("state-ttl", func() bool { return *w.stateTTL >= *w.eventsMaxAge }, func() string {
		return fmt.Sprintf("at least --events-max-age (%s): a run id must be known as long as its events are kept", *w.eventsMaxAge)
	})
	w.replicas = f.Int("replicas", "FOUNDRYQ_REPLICAS", 1, "JetStream replicas for streams and bucket", between(1, 5))
	w.secretsDir = f.String("secrets-dir", "FOUNDRYQ_SECRETS_DIR", "", "directory of secrets, one file each (a mounted Kubernetes Secret), for {\"secret\": NAME} references in MCP tools; also read: FOUNDRYQ_SECRET_<NAME> variables", dirOrEmpty())
	w.serveTools = f.Bool("serve-tools", "FOUNDRYQ_SERVE_TOOLS", true, "call the function tools served over NATS (<prefix>.tools.<name>) before asking the run's caller; false: every function call is asked of the caller (input.required)")
	w.toolTimeout = f.Duration("tool-timeout", "FOUNDRYQ_TOOL_TIMEOUT", consumer.DefaultToolTimeout, "bound on a call of a function tool served over NATS; past it the call is cancelled and the run fails tool_timeout", positive())
	w.toolTimeouts = f.String("tool-timeouts", "FOUNDRYQ_TOOL_TIMEOUTS", "", "per-tool --tool-timeout: NAME=DURATION entries separated by commas, e.g. get_weather=5s,search=2m", rule[string]{func(v string) bool {
		_, err := parseToolTimeouts(v)
		return err == nil
	}, "NAME=DURATION entries separated by commas (NAME: [A-Za-z0-9_-]{1,64}; DURATION positive, e.g. 5s)"})
	w.toolIdempotent = f.String("tool-idempotent", "FOUNDRYQ_TOOL_IDEMPOTENT", "", "function tools (names separated by commas) whose call may run twice: sent again to another instance when its service stops answering mid-call, instead of failing the run", rule[string]{func(v string) bool {
		_, err := parseToolNames(v)
		return err == nil
	}, "tool names of [A-Za-z0-9_-]{1,64} separated by commas"})
	w.toolCancelGrace = f.Duration("tool-cancel-grace", "FOUNDRYQ_TOOL_CANCEL_GRACE", time.Second, "how long a cancelled tool call may take to answer before the worker goes on without it", positive())
	w.limits = addLimitFlags(f)
	w.lanes = addLaneFlags(f)
	w.secretHosts = f.String("secret-hosts", "FOUNDRYQ_SECRET_HOSTS", "", "where each secret may be sent: NAME=HOST[,HOST...] entries separated by ';' or spaces (HOST: an https server_url host, *.domain, or a connector_id, tunnel_id or project_connection_id)")
	return w
}

// resolver returns the secret store of --secrets-dir, the FOUNDRYQ_SECRET_*
// variables and --secret-hosts, checked at start.
func (w workerFlags) resolver() (*secrets.Resolver, error) {
	hosts, err := secrets.ParseHosts(*w.secretHosts)
	if err != nil {
		return nil, usageError{fmt.Errorf("--secret-hosts (FOUNDRYQ_SECRET_HOSTS): %w", err)}
	}
	r, err := secrets.NewResolver(secrets.Config{Dir: *w.secretsDir, Hosts: hosts})
	if err != nil {
		return nil, usageError{fmt.Errorf("--secrets-dir / --secret-hosts: %w", err)}
	}
	return r, nil
}

// checkEndpoint refuses a Foundry endpoint that would send the API key or
// an Entra ID token in clear text: http:// is for loopback only, unless
// --foundry-allow-http says otherwise.
func checkEndpoint(endpoint string, allowHTTP bool) error {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return usageError{fmt.Errorf("--foundry-endpoint (FOUNDRY_ENDPOINT) %q: want an absolute https:// URL", secrets.RedactURL(endpoint))}
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if allowHTTP || isLoopback(u.Hostname()) {
			return nil
		}
		return usageError{fmt.Errorf("--foundry-endpoint (FOUNDRY_ENDPOINT) %s: http:// would send credentials in clear text; use https://, or set --foundry-allow-http (FOUNDRY_ALLOW_HTTP=true) for an emulator on a private network", secrets.RedactURL(endpoint))}
	}
	return usageError{fmt.Errorf("--foundry-endpoint (FOUNDRY_ENDPOINT) %s: scheme %q, want https", secrets.RedactURL(endpoint), u.Scheme)}
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (w workerFlags) config(prefix string, log *zerolog.Logger) consumer.Config {
	cfg := consumer.Config{
		Prefix:                prefix,
		WorkerID:              *w.workerID,
		Concurrency:           *w.concurrency,
		DefaultTimeout:        runTimeout(*w.defaultTimeout),
		CancelConfirmTimeout:  *w.cancelConfirm,
		QueuedTimeout:         *w.queuedTimeout,
		StoreFullTimeout:      *w.storeFullTimeout,
		CancelAuditDelay:      *w.cancelAudit,
		EventInterval:         *w.eventInterval,
		ShutdownTimeout:       *w.shutdown,
		ForegroundPollTimeout: *w.foregroundPoll,
		RetryDelay:            *w.retryDelay,
		NewerFieldsGrace:      *w.newerFieldsGrace,
		StuckAfter:            *w.stuckAfter,
		MetricKeys:            metricKeys(*w.metricKeys),
		ToolTimeout:           *w.toolTimeout,
		ToolTimeouts:          checked(parseToolTimeouts(*w.toolTimeouts)),
		IdempotentTools:       checked(parseToolNames(*w.toolIdempotent)),
		ToolCancelGrace:       *w.toolCancelGrace,
		DisableServedTools:    !*w.serveTools,
		FIFO:                  *w.lanes.fifo,
		PriorityAge:           *w.lanes.priorityAge,
		Weights:               checked(parseWeights(*w.lanes.weights)),
		Logger:                log,
		Provision: consumer.ProvisionConfig{
			Replicas:      *w.replicas,
			EventsMaxAge:  *w.eventsMaxAge,
			AckWait:       *w.ackWait,
			MaxDeliver:    *w.maxDeliver,
			MaxAckPending: *w.maxAckPending,
			StateTTL:      *w.stateTTL,
		},
	}
	w.limits.apply(&cfg)
	return cfg
}

// parseToolTimeouts parses --tool-timeouts: NAME=DURATION entries
// separated by commas; nil for "".
func parseToolTimeouts(v string) (map[string]time.Duration, error) {
	var m map[string]time.Duration
	for _, entry := range strings.Split(v, ",") {
		if entry = strings.TrimSpace(entry); entry == "" {
			continue
		}
		name, dur, ok := strings.Cut(entry, "=")
		d, err := time.ParseDuration(strings.TrimSpace(dur))
		if name = strings.TrimSpace(name); !ok || !events.ValidToolName(name) || err != nil || d <= 0 {
			return nil, fmt.Errorf("%q: want NAME=DURATION", entry)
		}
		if m == nil {
			m = make(map[string]time.Duration)
		}
		m[name] = d
	}
	return m, nil
}

// parseToolNames parses --tool-idempotent: tool names separated by
// commas; nil for "".
func parseToolNames(v string) ([]string, error) {
	var names []string
	for _, name := range strings.Split(v, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if !events.ValidToolName(name) {
			return nil, fmt.Errorf("%q is not a tool name", name)
		}
		names = append(names, name)
	}
	return names, nil
}

// checked is the value of a parse that the setting's rule has already
// checked.
func checked[T any](v T, _ error) T { return v }

// runTimeout maps the flag's 0 (no deadline) to the config's negative.
func runTimeout(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// metricKeys is --metric-keys as consumer.Config.MetricKeys: the flag's 0
// (no key but the named ones) is negative there, where 0 is the default.
func metricKeys(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

func (w workerFlags) foundryConfig(endpoint, apiKey string) foundry.Config {
	c := foundry.Config{BaseURL: endpoint, APIKey: apiKey, Scope: *w.scope, AgentField: *w.agentField, StreamIdleTimeout: *w.streamIdle,
		IncludeObfuscation: *w.obfuscation}
	if w.h2c != nil {
		c.CleartextHTTP2 = *w.h2c
	}
	return c
}

func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("worker", "worker [flags]")
	nf := addNATSFlags(f)
	wf := addWorkerFlags(f, true)
	httpAddr := f.String("http-addr", "FOUNDRYQ_HTTP_ADDR", ":9090", "address for /metrics, /healthz and /readyz (empty: off)", hostPortOrEmpty())
	profiles := f.Bool("pprof", "FOUNDRYQ_PPROF", false, "also serve Go's profiles at /debug/pprof/ on --http-addr (keep that address private)")
	checkUpstream := addCheckUpstreamFlag(f)
	lf := addLogFlags(f, "json")
	printConfig := f.Bool("print-config", "", false, "print the effective configuration (flag, environment or default; secrets redacted) after checking it, and exit")
	log, err := parseCommand(f, lf, args, stdout, stderr)
	if err != nil {
		return err
	}
	if *wf.endpoint == "" {
		return usageError{errors.New("worker: --foundry-endpoint (FOUNDRY_ENDPOINT) is required")}
	}
	if err := checkEndpoint(*wf.endpoint, *wf.allowHTTP); err != nil {
		return err
	}
	resolver, err := wf.resolver()
	if err != nil {
		return err
	}
	cfg := wf.config(*nf.prefix, &log)
	if err := cfg.Validate(); err != nil {
		return usageError{fmt.Errorf("worker: %w", err)}
	}
	up, err := foundry.New(wf.foundryConfig(*wf.endpoint, *wf.apiKey))
	if err != nil {
		if errors.Is(err, foundry.ErrInvalidConfig) {
			err = usageError{fmt.Errorf("worker: --foundry-* settings: %w", err)}
		}
		return err
	}
	defer up.CloseIdleConnections()
	if *printConfig {
		if err := f.printConfig(stdout); err != nil {
			return err
		}
		return printTracing(stdout, os.Environ())
	}
	if *httpAddr != "" {
		if err := checkFree(*httpAddr, opsAddrSetting); err != nil {
			return err // before connecting: a port in use is one line
		}
	}
	nc, err := nf.connect("foundryq-worker", true)
	if err != nil {
		return err
	}
	defer nc.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Registerer = reg
	cfg.Secrets = resolver
	w, err := consumer.New(nc, up, cfg)
	if err != nil {
		return err
	}
	if *checkUpstream {
		checkWorkerUpstream(ctx, w, up.Check, log)
	}
	g, gctx := errgroup.WithContext(ctx)
	if *httpAddr != "" {
		addr, err := serveOps(gctx, g, *httpAddr, reg, nc, w.Ready, *profiles)
		if err != nil {
			return err
		}
		log.Info().Str("addr", addr).Msg("serving /metrics, /healthz and /readyz")
	}
	g.Go(func() error { return w.Run(gctx) })
	return g.Wait()
}

// addCheckUpstreamFlag is worker's and dev's --check-upstream.
func addCheckUpstreamFlag(f *flags) *bool {
	return f.Bool("check-upstream", "FOUNDRYQ_CHECK_UPSTREAM", true, "at start, make one authenticated request to --foundry-endpoint; until one passes, /readyz reports why (host not found, certificate, 401/403)")
}

// checkWorkerUpstream runs w's check of its Foundry endpoint
// (CheckUpstream) and logs how it went.
func checkWorkerUpstream(ctx context.Context, w *consumer.Worker, check func(context.Context) error, log zerolog.Logger) {
	if err := w.CheckUpstream(ctx, check); err != nil {
		log.Error().Err(err).Msg("Foundry endpoint check failed; /readyz reports it until a check passes (--check-upstream=false skips it)")
		return
	}
	log.Info().Msg("Foundry endpoint reachable; credentials accepted")
}

// serveOps serves Prometheus metrics, a liveness check (/healthz: the NATS
// connection is up) and a readiness check (/readyz: ready says so) on addr,
// in g, until ctx ends, and with withPprof Go's profiles at /debug/pprof/.
// Both checks answer 200 "ok", or 503 with a one-line reason. It returns
// the address it listens on.
func serveOps(ctx context.Context, g *errgroup.Group, addr string, reg *prometheus.Registry, nc *nats.Conn, ready func(context.Context) error, withPprof bool) (string, error) {
	mux := http.NewServeMux()
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !nc.IsConnected() {
			http.Error(w, "nats: "+nc.Status().String(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := ready(r.Context()); err != nil {
			http.Error(w, oneLine(err.Error()), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", listenError{addr: addr, setting: opsAddrSetting, err: err}
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	return ln.Addr().String(), nil
}

// oneLine joins the lines of s (errors.Join makes several).
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
