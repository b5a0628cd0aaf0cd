// Package bench is what `foundryq bench` runs: it starts the system under
// test as separate processes (NATS with file storage, the Foundry emulator
// and a worker, each from the foundryq binary), loads it, reads each
// process's CPU time and memory from the OS, and compares foundryq with
// floors measured in the same run: a bare SSE reader of the same emulator
// streams, and raw JetStream publishing to a stream configured as the
// events stream.
package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// Config sets what a benchmark does. Zero fields take the defaults of the
// full run, or of the quick run with Quick.
type Config struct {
	// Binary is the foundryq binary whose subcommands are the processes
	// (emulator, dev, worker, bench-reader). Default: os.Executable().
	Binary string
	// Env is the environment of the processes. Default: os.Environ().
	Env []string
	// Quick uses counts that finish in under a minute.
	Quick bool
	// Progress receives one line per step. Default: io.Discard.
	Progress io.Writer
	// ProfileDir, when set, receives CPU profiles of the worker (during the
	// relay phase and at each scale load) and a heap profile (at the largest
	// memory load).
	ProfileDir string

	// HTTP1 runs the emulator over plain HTTP, and the worker, the bare
	// reader and the bench's own clients speak HTTP/1.1 to it. Default
	// false: the emulator serves HTTPS with a certificate for 127.0.0.1
	// from a CA made for the run (the processes trust it through
	// SSL_CERT_FILE), and every client negotiates HTTP/2, as with an Azure
	// endpoint; the memory phase adds a row over plain HTTP/1.1.
	HTTP1 bool
	// H2C runs the emulator over plain HTTP, and the worker
	// (--foundry-h2c) and the bare reader speak HTTP/2 without TLS to it.
	// Default false. Not with HTTP1.
	H2C bool
	// EventInterval is the worker's --event-interval in the relay, cancel,
	// tool_cancel, waste and memory phases. Default 50ms, the worker's
	// default. The throughput and latency phases run with the interval off.
	EventInterval time.Duration
	// TokenRate is the tokens per second each streaming run generates in
	// the latency and cancel phases (a fast model). Default 50.
	TokenRate int

	// ThroughputRuns and ThroughputTokens: the runs of the throughput phase
	// (100 tokens/s each, more than the system serves; event interval off).
	// Default 1,000 runs of 500 tokens (quick: 400 of 300).
	ThroughputRuns, ThroughputTokens int
	// RawMessages is how many events the raw JetStream baseline publishes.
	// Default 100,000 (quick: 20,000).
	RawMessages int
	// LatencyFractions are the loads of the latency phase, as fractions of
	// the measured maximum (tokens/s relayed). Default 0.1, 0.5, 0.9.
	LatencyFractions []float64
	// LatencyDuration is how long each latency measurement streams.
	// Default 4s (quick: 1.5s).
	LatencyDuration time.Duration
	// RelayRuns and RelayTokens: the runs of the relay cost phase, at
	// RelayTokenDelay between tokens. Default 200 runs of 200 tokens (quick:
	// 40 of 60), 20ms.
	RelayRuns, RelayTokens int
	RelayTokenDelay        time.Duration
	// RelayLoads are further loads of the relay phase, at which only the
	// worker's CPU per token and the bare reader's are measured. Default
	// 1,000 runs x 250 tokens at 20ms and 5,000 x 60 at 100ms (quick: 100
	// x 60 at 20ms and 300 x 20 at 100ms).
	RelayLoads []RelayLoad
	// CancelFractions are the loads of the cancel phase. Default 0.5, 1.
	CancelFractions []float64
	// CancelSpread is the time over which the measured cancels are sent.
	// Default 3s (quick: 1s).
	CancelSpread time.Duration
	// WasteRuns runs with a ToolDelay MCP tool call are cancelled mid-tool,
	// each way, and as many calls to a ToolDelay served function tool.
	// Default 50 (quick: 10) and 3s (quick: 1.5s).
	WasteRuns int
	ToolDelay time.Duration
	// ToolCancelRuns runs, each in a call to a served function tool, are
	// cancelled over CancelSpread in the tool_cancel phase. Default 100
	// (quick: 20).
	ToolCancelRuns int
	// MemoryRuns are the concurrent streaming runs at which memory is
	// measured, each streaming a token every MemoryTokenDelay. Default
	// 1,000 and 5,000 (quick: 200 and 500), 2s.
	MemoryRuns       []int
	MemoryTokenDelay time.Duration
	// WaitingRuns is how many runs that ask wait for their answers at once
	// in the waiting phase. Default 5,000 (quick: 300).
	WaitingRuns int
	// ScaleRuns are the concurrent streaming runs of the scale phase, each
	// streaming a token every ScaleTokenDelay, spread over ScaleWorkers
	// workers and a three-node NATS cluster with stream replicas 3.
	// Default 5,000 and 20,000 (quick: 200 and 500), 5s, 3 workers. The
	// worker CPU is measured over ScaleWindow once every run streams.
	// Default 4 token delays.
	ScaleRuns       []int
	ScaleTokenDelay time.Duration
	ScaleWorkers    int
	ScaleWindow     time.Duration
	// Phases, when set, runs only these phases, in their usual order (see
	// Phases). Default: all but scale (OptInPhases). raw_publish, latency
	// and cancel need throughput (the maximum they are measured against).
	Phases []string
	// MaxRuns caps the runs of a latency or cancel load. Default 3,000.
	MaxRuns int
}

// RelayLoad is a load of the relay phase: Runs runs of Tokens tokens, a
// token every TokenDelay.
type RelayLoad struct {
	Runs, Tokens int
	TokenDelay   time.Duration
}

// withDefaults fills in every zero field.
func (c Config) withDefaults() Config {
	pick := func(dst *int, full, quick int) {
		if *dst == 0 {
			*dst = full
			if c.Quick {
				*dst = quick
			}
		}
	}
	pickD := func(dst *time.Duration, full, quick time.Duration) {
		if *dst == 0 {
			*dst = full
			if c.Quick {
				*dst = quick
			}
		}
	}
	if c.Binary == "" {
		c.Binary, _ = os.Executable()
	}
	if c.Env == nil {
		c.Env = os.Environ()
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	pickD(&c.EventInterval, 50*time.Millisecond, 50*time.Millisecond)
	pick(&c.TokenRate, 50, 50)
	pick(&c.ThroughputRuns, 1000, 400)
	pick(&c.ThroughputTokens, 500, 300)
	pick(&c.RawMessages, 100_000, 20_000)
	if c.LatencyFractions == nil {
		c.LatencyFractions = []float64{0.1, 0.5, 0.9}
	}
	pickD(&c.LatencyDuration, 4*time.Second, 1500*time.Millisecond)
	pick(&c.RelayRuns, 200, 40)
	pick(&c.RelayTokens, 200, 60)
	pickD(&c.RelayTokenDelay, 20*time.Millisecond, 20*time.Millisecond)
	if c.RelayLoads == nil {
		c.RelayLoads = []RelayLoad{{1000, 250, 20 * time.Millisecond}, {5000, 60, 100 * time.Millisecond}}
		if c.Quick {
			c.RelayLoads = []RelayLoad{{100, 60, 20 * time.Millisecond}, {300, 20, 100 * time.Millisecond}}
		}
	}
	if c.CancelFractions == nil {
		c.CancelFractions = []float64{0.5, 1}
	}
	pickD(&c.CancelSpread, 3*time.Second, time.Second)
	pick(&c.WasteRuns, 50, 10)
	pick(&c.ToolCancelRuns, 100, 20)
	pickD(&c.ToolDelay, 3*time.Second, 1500*time.Millisecond)
	if c.MemoryRuns == nil {
		c.MemoryRuns = []int{1000, 5000}
		if c.Quick {
			c.MemoryRuns = []int{200, 500}
		}
	}
	pickD(&c.MemoryTokenDelay, 2*time.Second, 2*time.Second)
	pick(&c.WaitingRuns, 5000, 300)
	pick(&c.MaxRuns, 3000, 600)
	if c.ScaleRuns == nil {
		c.ScaleRuns = []int{5000, 20000}
		if c.Quick {
			c.ScaleRuns = []int{200, 500}
		}
	}
	pickD(&c.ScaleTokenDelay, 5*time.Second, 5*time.Second)
	pick(&c.ScaleWorkers, 3, 3)
	pickD(&c.ScaleWindow, 4*c.ScaleTokenDelay, 4*c.ScaleTokenDelay)
	return c
}

// validate checks the settings after defaults.
func (c Config) validate() error {
	if c.Binary == "" {
		return errors.New("loadtest: no foundryq binary (Config.Binary)")
	}
	for _, n := range []int{c.TokenRate, c.ThroughputRuns, c.ThroughputTokens, c.RawMessages, c.RelayRuns, c.RelayTokens, c.WasteRuns, c.ToolCancelRuns, c.WaitingRuns, c.MaxRuns} {
		if n < 1 {
			return fmt.Errorf("loadtest: counts must be at least 1, got %d", n)
		}
	}
	if c.HTTP1 && c.H2C {
		return errors.New("loadtest: HTTP1 and H2C exclude each other (the default is HTTPS with HTTP/2)")
	}
	for _, n := range c.MemoryRuns {
		if n < 1 {
			return fmt.Errorf("loadtest: MemoryRuns must be at least 1, got %d", n)
		}
	}
	for _, l := range c.RelayLoads {
		if l.Runs < 1 || l.Tokens < 1 || l.TokenDelay < time.Millisecond {
			return fmt.Errorf("loadtest: RelayLoads %+v: runs and tokens at least 1, token delay at least 1ms", l)
		}
	}
	for _, n := range c.ScaleRuns {
		if n < c.ScaleWorkers {
			return fmt.Errorf("loadtest: ScaleRuns must be at least ScaleWorkers (%d), got %d", c.ScaleWorkers, n)
		}
	}
	if c.ScaleWorkers < 1 || c.ScaleTokenDelay < 10*time.Millisecond || c.ScaleWindow < c.ScaleTokenDelay {
		return fmt.Errorf("loadtest: ScaleWorkers must be at least 1 (got %d), ScaleTokenDelay at least 10ms (got %s), ScaleWindow at least ScaleTokenDelay (got %s)", c.ScaleWorkers, c.ScaleTokenDelay, c.ScaleWindow)
	}
	for _, f := range append(append([]float64(nil), c.LatencyFractions...), c.CancelFractions...) {
		if f <= 0 || f > 2 {
			return fmt.Errorf("loadtest: load fractions must be in (0, 2], got %g", f)
		}
	}
	for _, p := range c.Phases {
		if !slices.Contains(Phases, p) {
			return fmt.Errorf("loadtest: unknown phase %q (phases: %s)", p, strings.Join(Phases, ", "))
		}
	}
	if len(c.Phases) > 0 && !c.runs("throughput") {
		for _, p := range []string{"raw_publish", "latency", "cancel"} {
			if c.runs(p) {
				return fmt.Errorf("loadtest: phase %s needs phase throughput (the maximum it is measured against)", p)
			}
		}
	}
	if c.RelayTokenDelay < time.Millisecond || c.MemoryTokenDelay < time.Millisecond || c.ToolDelay < 100*time.Millisecond {
		return errors.New("loadtest: RelayTokenDelay and MemoryTokenDelay must be at least 1ms, ToolDelay at least 100ms")
	}
	return nil
}

// Phases are the phases of a benchmark, in the order they run, named as
// the keys of the report's JSON (throughput's figures are in raw_publish
// and latency).
var Phases = []string{"throughput", "raw_publish", "latency", "relay", "cancel", "tool_cancel", "waste", "memory", "waiting", "ablation", "scale"}

// OptInPhases run only when Config.Phases names them: scale starts a
// cluster and three workers, and at its default loads takes minutes and
// most of a machine's memory.
var OptInPhases = []string{"scale"}

// The transports between the worker and the emulator, as
// MemoryPoint.Transport names them.
const (
	transportHTTPS = "https-h2" // HTTPS, HTTP/2 negotiated by ALPN: the default
	transportH2C   = "h2c"      // plain HTTP, HTTP/2 with prior knowledge (H2C)
	transportHTTP1 = "http1"    // plain HTTP/1.1 (HTTP1)
)

// transportNames say each transport in words.
var transportNames = map[string]string{
	transportHTTPS: "HTTPS, HTTP/2 negotiated",
	transportH2C:   "plain HTTP, HTTP/2 without TLS",
	transportHTTP1: "plain HTTP/1.1",
}

// transport is how the worker and the bare reader reach the emulator.
func (c Config) transport() string {
	switch {
	case c.HTTP1:
		return transportHTTP1
	case c.H2C:
		return transportH2C
	}
	return transportHTTPS
}

// runs reports whether phase p runs.
func (c Config) runs(p string) bool {
	if len(c.Phases) == 0 {
		return !slices.Contains(OptInPhases, p)
	}
	return slices.Contains(c.Phases, p)
}

// workerConcurrency is the worker's --concurrency: room for the largest load.
func (c Config) workerConcurrency() int {
	n := max(c.ThroughputRuns, c.RelayRuns, c.MaxRuns, 2*c.WasteRuns, c.ToolCancelRuns, c.WaitingRuns)
	for _, m := range c.MemoryRuns {
		n = max(n, m)
	}
	for _, l := range c.RelayLoads {
		n = max(n, l.Runs)
	}
	return n + 64
}

// tokenDelay is the pause between tokens at TokenRate.
func (c Config) tokenDelay() time.Duration { return time.Second / time.Duration(c.TokenRate) }
