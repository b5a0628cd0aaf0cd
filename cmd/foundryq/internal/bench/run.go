package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
)

// Run starts the system, runs every phase and stops the system. A phase
// that fails ends the run with what was measured so far.
func Run(ctx context.Context, cfg Config) (rep Report, err error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return rep, err
	}
	b := &bench{cfg: cfg, rep: &rep}
	b.progress("starting NATS (file storage) and the emulator (%s), each a process of its own (each phase starts the workers it needs)", transportNames[cfg.transport()])
	if b.sys, err = startSystem(ctx, cfg); err != nil {
		return rep, err
	}
	defer func() {
		if cerr := b.sys.close(); err == nil && cerr != nil {
			err = fmt.Errorf("bench: stop: %w", cerr)
		}
	}()
	// Each phase that needs a fresh worker starts one (throughput, relay,
	// memory, waiting); waiting comes last, on a worker of its own, so
	// that the runs it leaves waiting (until it cancels them) disturb no
	// other figure.
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"throughput", b.throughput},
		{"raw_publish", b.rawPublish},
		{"latency", b.latency},
		{"relay", b.relay},
		{"cancel", b.cancel},
		{"tool_cancel", b.toolCancel},
		{"waste", b.waste},
		{"memory", b.memory},
		{"waiting", b.waiting},
		{"ablation", b.ablation},
		{"scale", b.scale},
	}
	for _, st := range steps {
		if !cfg.runs(st.name) {
			continue
		}
		// These phases run on the worker of the relay phase when it ran,
		// and on a worker started alike when not: the throughput phase's
		// has the event interval off, which changes what they measure.
		if slices.Contains([]string{"cancel", "tool_cancel", "waste"}, st.name) && (b.sys.worker == nil || b.sys.interval != cfg.EventInterval) {
			if err := b.sys.startWorker(ctx, cfg.EventInterval); err != nil {
				return rep, fmt.Errorf("bench: %s: %w", st.name, err)
			}
		}
		if err := st.fn(ctx); err != nil {
			return rep, fmt.Errorf("bench: %s: %w", st.name, err)
		}
		if err := b.sys.alive(); err != nil {
			return rep, fmt.Errorf("bench: after %s: %w", st.name, err)
		}
	}
	return rep, nil
}

// bench is one run of the benchmark.
type bench struct {
	cfg   Config
	rep   *Report
	sys   *system
	start time.Time
	seq   int // names the runs of each step
}

func (b *bench) progress(format string, args ...any) {
	if b.start.IsZero() {
		b.start = time.Now()
	}
	fmt.Fprintf(b.cfg.Progress, "[%6.1fs] %s\n", time.Since(b.start).Seconds(), fmt.Sprintf(format, args...))
}

// prefix returns a fresh run id prefix for a step.
func (b *bench) prefix(tag string) string {
	b.seq++
	return fmt.Sprintf("b%d-%s", b.seq, tag)
}

// submit submits n runs named prefix-0 ... with metadata md and the
// tools given (JSON objects), 32 at a time.
func (b *bench) submit(ctx context.Context, prefix string, n int, md map[string]string, tools ...string) ([]string, error) {
	ids := make([]string, n)
	var list []json.RawMessage
	for _, t := range tools {
		list = append(list, json.RawMessage(t))
	}
	var g errgroup.Group
	g.SetLimit(32)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		g.Go(func() error {
			_, err := b.sys.client.Submit(ctx, events.RunRequest{RunID: ids[i], Model: "bench", Input: json.RawMessage(`"benchmark"`), Metadata: md, Tools: list})
			return err
		})
	}
	return ids, g.Wait()
}

// cancelAll cancels ids, 64 at a time, and waits for their run.cancelled.
func (b *bench) cancelAll(ctx context.Context, ids []string) error {
	var g errgroup.Group
	g.SetLimit(64)
	for _, id := range ids {
		g.Go(func() error {
			_, err := b.sys.client.Cancel(ctx, id, "bench")
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return b.sys.watch.waitAll(ctx, ids, events.TypeRunCancelled, 3*time.Minute)
}

// records fetches the emulator's records of the runs named prefix-*.
func (b *bench) records(ctx context.Context, prefix string) (map[string]foundrytest.ResponseRecord, error) {
	body, err := httpGet(ctx, b.sys.hc, b.sys.emuURL+"/_emulator/records?run_prefix="+prefix+"-")
	if err != nil {
		return nil, err
	}
	var rs []foundrytest.ResponseRecord
	if err := json.Unmarshal(body, &rs); err != nil {
		return nil, fmt.Errorf("emulator records: %w", err)
	}
	out := make(map[string]foundrytest.ResponseRecord, len(rs))
	for _, r := range rs {
		out[r.RunID] = r // the latest response of a run
	}
	return out, nil
}

// cpuMeter measures the CPU cores each process uses over a span.
type cpuMeter struct {
	b     *bench
	at    time.Time
	procs map[string]time.Duration
}

// meterCPU starts measuring.
func (b *bench) meterCPU() (*cpuMeter, error) {
	m := &cpuMeter{b: b, at: time.Now()}
	var err error
	m.procs, err = b.cpuNow()
	return m, err
}

// cores returns the cores each process used since meterCPU.
func (m *cpuMeter) cores() (map[string]float64, error) {
	now, err := m.b.cpuNow()
	if err != nil {
		return nil, err
	}
	secs := time.Since(m.at).Seconds()
	out := make(map[string]float64, len(now))
	for k, v := range now {
		out[k] = math.Round((v-m.procs[k]).Seconds()/secs*100) / 100
	}
	return out, nil
}

// cpuNow reads the CPU time of every process, the bench's own included.
func (b *bench) cpuNow() (map[string]time.Duration, error) {
	w, n, e, err := b.usages()
	if err != nil {
		return nil, err
	}
	return map[string]time.Duration{"worker": w.CPU, "nats": n.CPU, "emulator": e.CPU, "bench": selfCPU()}, nil
}

// usages reads the CPU and RSS of the worker, NATS and the emulator.
func (b *bench) usages() (w, n, e ProcUsage, err error) {
	if w, err = b.sys.worker.usage(); err != nil {
		return
	}
	if n, err = b.sys.nats.usage(); err != nil {
		return
	}
	e, err = b.sys.emulator.usage()
	return
}

func streamMD(tokens int, delay time.Duration) map[string]string {
	return map[string]string{"emu_tokens": strconv.Itoa(tokens), "emu_token_ms": strconv.FormatInt(delay.Milliseconds(), 10)}
}

// throughput measures the maximum: more runs than the system can serve,
// the event interval off, and the text.delta events stored per second, and
// the tokens they carry, counted in the steady middle of the load. A run's
// events merge tokens when its publishing falls behind (one publish in
// flight per run): the maximum streaming load is the tokens per second
// carried, the raw baseline compares events per second.
func (b *bench) throughput(ctx context.Context) error {
	if err := b.sys.startWorker(ctx, -1); err != nil {
		return err
	}
	c := b.cfg
	delay := 10 * time.Millisecond
	b.progress("throughput: %d runs x %d tokens, a token every %s (%d tokens/s offered), event interval off",
		c.ThroughputRuns, c.ThroughputTokens, delay, c.ThroughputRuns*int(time.Second/delay))
	var prof sync.WaitGroup
	if c.ProfileDir != "" {
		secs := strconv.Itoa(max(1, int((time.Duration(c.ThroughputTokens) * delay).Seconds())))
		prof.Go(func() { b.profile(ctx, "profile?seconds="+secs, "worker-throughput-cpu.pprof") })
		prof.Go(func() {
			b.profileOf(ctx, "http://"+b.sys.natsOps, "profile?seconds="+secs, "nats-throughput-cpu.pprof")
		})
	}
	meter, err := b.meterCPU()
	if err != nil {
		return err
	}
	p := b.prefix("max")
	ids, err := b.submit(ctx, p, c.ThroughputRuns, streamMD(c.ThroughputTokens, delay))
	if err != nil {
		return err
	}
	if err := b.sys.watch.waitAll(ctx, ids, events.TypeRunCompleted, 5*time.Minute); err != nil {
		return err
	}
	if b.rep.RawPublish.FoundryqCores, err = meter.cores(); err != nil {
		return err
	}
	prof.Wait()
	evs, text := b.sys.watch.steadyRate(ids)
	if evs <= 0 {
		return errors.New("no text.delta events to measure")
	}
	recs, err := b.records(ctx, p)
	if err != nil {
		return err
	}
	var textLen, tokens int
	for _, r := range recs {
		textLen += len(r.Text)
		tokens += r.Tokens
	}
	tokensPerSec := text * float64(tokens) / float64(max(textLen, 1))
	b.rep.Latency.MaxTokensPerSec = tokensPerSec
	b.rep.Latency.MaxEventsPerSec = evs
	b.rep.RawPublish.FoundryqPerSec = evs
	b.progress("throughput: %.0f events/s stored, carrying %.0f tokens/s (the maximum); CPU cores used: %v", evs, tokensPerSec, b.rep.RawPublish.FoundryqCores)
	return nil
}

// latency measures emit-to-receive per token at fractions of the maximum,
// for foundryq (interval off) and for the bare reader.
func (b *bench) latency(ctx context.Context) error {
	c := b.cfg
	lr := &b.rep.Latency
	lr.TokensPerRunSec = c.TokenRate
	defer lr.finish()
	tokens := max(1, int(c.LatencyDuration/c.tokenDelay()))
	for _, f := range c.LatencyFractions {
		runs := b.runsAt(f)
		pt := LatencyPoint{Fraction: f, Runs: runs, OfferedPerSec: float64(runs * c.TokenRate)}
		b.progress("latency at %.0f%% of the maximum: %d runs x %d tokens/s (%d tokens each), foundryq then the bare reader", f*100, runs, c.TokenRate, tokens)
		p := b.prefix("lat")
		ids, err := b.submit(ctx, p, runs, streamMD(tokens, c.tokenDelay()))
		if err != nil {
			return err
		}
		if err := b.sys.watch.waitAll(ctx, ids, events.TypeRunCompleted, 5*time.Minute); err != nil {
			return err
		}
		recs, err := b.records(ctx, p)
		if err != nil {
			return err
		}
		var ds []time.Duration
		deltas := 0
		for _, id := range ids {
			rs := b.sys.watch.receipts(id)
			deltas += len(rs)
			ds = tokenLatencies(ds, recs[id], rs)
		}
		pt.Foundryq = percentiles(ds)
		pt.EventsPerToken = float64(deltas) / float64(runs*tokens)

		rp := b.prefix("latreader")
		res, err := b.runReader(ctx, ReaderConfig{Prefix: rp, Runs: runs, Tokens: tokens, TokenDelay: c.tokenDelay()})
		if err != nil {
			return err
		}
		if recs, err = b.records(ctx, rp); err != nil {
			return err
		}
		ds = ds[:0]
		for id, rs := range res.Receipts {
			ds = tokenLatencies(ds, recs[id], rs)
		}
		pt.Reader = percentiles(ds)
		pt.AddedP50 = pt.Foundryq.P50 - pt.Reader.P50
		pt.AddedP99 = pt.Foundryq.P99 - pt.Reader.P99
		lr.Points = append(lr.Points, pt)
		b.progress("latency: foundryq p50 %.1fms p99 %.1fms; bare reader p50 %.1fms p99 %.1fms", pt.Foundryq.P50, pt.Foundryq.P99, pt.Reader.P50, pt.Reader.P99)
	}
	return nil
}

// runsAt is the number of runs streaming at TokenRate that make fraction f
// of the maximum.
func (b *bench) runsAt(f float64) int {
	n := int(math.Round(f * b.rep.Latency.MaxTokensPerSec / float64(b.cfg.TokenRate)))
	return min(max(n, 1), b.cfg.MaxRuns)
}

// runReader runs the bare reader in a process of its own and reads its
// result.
func (b *bench) runReader(ctx context.Context, rc ReaderConfig) (ReaderResult, error) {
	out, err := os.CreateTemp(b.sys.dir, "reader-*.json")
	if err != nil {
		return ReaderResult{}, err
	}
	out.Close()
	p, err := startProcess("bench-reader", b.cfg.Binary, b.sys.env, "bench-reader", "--url", b.sys.foundryURL(), "--api-key", apiKey,
		"--prefix", rc.Prefix, "--runs", strconv.Itoa(rc.Runs), "--tokens", strconv.Itoa(rc.Tokens),
		"--token-delay", rc.TokenDelay.String(), "--out", out.Name(), "--h2c="+strconv.FormatBool(b.cfg.H2C))
	if err != nil {
		return ReaderResult{}, err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		_ = p.stop(5 * time.Second)
		return ReaderResult{}, ctx.Err()
	case <-time.After(5 * time.Minute):
		_ = p.stop(5 * time.Second)
		return ReaderResult{}, errors.New("bench-reader did not finish in 5m")
	}
	if p.err != nil {
		return ReaderResult{}, p.exited()
	}
	data, err := os.ReadFile(out.Name())
	if err != nil {
		return ReaderResult{}, err
	}
	var res ReaderResult
	if err := json.Unmarshal(data, &res); err != nil {
		return res, fmt.Errorf("bench-reader result: %w", err)
	}
	return res, nil
}

// relay measures CPU per relayed token (worker, with the event interval
// on) against the bare reader, and NATS CPU per stored event.
func (b *bench) relay(ctx context.Context) error {
	c := b.cfg
	if err := b.sys.startWorker(ctx, c.EventInterval); err != nil {
		return err
	}
	r := &b.rep.Relay
	*r = RelayReport{Runs: c.RelayRuns, Tokens: c.RelayTokens, TokenDelayMS: ms(c.RelayTokenDelay), EventIntervalMS: ms(c.EventInterval), Target: TargetRelayRatio}
	b.progress("relay cost: %d runs x %d tokens, a token every %s, event interval %s", c.RelayRuns, c.RelayTokens, c.RelayTokenDelay, c.EventInterval)
	stored0, err := b.sys.eventsStored(ctx)
	if err != nil {
		return err
	}
	if r.NATSIdleCores, err = b.natsIdle(ctx); err != nil {
		return err
	}
	w0, n0, e0, err := b.usages()
	if err != nil {
		return err
	}
	relayStart := time.Now()
	var prof sync.WaitGroup
	if c.ProfileDir != "" {
		secs := max(1, int((time.Duration(c.RelayTokens) * c.RelayTokenDelay).Seconds()))
		prof.Go(func() { b.profile(ctx, "profile?seconds="+strconv.Itoa(secs), "worker-relay-cpu.pprof") })
	}
	p := b.prefix("relay")
	ids, err := b.submit(ctx, p, c.RelayRuns, streamMD(c.RelayTokens, c.RelayTokenDelay))
	if err != nil {
		return err
	}
	if err := b.sys.watch.waitAll(ctx, ids, events.TypeRunCompleted, 5*time.Minute); err != nil {
		return err
	}
	w1, n1, e1, err := b.usages()
	if err != nil {
		return err
	}
	prof.Wait()
	stored1, err := b.sys.eventsStored(ctx)
	if err != nil {
		return err
	}
	r.TokensRelayed = c.RelayRuns * c.RelayTokens
	r.EventsStored = stored1 - stored0
	r.WorkerCPUPerToken = us(w1.CPU-w0.CPU) / float64(r.TokensRelayed)
	r.EmulatorCPUPerToken = us(e1.CPU-e0.CPU) / float64(r.TokensRelayed)
	if r.EventsStored > 0 {
		r.NATSCPUPerEvent = us(n1.CPU-n0.CPU) / float64(r.EventsStored)
	}
	if err := b.relayPerRun(ctx, n1.CPU-n0.CPU-idleCPU(r.NATSIdleCores, time.Since(relayStart))); err != nil {
		return err
	}
	b.progress("relay cost: the bare reader, same streams")
	res, err := b.runReader(ctx, ReaderConfig{Prefix: b.prefix("relayreader"), Runs: c.RelayRuns, Tokens: c.RelayTokens, TokenDelay: c.RelayTokenDelay})
	if err != nil {
		return err
	}
	if res.Tokens > 0 {
		r.ReaderCPUPerToken = us(time.Duration(res.CPU)) / float64(res.Tokens)
	}
	if r.ReaderCPUPerToken > 0 {
		r.Ratio = r.WorkerCPUPerToken / r.ReaderCPUPerToken
	}
	defer r.finish()
	b.progress("relay cost: worker %.1fµs/token, bare reader %.1fµs/token (ratio %.2f), NATS %.1fµs/event", r.WorkerCPUPerToken, r.ReaderCPUPerToken, r.Ratio, r.NATSCPUPerEvent)
	for _, l := range c.RelayLoads {
		pt, err := b.relayLoad(ctx, l)
		if err != nil {
			return err
		}
		r.Loads = append(r.Loads, pt)
	}
	return nil
}

// relayLoad measures the worker's CPU per token at load l, then the bare
// reader's on the same streams.
func (b *bench) relayLoad(ctx context.Context, l RelayLoad) (RelayLoadPoint, error) {
	pt := RelayLoadPoint{Runs: l.Runs, Tokens: l.Tokens, TokenDelayMS: ms(l.TokenDelay)}
	b.progress("relay cost: %d runs x %d tokens, a token every %s", l.Runs, l.Tokens, l.TokenDelay)
	w0, err := b.sys.worker.usage()
	if err != nil {
		return pt, err
	}
	ids, err := b.submit(ctx, b.prefix("relayload"), l.Runs, streamMD(l.Tokens, l.TokenDelay))
	if err != nil {
		return pt, err
	}
	if err := b.sys.watch.waitAll(ctx, ids, events.TypeRunCompleted, 5*time.Minute); err != nil {
		return pt, err
	}
	w1, err := b.sys.worker.usage()
	if err != nil {
		return pt, err
	}
	pt.WorkerCPUPerToken = us(w1.CPU-w0.CPU) / float64(l.Runs*l.Tokens)
	res, err := b.runReader(ctx, ReaderConfig{Prefix: b.prefix("relayloadreader"), Runs: l.Runs, Tokens: l.Tokens, TokenDelay: l.TokenDelay})
	if err != nil {
		return pt, err
	}
	if res.Tokens > 0 {
		pt.ReaderCPUPerToken = us(time.Duration(res.CPU)) / float64(res.Tokens)
	}
	if pt.ReaderCPUPerToken > 0 {
		pt.Ratio = pt.WorkerCPUPerToken / pt.ReaderCPUPerToken
	}
	b.progress("relay cost: worker %.1fµs/token, bare reader %.1fµs/token (ratio %.2f)", pt.WorkerCPUPerToken, pt.ReaderCPUPerToken, pt.Ratio)
	return pt, nil
}

// natsIdle measures the cores the NATS process uses over two seconds with
// the worker idle (its pull requests, timers and the store's housekeeping).
func (b *bench) natsIdle(ctx context.Context) (float64, error) {
	meter, err := b.meterCPU()
	if err != nil {
		return 0, err
	}
	select {
	case <-time.After(2 * time.Second): // the span measured, not a wait for a condition
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	cores, err := meter.cores()
	return cores["nats"], err
}

// idleCPU is the CPU time cores use over d.
func idleCPU(cores float64, d time.Duration) time.Duration {
	return time.Duration(cores * float64(d))
}

// relayPerRun splits NATS's CPU in the relay phase (natsCPU, its idle
// use taken out) into what a
// run costs whatever its length and what each further event costs: as many
// runs of one token are measured alone.
func (b *bench) relayPerRun(ctx context.Context, natsCPU time.Duration) error {
	r := &b.rep.Relay
	stored0, err := b.sys.eventsStored(ctx)
	if err != nil {
		return err
	}
	_, n0, _, err := b.usages()
	if err != nil {
		return err
	}
	start := time.Now()
	ids, err := b.submit(ctx, b.prefix("relayrun"), r.Runs, streamMD(1, b.cfg.RelayTokenDelay))
	if err != nil {
		return err
	}
	if err := b.sys.watch.waitAll(ctx, ids, events.TypeRunCompleted, 5*time.Minute); err != nil {
		return err
	}
	_, n1, _, err := b.usages()
	if err != nil {
		return err
	}
	stored1, err := b.sys.eventsStored(ctx)
	if err != nil {
		return err
	}
	r.NATSCPUPerRun = us(n1.CPU-n0.CPU-idleCPU(r.NATSIdleCores, time.Since(start))) / float64(r.Runs)
	r.EventsPerShortRun = float64(stored1-stored0) / float64(r.Runs)
	if extra := float64(r.EventsStored) - float64(r.Runs)*r.EventsPerShortRun; extra > 0 {
		r.NATSCPUPerFurtherEvent = (us(natsCPU) - float64(r.Runs)*r.NATSCPUPerRun) / extra
	}
	b.progress("relay cost: NATS %.0fµs per run of one token (%.1f events), %.1fµs per further event", r.NATSCPUPerRun, r.EventsPerShortRun, r.NATSCPUPerFurtherEvent)
	return nil
}

// profile saves the worker's /debug/pprof/<what> to ProfileDir/name.
func (b *bench) profile(ctx context.Context, what, name string) {
	b.profileOf(ctx, b.sys.metrics[:len(b.sys.metrics)-len("/metrics")], what, name)
}

// profileOf saves base/debug/pprof/<what> to ProfileDir/name.
func (b *bench) profileOf(ctx context.Context, base, what, name string) {
	url := base + "/debug/pprof/" + what
	data, err := httpGet(ctx, b.sys.hc, url)
	if err == nil {
		err = os.WriteFile(filepath.Join(b.cfg.ProfileDir, name), data, 0o644)
	}
	if err != nil {
		b.progress("profile %s: %v", name, err)
		return
	}
	b.progress("profile: wrote %s", filepath.Join(b.cfg.ProfileDir, name))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

// cancel measures cancel latency at fractions of the maximum streaming
// load: a quarter of the runs are cancelled, spread over CancelSpread in
// random order, while the others keep streaming; then the rest.
func (b *bench) cancel(ctx context.Context) error {
	c := b.cfg
	cr := &b.rep.Cancel
	cr.EventIntervalMS = ms(b.sys.interval)
	defer cr.finish()
	for _, f := range c.CancelFractions {
		runs := b.runsAt(f)
		pt := CancelPoint{Fraction: f, Runs: runs}
		b.progress("cancel at %.0f%% of the maximum: %d runs x %d tokens/s", f*100, runs, c.TokenRate)
		ids, err := b.submit(ctx, b.prefix("cancel"), runs, streamMD(foundrytest.MaxScenarioTokens, c.tokenDelay()))
		if err != nil {
			return err
		}
		if err := b.sys.watch.waitAll(ctx, ids, events.TypeTextDelta, 5*time.Minute); err != nil {
			return err
		}
		rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		measured := ids[:max(1, min(len(ids), max(len(ids)/4, 10)))]
		pt.Cancelled = len(measured)
		sc, err := b.spreadCancels(ctx, measured, c.CancelSpread)
		if err != nil {
			return err
		}
		pt.NotCancelled = sc.notCancelling + sc.notStored
		pt.Reply, pt.Stored = percentiles(sc.replies), percentiles(sc.stored)
		cr.Points = append(cr.Points, pt)
		b.progress("cancel: reply p50 %.1fms p99 %.1fms; run.cancelled stored p50 %.1fms p99 %.1fms", pt.Reply.P50, pt.Reply.P99, pt.Stored.P50, pt.Stored.P99)
		if err := b.cancelAll(ctx, ids[len(measured):]); err != nil {
			return err
		}
	}
	return nil
}

// spreadCancelled is what the cancels sent by spreadCancels came to.
type spreadCancelled struct {
	asked         map[string]time.Time // when each cancel was sent
	replies       []time.Duration      // from each cancel to its reply
	stored        []time.Duration      // from each cancel to its run.cancelled received
	notCancelling int                  // replies other than "cancelling"
	notStored     int                  // runs with no run.cancelled within a minute
}

// spreadCancels cancels the runs of ids, one after the other over spread,
// each on a goroutine of its own, and waits for their run.cancelled.
func (b *bench) spreadCancels(ctx context.Context, ids []string, spread time.Duration) (spreadCancelled, error) {
	sc := spreadCancelled{asked: make(map[string]time.Time, len(ids))}
	var mu sync.Mutex
	var g errgroup.Group
	gap := spread / time.Duration(len(ids))
	next := time.Now()
	for _, id := range ids {
		if d := time.Until(next); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return sc, ctx.Err()
			}
		}
		next = next.Add(gap)
		g.Go(func() error {
			t0 := time.Now()
			reply, err := b.sys.client.Cancel(ctx, id, "bench")
			d := time.Since(t0)
			if err != nil {
				return fmt.Errorf("cancel %s: %w", id, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if reply.Result != events.CancelCancelling {
				sc.notCancelling++
			}
			sc.replies = append(sc.replies, d)
			sc.asked[id] = t0
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return sc, err
	}
	_ = b.sys.watch.waitAll(ctx, ids, events.TypeRunCancelled, time.Minute)
	for _, id := range ids {
		at := b.sys.watch.at(id, events.TypeRunCancelled)
		if at.IsZero() {
			sc.notStored++
			continue
		}
		sc.stored = append(sc.stored, at.Sub(sc.asked[id]))
	}
	return sc, nil
}
