package consumer

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/secrets"
)

// Config configures a Worker. The zero value of every field means its
// documented default.
type Config struct {
	// Prefix is the subject prefix of the wire contract. Default "foundryq".
	Prefix string
	// WorkerID names this worker in run.started events, the state bucket and
	// logs. Default: "<hostname>-<pid>".
	WorkerID string
	// Concurrency is the most runs this worker owns at once; it never pulls a
	// job it cannot start. Default 64.
	Concurrency int
	// DefaultTimeout is the run deadline for requests without
	// timeout_seconds, counted from the run's first start. Default 1h;
	// negative means no deadline (a run then ends only on its own, on a
	// cancel, or when its upstream stalls).
	DefaultTimeout time.Duration
	// EventInterval is the least time between two text.delta events of a
	// run: text arriving sooner merges into the next event. Default 50ms,
	// which a reader does not notice but which cuts the events of a fast
	// stream (and the JetStream load) several times over; negative turns it
	// off (each delta goes out as soon as the previous event is stored).
	EventInterval time.Duration
	// CancelConfirmTimeout bounds how long the owner of a cancelled run
	// keeps calling Foundry's cancel (with backoff, reading the response
	// meanwhile) until Foundry confirms a final status, counted from when
	// the cancel was recorded. Past it the run ends run.cancelled with
	// upstream_status "unconfirmed" and the last upstream error. It is long
	// so that a cancel outlasts a service's bad minutes. Default 10m.
	CancelConfirmTimeout time.Duration
	// QueuedTimeout bounds how long a response may stay queued upstream
	// (Foundry has been seen to keep a background response queued for ten
	// minutes and more); past it the response is cancelled upstream and the
	// run ends run.failed upstream_queued. Default 10m.
	QueuedTimeout time.Duration
	// StoreFullTimeout is how long JetStream may refuse a run's events
	// because its store is full before the run's response is cancelled
	// upstream (nobody can receive its output); the run then ends run.failed
	// store_full as soon as anything can be written. Default 30s.
	StoreFullTimeout time.Duration
	// CancelAuditDelay is how long after a run ends as run.cancelled the
	// worker reads the response back once more: Foundry's cancel is
	// best-effort and a response has been seen to turn completed after it
	// reported cancelled. Such a run stays cancelled; the worker logs it,
	// counts it (completed_after_cancel_total) and records the upstream
	// status in the run's state. Default 30s; negative disables it.
	CancelAuditDelay time.Duration
	// ShutdownTimeout bounds the hand-off of in-flight runs when Run's
	// context ends. Default 15s.
	ShutdownTimeout time.Duration
	// ForegroundPollTimeout bounds how long a run polls a response Foundry
	// runs in the foreground (hosted agents ignore background) after its
	// stream broke: such a response cannot be re-attached to, and its GET
	// may say in_progress for ever. Then the run ends stream_lost.
	// Default 1m.
	ForegroundPollTimeout time.Duration
	// PollWait is how long one pull request waits for jobs. Default 1s.
	PollWait time.Duration
	// RetryDelay is the delay before a job whose upstream call failed with a
	// retryable error (429, 5xx, network) is delivered again. Default 2s.
	RetryDelay time.Duration
	// NewerFieldsGrace is how long after its submit a run request whose
	// only fault is fields this worker does not know (a newer version's:
	// events.NewerFields) is handed back, every NewerFieldsRetry, for a
	// newer worker to take during a rolling upgrade, before it fails
	// invalid_request and is dead-lettered like any invalid request.
	// Default 10m; negative: such a request fails at once.
	NewerFieldsGrace time.Duration
	// NewerFieldsRetry is the delay before such a request is delivered
	// again. Default 5s.
	NewerFieldsRetry time.Duration
	// ReadyCheckInterval is how long Ready reuses its check that the
	// streams, consumer and bucket exist, so that a probe hitting /readyz
	// often costs no JetStream API call. Default 5s.
	ReadyCheckInterval time.Duration
	// FIFO makes the worker take runs first in, first out from the runs
	// stream through the one shared consumer, as before lanes: no
	// priorities, no fair share between fairness keys. Every worker of a
	// fleet should agree (a FIFO worker takes requests before they reach
	// their lanes). Default false: lanes (docs/scheduling.md).
	FIFO bool
	// PriorityAge is the starvation bound of lanes: a waiting run's
	// priority rises one level (low to normal, normal to high) for every
	// PriorityAge it has waited since its submit, so that a low run does
	// not wait for ever behind a steady flow of normal ones. Default 5m;
	// negative: priorities never rise.
	PriorityAge time.Duration
	// Weights are the fairness keys' shares of the runs started among
	// waiting runs of one priority (a key not named has weight 1): with
	// weights 3 and 1, of four runs started while both keys have runs
	// waiting, three are of the first key.
	Weights map[string]int
	// LanePoll is how often an idle worker looks at the lanes for runs
	// queued by other workers (a run this worker moved to its lane is
	// seen at once). Default 100ms.
	LanePoll time.Duration
	// Provision configures the streams, consumer and bucket the worker
	// creates (idempotently) at start.
	Provision ProvisionConfig
	// PublishConn is the connection run events are published on, apart from
	// the one given to New (cancels, state, jobs), so that a steady stream of
	// event publishes never delays a cancel. Default: a second connection
	// the worker opens with the first one's options and closes when Run
	// returns.
	PublishConn *nats.Conn
	// Secrets resolves {"secret": NAME} references in MCP tools just before
	// a request goes to Foundry; the resolved values are never stored or
	// logged. Default nil: every reference is refused (the run fails
	// invalid_request). The worker gives it its logger: a refusal's
	// details (the secret's hosts, the directory, the variable) are
	// logged at debug level, never stored with the run.
	Secrets *secrets.Resolver
	// StuckAfter is how long a run this worker owns may store no event
	// before the runs_stuck gauge counts it. Default 5m.
	StuckAfter time.Duration
	// ToolTimeout bounds a call of a function tool served over NATS
	// (<prefix>.tools.<name>), counted from when the worker sends it: past
	// it the call is cancelled (<prefix>.tools.cancel.<run_id>) and the run
	// fails tool_timeout. Default 60s.
	ToolTimeout time.Duration
	// ToolTimeouts overrides ToolTimeout for the tools it names.
	ToolTimeouts map[string]time.Duration
	// IdempotentTools names the function tools that may run twice for one
	// call: a call whose service instance stopped answering (it sent
	// progress, then nothing for 3s) is sent again, to another instance,
	// at most 3 times in all. Any other tool's call fails the run
	// tool_failed then.
	IdempotentTools []string
	// ToolCancelGrace is how long a call that the worker cancelled (its
	// run was cancelled, or it timed out) may take to answer before the
	// worker goes on without it. Default 1s.
	ToolCancelGrace time.Duration
	// DisableServedTools makes the worker ask the run's caller for every
	// function call (input.required), as before tools could be served over
	// NATS. Default false: a call whose tool has a service goes to it.
	DisableServedTools bool
	// TracerProvider makes the worker's spans: "foundryq run" (continuing
	// the trace context in the run request's headers), "foundry <op>" for
	// each Foundry call, "foundryq cancel answer" and "foundryq run cancel".
	// Default: the global provider (otel.SetTracerProvider), a no-op one
	// unless the program set one up; trace context in the requests is
	// carried on to events and Foundry calls either way.
	TracerProvider trace.TracerProvider
	// Logger receives the worker's logs. Default: disabled.
	Logger *zerolog.Logger
	// Registerer receives the worker's Prometheus metrics. Default: none
	// (metrics are still counted, just not exported).
	Registerer prometheus.Registerer
	// MetricKeys bounds the label values of the per-key metrics: the
	// fairness keys Weights and Caps name, and the default key, have one
	// of their own, and so do the first MetricKeys other keys this worker
	// sees; every later key shares the value "_other". Default 100;
	// negative: none but the named keys.
	MetricKeys int

	// Fleet-wide limits (caps.go, budget.go), kept in the <prefix>-limits
	// bucket and shared by every worker of the prefix: they hold only if
	// every worker is given the same values. A run that must wait for one
	// stays queued (its record says why: queue_reason) and its job is
	// handed back with a delay.

	// CapPerKey is the most runs of one fairness key running at once
	// across the fleet. Default 0: no cap.
	CapPerKey int
	// Caps overrides CapPerKey for the fairness keys it names (each at
	// least 1).
	Caps map[string]int
	// SlotLease is how long the concurrency slot of a run stays held once
	// its worker stops renewing it (the worker was killed): the worker
	// renews its slots every third of it. Default 30s.
	SlotLease time.Duration
	// CapRetryDelay is the delay before a run whose key is at its cap is
	// delivered again (halved for priority high, doubled for low, plus a
	// jitter). Default 1s.
	CapRetryDelay time.Duration
	// TokensPerMinute is the budget of tokens per minute of each Foundry
	// deployment: its model deployment's name, or "agent:" and an agent's
	// name. Deployments it does not name have no budget.
	TokensPerMinute map[string]int
	// DefaultOutputTokens is the output a create is estimated at, for the
	// budget, when its request sets no max_output_tokens. Default 1000.
	DefaultOutputTokens int
	// BudgetWindow is the window the service counts tokens in and resets
	// at its end: a minute on Azure OpenAI. The budget of a window is
	// TokensPerMinute scaled to it. Default 1m; shorter ones are for tests
	// against an emulator whose quota window matches.
	BudgetWindow time.Duration

	// stopWatchHook, set by tests only (export_test.go), is called as a
	// run's stop watch starts, with the channel its reader's outcome
	// arrives on: it can hold the watch as a loaded machine may.
	stopWatchHook func(readerDone <-chan outcome)
}

// DefaultToolTimeout bounds a call of a function tool served over NATS
// unless Config.ToolTimeout or ToolTimeouts say otherwise.
const DefaultToolTimeout = time.Minute

// DefaultPriorityAge is the starvation bound of lanes unless
// Config.PriorityAge says otherwise.
const DefaultPriorityAge = 5 * time.Minute

// DefaultMetricKeys is how many fairness keys besides those the
// configuration names get a label value of their own in the per-key
// metrics, unless Config.MetricKeys says otherwise.
const DefaultMetricKeys = 100

// DefaultRunTimeout is the run deadline of requests without
// timeout_seconds unless Config.DefaultTimeout says otherwise.
const DefaultRunTimeout = time.Hour

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = events.DefaultPrefix
	}
	if c.WorkerID == "" {
		c.WorkerID = defaultWorkerID()
	}
	if c.Concurrency == 0 {
		c.Concurrency = 64
	}
	if c.DefaultTimeout == 0 {
		c.DefaultTimeout = DefaultRunTimeout
	}
	if c.CancelConfirmTimeout == 0 {
		c.CancelConfirmTimeout = 10 * time.Minute
	}
	if c.QueuedTimeout == 0 {
		c.QueuedTimeout = 10 * time.Minute
	}
	if c.StoreFullTimeout == 0 {
		c.StoreFullTimeout = 30 * time.Second
	}
	if c.EventInterval == 0 {
		c.EventInterval = 50 * time.Millisecond
	}
	if c.CancelAuditDelay == 0 {
		c.CancelAuditDelay = 30 * time.Second
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 15 * time.Second
	}
	if c.ForegroundPollTimeout == 0 {
		c.ForegroundPollTimeout = time.Minute
	}
	if c.PollWait == 0 {
		c.PollWait = time.Second
	}
	if c.PriorityAge == 0 {
		c.PriorityAge = DefaultPriorityAge
	}
	if c.LanePoll == 0 {
		c.LanePoll = 100 * time.Millisecond
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = 2 * time.Second
	}
	if c.ReadyCheckInterval == 0 {
		c.ReadyCheckInterval = 5 * time.Second
	}
	if c.NewerFieldsGrace == 0 {
		c.NewerFieldsGrace = 10 * time.Minute
	}
	if c.NewerFieldsRetry == 0 {
		c.NewerFieldsRetry = 5 * time.Second
	}
	if c.StuckAfter == 0 {
		c.StuckAfter = 5 * time.Minute
	}
	if c.MetricKeys == 0 {
		c.MetricKeys = DefaultMetricKeys
	}
	if c.ToolTimeout == 0 {
		c.ToolTimeout = DefaultToolTimeout
	}
	if c.ToolCancelGrace == 0 {
		c.ToolCancelGrace = time.Second
	}
	if c.SlotLease == 0 {
		c.SlotLease = DefaultSlotLease
	}
	if c.CapRetryDelay == 0 {
		c.CapRetryDelay = time.Second
	}
	if c.DefaultOutputTokens == 0 {
		c.DefaultOutputTokens = DefaultOutputTokens
	}
	if c.BudgetWindow == 0 {
		c.BudgetWindow = time.Minute
	}
	if c.Logger == nil {
		nop := zerolog.Nop()
		c.Logger = &nop
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("concurrency must be at least 1, got %d", c.Concurrency))
	}
	if c.EventInterval > 5*time.Second {
		errs = append(errs, fmt.Errorf("event interval must be at most 5s, got %s", c.EventInterval))
	}
	if c.CancelConfirmTimeout < 0 {
		errs = append(errs, fmt.Errorf("cancel confirm timeout must not be negative, got %s", c.CancelConfirmTimeout))
	}
	if c.QueuedTimeout < 0 {
		errs = append(errs, fmt.Errorf("queued timeout must not be negative, got %s", c.QueuedTimeout))
	}
	if c.StoreFullTimeout < 0 {
		errs = append(errs, fmt.Errorf("store full timeout must not be negative, got %s", c.StoreFullTimeout))
	}
	if c.ShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("shutdown timeout must not be negative, got %s", c.ShutdownTimeout))
	}
	if c.ForegroundPollTimeout < 0 {
		errs = append(errs, fmt.Errorf("foreground poll timeout must not be negative, got %s", c.ForegroundPollTimeout))
	}
	if c.PollWait < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("poll wait must be at least 100ms, got %s", c.PollWait))
	}
	if c.StuckAfter < time.Second {
		errs = append(errs, fmt.Errorf("stuck after must be at least 1s, got %s", c.StuckAfter))
	}
	if c.RetryDelay < 0 {
		errs = append(errs, fmt.Errorf("retry delay must not be negative, got %s", c.RetryDelay))
	}
	if c.NewerFieldsRetry < 0 {
		errs = append(errs, fmt.Errorf("newer fields retry must not be negative, got %s", c.NewerFieldsRetry))
	}
	if c.ReadyCheckInterval < 0 {
		errs = append(errs, fmt.Errorf("ready check interval must not be negative, got %s", c.ReadyCheckInterval))
	}
	if c.LanePoll < 10*time.Millisecond || c.LanePoll > 5*time.Second {
		errs = append(errs, fmt.Errorf("lane poll must be between 10ms and 5s, got %s", c.LanePoll))
	}
	if c.PriorityAge > 0 && c.PriorityAge < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("priority age must be at least 100ms (or negative: never), got %s", c.PriorityAge))
	}
	for key, wt := range c.Weights {
		if !events.ValidFairnessKey(key) {
			errs = append(errs, fmt.Errorf("weights: fairness key %q must match [A-Za-z0-9_-]{1,64}", key))
		}
		if wt < 1 || wt > 1000 {
			errs = append(errs, fmt.Errorf("weights: %s must be between 1 and 1000, got %d", key, wt))
		}
	}
	errs = append(errs, c.validateTools()...)
	errs = append(errs, c.validateLimits()...)
	if !events.ValidRunID(c.WorkerID) {
		errs = append(errs, fmt.Errorf("worker id %q must match [A-Za-z0-9_-]{1,64}", c.WorkerID))
	}
	if err := c.Provision.WithDefaults().Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// validateTools checks the settings of tools served over NATS.
func (c Config) validateTools() []error {
	var errs []error
	if c.ToolTimeout < 0 {
		errs = append(errs, fmt.Errorf("tool timeout must be positive, got %s", c.ToolTimeout))
	}
	if c.ToolCancelGrace < 0 {
		errs = append(errs, fmt.Errorf("tool cancel grace must not be negative, got %s", c.ToolCancelGrace))
	}
	for name, d := range c.ToolTimeouts {
		if !events.ValidToolName(name) {
			errs = append(errs, fmt.Errorf("tool timeouts: tool name %q must match [A-Za-z0-9_-]{1,64}", name))
		}
		if d <= 0 {
			errs = append(errs, fmt.Errorf("tool timeouts: %s must be positive, got %s", name, d))
		}
	}
	for _, name := range c.IdempotentTools {
		if !events.ValidToolName(name) {
			errs = append(errs, fmt.Errorf("idempotent tools: tool name %q must match [A-Za-z0-9_-]{1,64}", name))
		}
	}
	return errs
}

// toolTimeout is the timeout of a call of tool name.
func (c Config) toolTimeout(name string) time.Duration {
	if d, ok := c.ToolTimeouts[name]; ok {
		return d
	}
	return c.ToolTimeout
}

// idempotent reports whether tool name may be called again.
func (c Config) idempotent(name string) bool { return slices.Contains(c.IdempotentTools, name) }

// Validate checks cfg as New does, after applying the defaults: every
// value that is out of range is named in the error, with what is accepted.
func (c Config) Validate() error { return c.withDefaults().validate() }

// defaultWorkerID is "<hostname>-<pid>", with the characters a run id may
// not hold replaced by '-'.
func defaultWorkerID() string {
	host, _ := os.Hostname()
	b := []byte(host)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '-'
		}
	}
	if len(b) > 40 {
		b = b[:40]
	}
	if len(b) == 0 {
		b = []byte("worker")
	}
	return string(b) + "-" + strconv.Itoa(os.Getpid())
}

// validateLimits checks the fleet-wide limits.
func (c Config) validateLimits() []error {
	var errs []error
	if c.CapPerKey < 0 {
		errs = append(errs, fmt.Errorf("cap per key must not be negative, got %d", c.CapPerKey))
	}
	for key, n := range c.Caps {
		if !events.ValidFairnessKey(key) {
			errs = append(errs, fmt.Errorf("caps: fairness key %q must match [A-Za-z0-9_-]{1,64}", key))
		}
		if n < 1 {
			errs = append(errs, fmt.Errorf("caps: %s must be at least 1, got %d", key, n))
		}
	}
	if c.SlotLease < time.Second {
		errs = append(errs, fmt.Errorf("slot lease must be at least 1s, got %s", c.SlotLease))
	}
	if c.CapRetryDelay < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("cap retry delay must be at least 10ms, got %s", c.CapRetryDelay))
	}
	for dep, n := range c.TokensPerMinute {
		if dep == "" || strings.TrimPrefix(dep, "agent:") == "" {
			errs = append(errs, fmt.Errorf("tokens per minute: empty deployment name"))
		}
		if n < 1 {
			errs = append(errs, fmt.Errorf("tokens per minute: %s must be at least 1, got %d", dep, n))
		}
	}
	if c.DefaultOutputTokens < 1 {
		errs = append(errs, fmt.Errorf("default output tokens must be at least 1, got %d", c.DefaultOutputTokens))
	}
	if c.BudgetWindow < time.Second || c.BudgetWindow > time.Minute {
		errs = append(errs, fmt.Errorf("budget window must be between 1s and 1m, got %s", c.BudgetWindow))
	}
	return errs
}
