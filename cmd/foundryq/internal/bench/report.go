package bench

// Targets of the benchmark (docs/benchmarks.md).
const (
	// TargetRelayRatio: worker CPU per token at most this many times the
	// bare reader's.
	TargetRelayRatio = 1.2
	// TargetRawRatio: foundryq's events/s at least this fraction of raw
	// JetStream publishing.
	TargetRawRatio = 0.5
	// TargetMemoryPerRun: worker memory per concurrent streaming run, KiB,
	// at the largest load.
	TargetMemoryPerRun = 64.0
	// TargetCancelP99: cancel p99 (request to reply and to run.cancelled
	// stored), ms, at half the maximum load (TargetCancelP99At has every
	// load's).
	TargetCancelP99 = 50.0
	// TargetAblationRatio: NATS CPU per event stored the way foundryq
	// stores events at most this many times a raw publish's.
	TargetAblationRatio = 1.5
	// TargetToolCancelP99: from a cancel request to the handler's ctx of
	// the run's call to a served function tool ending, p99, ms.
	TargetToolCancelP99 = 100.0
	// TargetWaitingPerRun: worker RSS and heap in use after a GC, KiB, per
	// run waiting for its caller's answers: 5,000 waiting runs add at most
	// 5 MiB (5 MiB / 5,000 = 1.024 KiB).
	TargetWaitingPerRun = 5 * 1024.0 / 5000
)

// Report is what a benchmark measured. Its JSON form is what
// `foundryq bench --json` writes.
type Report struct {
	Relay      RelayReport      `json:"relay"`
	RawPublish RawReport        `json:"raw_publish"`
	Latency    LatencyReport    `json:"latency"`
	Memory     MemoryReport     `json:"memory"`
	Cancel     CancelReport     `json:"cancel"`
	ToolCancel ToolCancelReport `json:"tool_cancel"`
	Waste      WasteReport      `json:"waste"`
	Waiting    WaitingReport    `json:"waiting"`
	Ablation   AblationReport   `json:"ablation"`
	// Scale is there only when the scale phase ran (it runs when asked).
	Scale *ScaleReport `json:"scale,omitempty"`
}

// AblationReport: NATS CPU per stored event, the events stored the way
// foundryq stores them and with one feature switched off at a time.
type AblationReport struct {
	Runs         int           `json:"runs"`
	EventsPerRun int           `json:"events_per_run"`
	MessageBytes int           `json:"message_bytes"`
	Rows         []AblationRow `json:"rows"`
	// FoundryqRatio is the foundryq row's CPU per event over the raw row's
	// (both as fast as NATS takes them); PacedRatio the foundryq_paced
	// row's over the raw_paced row's (both at the relay phase's pace).
	FoundryqRatio float64 `json:"foundryq_ratio_to_raw"`
	PacedRatio    float64 `json:"paced_ratio_to_raw"`
	Target        float64 `json:"target_max_ratio"`
	// WorkerCPURatio is the relay phase's worker CPU per token over the
	// bare reader's (0 when the relay phase did not run), held to
	// TargetRelayRatio among Targets.
	WorkerCPURatio float64  `json:"worker_cpu_ratio_to_reader"`
	Targets        []Target `json:"targets"`
	// Met: every target met.
	Met bool `json:"met"`
}

// AblationRow is one variant.
type AblationRow struct {
	Variant string `json:"variant"`
	// Off says what differs from the way foundryq stores events.
	Off          string `json:"off"`
	Runs         int    `json:"runs"`
	EventsPerRun int    `json:"events_per_run"`
	// PaceMS: an event of each run every PaceMS (0: as fast as NATS
	// takes them); paced rows are compared with raw_paced.
	PaceMS          float64 `json:"pace_ms"`
	Events          uint64  `json:"events"`
	EventsPerSec    float64 `json:"events_per_s"`
	NATSCPUPerEvent float64 `json:"nats_cpu_us_per_event"`
	RatioToRaw      float64 `json:"ratio_to_raw"`
}

// RelayReport: what relaying a token costs the worker, against the bare
// reader of the same streams, and what storing an event costs NATS.
type RelayReport struct {
	Runs            int     `json:"runs"`
	Tokens          int     `json:"tokens_per_run"`
	TokenDelayMS    float64 `json:"token_delay_ms"`
	EventIntervalMS float64 `json:"event_interval_ms"`
	TokensRelayed   int     `json:"tokens_relayed"`
	EventsStored    uint64  `json:"events_stored"`
	// WorkerCPUPerToken: worker CPU µs per relayed token.
	WorkerCPUPerToken float64 `json:"worker_cpu_us_per_token"`
	// ReaderCPUPerToken: the bare reader's CPU µs per token read.
	ReaderCPUPerToken float64 `json:"reader_cpu_us_per_token"`
	// Ratio is WorkerCPUPerToken / ReaderCPUPerToken.
	Ratio float64 `json:"ratio"`
	// NATSCPUPerEvent: the NATS process's CPU µs per stored event.
	NATSCPUPerEvent float64 `json:"nats_cpu_us_per_event"`
	// NATSIdleCores: the NATS process's CPU use with the worker idle, taken
	// out of NATSCPUPerRun and NATSCPUPerFurtherEvent (not out of
	// NATSCPUPerEvent).
	NATSIdleCores float64 `json:"nats_idle_cores"`
	// NATSCPUPerRun: NATS CPU µs per run of one token (its job, state
	// records, acks and EventsPerShortRun events), measured on as many runs
	// alone; NATSCPUPerFurtherEvent: the rest of NATSCPUPerEvent's CPU
	// over the events beyond those.
	NATSCPUPerRun          float64 `json:"nats_cpu_us_per_run"`
	EventsPerShortRun      float64 `json:"events_per_one_token_run"`
	NATSCPUPerFurtherEvent float64 `json:"nats_cpu_us_per_further_event"`
	// EmulatorCPUPerToken: the emulator's CPU µs per generated token, for
	// scale.
	EmulatorCPUPerToken float64 `json:"emulator_cpu_us_per_token"`
	// Loads: the worker's CPU per token against the bare reader's at
	// Config.RelayLoads, each held to the target too.
	Loads   []RelayLoadPoint `json:"loads"`
	Target  float64          `json:"target_max_ratio"`
	Targets []Target         `json:"targets"`
	Met     bool             `json:"met"`
}

// RelayLoadPoint is the worker's CPU per token and the bare reader's at
// one of Config.RelayLoads.
type RelayLoadPoint struct {
	Runs              int     `json:"runs"`
	Tokens            int     `json:"tokens_per_run"`
	TokenDelayMS      float64 `json:"token_delay_ms"`
	WorkerCPUPerToken float64 `json:"worker_cpu_us_per_token"`
	ReaderCPUPerToken float64 `json:"reader_cpu_us_per_token"`
	Ratio             float64 `json:"ratio"`
}

// RawReport: raw JetStream async publishing against foundryq's event rate
// with the event interval off.
type RawReport struct {
	Messages     int     `json:"messages"`
	MessageBytes int     `json:"message_bytes"`
	RawPerSec    float64 `json:"raw_msgs_per_s"`
	// FoundryqPerSec: text.delta events stored per second by foundryq at
	// its maximum, the event interval off (a run's tokens merge into one
	// event only while its previous event awaits its ack).
	FoundryqPerSec float64 `json:"foundryq_events_per_s"`
	// Ratio is FoundryqPerSec / RawPerSec.
	Ratio  float64 `json:"ratio"`
	Target float64 `json:"target_min_ratio"`
	Met    bool    `json:"met"`
	// FoundryqCores and RawCores: CPU cores each process used on average
	// during foundryq's throughput phase and during the raw publishing
	// (keys worker, nats, emulator, bench).
	FoundryqCores map[string]float64 `json:"foundryq_cpu_cores"`
	RawCores      map[string]float64 `json:"raw_cpu_cores"`
}

// LatencyReport: emulator emit to watcher receive, per token, at fractions
// of the maximum load, against the bare reader's emit to receive.
type LatencyReport struct {
	// MaxTokensPerSec is the measured maximum streaming load: tokens
	// relayed per second with the event interval off, more offered than
	// served (merged into MaxEventsPerSec events per second).
	MaxTokensPerSec float64        `json:"max_tokens_per_s"`
	MaxEventsPerSec float64        `json:"max_events_per_s"`
	TokensPerRunSec int            `json:"tokens_per_s_per_run"`
	Points          []LatencyPoint `json:"points"`
	// Targets hold AddedP99 at each load TargetLatencyAddedP99 lists.
	Targets []Target `json:"targets"`
	Met     bool     `json:"met"`
}

// LatencyPoint is one load of the latency phase.
type LatencyPoint struct {
	Fraction       float64     `json:"fraction"`
	Runs           int         `json:"runs"`
	OfferedPerSec  float64     `json:"offered_tokens_per_s"`
	Foundryq       Percentiles `json:"foundryq"`
	Reader         Percentiles `json:"reader"`
	AddedP50       float64     `json:"added_p50_ms"`
	AddedP99       float64     `json:"added_p99_ms"`
	EventsPerToken float64     `json:"events_per_token"`
}

// MemoryReport: the worker's memory per concurrent streaming run.
type MemoryReport struct {
	// Points are the loads over the bench's transport (HTTPS with HTTP/2
	// by default), then the largest load again over plain HTTP/1.1 (unless
	// that is the bench's transport).
	Points []MemoryPoint `json:"points"`
	// Target applies to the RSSPerRun of the largest load over the bench's
	// transport (the one entry of Targets).
	Target  float64  `json:"target_max_kib_per_run"`
	Targets []Target `json:"targets"`
	Met     bool     `json:"met"`
}

// MemoryPoint is one load of the memory phase. Per-run figures are the
// growth over the idle worker divided by Runs.
type MemoryPoint struct {
	Runs int `json:"runs"`
	// Transport is how the worker reached the emulator: "https-h2" (HTTPS,
	// HTTP/2 negotiated: the default), "h2c" (plain HTTP, HTTP/2 without
	// TLS) or "http1" (plain HTTP/1.1).
	Transport string `json:"transport"`
	// UpstreamProto is the protocol of the runs' create requests as the
	// emulator recorded them ("HTTP/2.0", "HTTP/1.1").
	UpstreamProto    string  `json:"upstream_proto"`
	RSSBytes         int64   `json:"rss_bytes"`
	IdleRSSBytes     int64   `json:"idle_rss_bytes"`
	RSSPerRun        float64 `json:"rss_kib_per_run"`
	HeapPerRun       float64 `json:"heap_kib_per_run"`
	StackPerRun      float64 `json:"stack_kib_per_run"`
	GoroutinesPerRun float64 `json:"goroutines_per_run"`
	// SettledRSSPerRun and SettledHeapPerRun are the same growth once two
	// forced GCs have freed the garbage and RSS has settled (settledUsage),
	// against the idle worker's settled figures: what the runs hold, without
	// the heap the collector lets grow between collections, which the
	// single reading above includes and which moves by ±20 KiB per run
	// from one run of the phase to the next. The target is on RSSPerRun.
	SettledRSSPerRun  float64 `json:"rss_kib_per_run_settled"`
	SettledHeapPerRun float64 `json:"heap_kib_per_run_settled"`
}

// CancelReport: cancel latency under streaming load.
type CancelReport struct {
	Points []CancelPoint `json:"points"`
	// EventIntervalMS is the event interval of the worker the phase ran on
	// (Config.EventInterval; 0: off).
	EventIntervalMS float64 `json:"event_interval_ms"`
	// Target applies at fraction 0.5, to both p99s; Targets hold both
	// p99s, and the runs not cancelled, at every load TargetCancelP99At
	// lists.
	Target  float64  `json:"target_max_p99_ms"`
	Targets []Target `json:"targets"`
	Met     bool     `json:"met"`
}

// CancelPoint is one load of the cancel phase.
type CancelPoint struct {
	Fraction  float64     `json:"fraction"`
	Runs      int         `json:"runs"`
	Cancelled int         `json:"cancels_measured"`
	Reply     Percentiles `json:"reply"`
	Stored    Percentiles `json:"cancelled_stored"`
	// NotCancelled counts replies other than "cancelling" and runs with no
	// run.cancelled.
	NotCancelled int `json:"not_cancelled"`
}

// ToolCancelReport: how soon a cancel reaches the function tools a run is
// calling, each run in a call to a tool served over NATS that holds until
// its ctx ends. The tool is served by the bench's own process, so that
// both ends are read on one clock.
type ToolCancelReport struct {
	Runs int `json:"runs"`
	// CtxCancelled: from the cancel request (events.Client.Cancel called)
	// to the service's handler seeing its ctx end (the worker's cancel
	// message).
	CtxCancelled Percentiles `json:"ctx_cancelled"`
	// Stored: from the cancel request to the run's run.cancelled received.
	Stored Percentiles `json:"cancelled_stored"`
	// NotReached counts calls whose ctx did not end at the worker's cancel
	// message and runs that did not end run.cancelled.
	NotReached int     `json:"not_reached"`
	Target     float64 `json:"target_max_p99_ms"`
	Met        bool    `json:"met"`
}

// WasteReport: work done upstream after the user asked to cancel, a run
// cancelled mid-tool-call: an MCP tool call run by Foundry, and a function
// tool served over NATS (FunctionTools).
type WasteReport struct {
	Runs          int                `json:"runs"`
	ToolDelayMS   float64            `json:"tool_delay_ms"`
	Naive         WasteFigures       `json:"naive_disconnect"`
	Foundryq      WasteFigures       `json:"foundryq"`
	Met           bool               `json:"met"`
	FunctionTools FunctionToolsWaste `json:"function_tools"`
}

// FunctionToolsWaste: the work a function tool's service does after the
// user asked to stop, Runs calls each way: foundryq's cancel reaches the
// service; a naive client that runs the tool itself over NATS can only
// close its connection, which the service does not hear.
type FunctionToolsWaste struct {
	Runs        int      `json:"runs"`
	ToolDelayMS float64  `json:"tool_delay_ms"`
	Naive       ToolWork `json:"naive_disconnect"`
	Foundryq    ToolWork `json:"foundryq"`
	Met         bool     `json:"met"`
}

// ToolWork is what the calls of a tool's service did after the ask.
type ToolWork struct {
	// ToolSeconds: the handlers' running time after the ask, summed over
	// the calls.
	ToolSeconds float64 `json:"tool_seconds"`
	// CallsToEnd: calls that ran their whole time, their ctx never ended.
	CallsToEnd int `json:"calls_run_to_end"`
}

// WasteFigures are tokens generated and tool calls completed upstream after
// the moment the user asked to cancel.
type WasteFigures struct {
	Tokens    int `json:"tokens"`
	ToolCalls int `json:"tool_calls"`
}

// WaitingReport: what runs that ask cost the worker while they wait for
// their caller's answers (a waiting run should hold no goroutine,
// connection or timer). Growth is Waiting - Before, each measured after a
// forced GC; AfterCancel is measured once the runs are cancelled.
type WaitingReport struct {
	Runs             int         `json:"runs"`
	Before           WorkerUsage `json:"before"`
	Waiting          WorkerUsage `json:"waiting"`
	AfterCancel      WorkerUsage `json:"after_cancel"`
	RSSGrowthBytes   int64       `json:"rss_growth_bytes"`
	HeapGrowthBytes  int64       `json:"heap_growth_bytes"`
	GoroutineGrowth  int64       `json:"goroutine_growth"`
	RSSPerRun        float64     `json:"rss_kib_per_run"`
	HeapPerRun       float64     `json:"heap_kib_per_run"`
	GoroutinesPerRun float64     `json:"goroutines_per_run"`
	// Target applies to RSSPerRun and HeapPerRun.
	Target float64 `json:"target_max_kib_per_run"`
	Met    bool    `json:"met"`
}

// WorkerUsage is the worker's memory and goroutines after a forced GC.
type WorkerUsage struct {
	RSSBytes        int64 `json:"rss_bytes"`
	HeapInuseBytes  int64 `json:"heap_inuse_bytes"`
	StackInuseBytes int64 `json:"stack_inuse_bytes"`
	Goroutines      int64 `json:"goroutines"`
}
