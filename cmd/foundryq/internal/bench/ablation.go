package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/foundryq/foundryq/events"
)

// The ablation phase finds where NATS's CPU per stored event goes: it
// stores the same events (the size and headers of foundryq's text.delta
// events, on as many run subjects as the throughput phase) once the way
// the worker stores them, then with one feature switched off at a time,
// each into a fresh stream, and reads the NATS process's CPU per event.

// ablationVariant is one way of storing the events.
type ablationVariant struct {
	name string
	// off says what differs from the way foundryq stores events.
	off string
	// stream adjusts the stream's configuration.
	stream func(*jetstream.StreamConfig)
	// noFence drops Nats-Expected-Last-Subject-Sequence; noMsgID drops
	// Nats-Msg-Id; noHeaders drops the Foundryq-* headers.
	noFence, noMsgID, noHeaders bool
	// oneSubject stores every run's events on one subject (no fence: a
	// per-subject fence on one subject would serialise every run).
	oneSubject bool
	// async publishes without waiting for each ack (no fence: the
	// expected sequence is known only from the previous ack).
	async bool
	// batch publishes a run's events in atomic batches of this many
	// events, the fence on each batch's first event only.
	batch int
	// watched adds a subscriber to the live subjects the stream
	// republishes to, as a watcher following every run.
	watched bool
	// pace publishes an event of each run every pace (the relay phase's
	// runs and events), instead of as fast as NATS takes them.
	pace time.Duration
	// syncAlways stores into a NATS server of its own whose JetStream
	// fsyncs every write (sync_interval: always).
	syncAlways bool
}

// ablationVariants are the variants, foundryq's way first; the paced
// ones publish an event of each run every pace.
func ablationVariants(pace time.Duration) []ablationVariant {
	return []ablationVariant{
		{name: "foundryq", off: "nothing: fence, message id (2 min window), Foundryq headers, RePublish, file storage, a subject per run, one publish in flight per run"},
		{name: "foundryq_watched", off: "nothing, and a watcher follows every run on the live subjects (delivery added)", watched: true},
		{name: "no_fence", off: "the per-publish Nats-Expected-Last-Subject-Sequence fence", noFence: true},
		{name: "no_msg_id", off: "the Nats-Msg-Id header and its dedupe", noMsgID: true},
		{name: "short_dedupe_window", off: "the dedupe window cut from 2 min to 1 s", stream: func(c *jetstream.StreamConfig) { c.Duplicates = time.Second }},
		{name: "no_republish", off: "the stream's RePublish to the live subjects", stream: func(c *jetstream.StreamConfig) { c.RePublish = nil }},
		{name: "no_headers", off: "the Foundryq-Type and Foundryq-Upstream-Seq headers", noHeaders: true},
		{name: "one_subject", off: "a subject per run (one subject, no fence)", oneSubject: true, noFence: true},
		{name: "memory_storage", off: "file storage (memory)", stream: func(c *jetstream.StreamConfig) { c.Storage = jetstream.MemoryStorage }},
		{name: "sync_always", off: "the server's default async flush (sync_interval: always, an fsync per write)", syncAlways: true},
		{name: "async_publish", off: "one publish in flight per run (pipelined async publishes, no fence)", async: true, noFence: true},
		{name: "atomic_batch_8", off: "a fence per event (atomic batches of 8 events, the fence on the first; at most 48 batches open at once, under nats-server's default of 50 per stream)", batch: 8,
			stream: func(c *jetstream.StreamConfig) { c.AllowAtomicPublish = true }},
		{name: "raw", off: "everything: no fence, message id, headers or RePublish; pipelined async publishes", async: true,
			noFence: true, noMsgID: true, noHeaders: true, stream: func(c *jetstream.StreamConfig) { c.RePublish = nil }},
		{name: "foundryq_paced", off: "nothing, at the relay phase's pace: its runs, an event of each every event interval", pace: pace},
		{name: "raw_paced", off: "everything, at the relay phase's pace", pace: pace, async: true,
			noFence: true, noMsgID: true, noHeaders: true, stream: func(c *jetstream.StreamConfig) { c.RePublish = nil }},
	}
}

// ablation runs every variant and reports NATS CPU µs per event for each,
// and its ratio to the raw row.
func (b *bench) ablation(ctx context.Context) error {
	c := b.cfg
	ar := &b.rep.Ablation
	*ar = AblationReport{Runs: c.ThroughputRuns, EventsPerRun: max(1, c.RawMessages/c.ThroughputRuns), Target: TargetAblationRatio, WorkerCPURatio: round2(b.rep.Relay.Ratio)}
	size, hdr := b.sys.watch.deltaShape()
	if size == 0 {
		size, hdr = 120, nats.Header{events.HeaderType: {string(events.TypeTextDelta)}, events.HeaderUpstreamSeq: {"1"}}
	}
	ar.MessageBytes = size
	if b.sys.worker != nil { // NATS's CPU is the ablation's alone
		if err := b.sys.worker.stop(30 * time.Second); err != nil {
			return err
		}
		b.sys.worker = nil
	}
	var syncNATS *process
	var syncURL string
	defer func() {
		if syncNATS != nil {
			_ = syncNATS.stop(30 * time.Second)
		}
	}()
	variants := ablationVariants(c.EventInterval)
	// The paced rows: the relay phase's runs, as many events as a run of it
	// stores at the event interval.
	pacedRuns, pacedPerRun := c.RelayRuns, max(1, int(time.Duration(c.RelayTokens)*c.RelayTokenDelay/max(c.EventInterval, time.Millisecond)))
	for i, v := range variants {
		url, proc := b.sys.natsURL, b.sys.nats
		if v.syncAlways {
			if syncNATS == nil {
				var err error
				if syncNATS, syncURL, err = b.sys.startSyncAlwaysNATS(ctx); err != nil {
					return fmt.Errorf("sync_always: %w", err)
				}
			}
			url = syncURL
			proc = syncNATS
		}
		runs, perRun := ar.Runs, ar.EventsPerRun
		switch {
		case v.pace > 0:
			runs, perRun = pacedRuns, pacedPerRun
		case v.syncAlways || v.batch > 0: // a few thousand events/s at most
			runs, perRun = min(runs, 100), min(perRun, 20)
		}
		b.progress("ablation %d/%d: %s (%d runs x %d events of %d bytes)", i+1, len(variants), v.name, runs, perRun, size)
		row, err := b.ablate(ctx, url, proc, v, i, runs, perRun, size, hdr)
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		ar.Rows = append(ar.Rows, row)
		b.progress("ablation: %s: NATS %.1f µs/event, %.0f events/s", v.name, row.NATSCPUPerEvent, row.EventsPerSec)
	}
	ar.finish()
	return nil
}

// finish computes each row's ratio to the raw row and the targets: the
// way foundryq stores events against raw publishing, and, when the relay
// phase measured it (WorkerCPURatio), the worker's CPU per token against
// the bare reader's.
func (ar *AblationReport) finish() {
	cpu := map[string]float64{}
	for _, r := range ar.Rows {
		cpu[r.Variant] = r.NATSCPUPerEvent
	}
	raw, rawPaced := cpu["raw"], cpu["raw_paced"]
	for i, r := range ar.Rows {
		base := raw
		if r.PaceMS > 0 {
			base = rawPaced
		}
		if base > 0 {
			ar.Rows[i].RatioToRaw = round2(r.NATSCPUPerEvent / base)
		}
	}
	if raw > 0 {
		ar.FoundryqRatio = round2(cpu["foundryq"] / raw)
	}
	if rawPaced > 0 {
		ar.PacedRatio = round2(cpu["foundryq_paced"] / rawPaced)
	}
	ar.Targets = nil
	if ar.FoundryqRatio > 0 {
		ar.Targets = append(ar.Targets, newTarget("NATS CPU per stored event, foundryq's way over raw publishing", ar.FoundryqRatio, ar.Target, "x"))
	}
	if ar.WorkerCPURatio > 0 {
		ar.Targets = append(ar.Targets, newTarget("worker CPU per token over the bare reader's (relay phase)", ar.WorkerCPURatio, TargetRelayRatio, "x"))
	}
	ar.Met = allMet(ar.Targets)
}

func round2(f float64) float64 { return float64(int64(f*100+0.5)) / 100 }

// ablate stores runs x perRun events the way v says into a stream of its
// own on the NATS server at url (process proc) and measures proc's CPU.
func (b *bench) ablate(ctx context.Context, url string, proc *process, v ablationVariant, idx, runs, perRun, size int, hdr nats.Header) (AblationRow, error) {
	row := AblationRow{Variant: v.name, Off: v.off, Runs: runs, EventsPerRun: perRun, PaceMS: ms(v.pace)}
	nc, err := nats.Connect(url)
	if err != nil {
		return row, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return row, err
	}
	prefix := "bench.abl" + strconv.Itoa(idx)
	scfg := events.EventsStreamConfig(b.sys.names, events.ProvisionConfig{})
	scfg.Name, scfg.Subjects = "BENCH_ABLATE_"+strconv.Itoa(idx), []string{prefix + ".*"}
	scfg.RePublish = &jetstream.RePublish{Source: prefix + ".*", Destination: prefix + "live.{{wildcard(1)}}"}
	if v.stream != nil {
		v.stream(&scfg)
	}
	st, err := js.CreateStream(ctx, scfg)
	if err != nil {
		return row, fmt.Errorf("create the stream: %w", err)
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), scfg.Name) }()

	p := ablationPublisher{v: v, nc: nc, js: js, data: bytes.Repeat([]byte("x"), size), hdr: hdr}
	subjects := make([]string, runs)
	for i := range subjects {
		subjects[i] = prefix + ".r" + strconv.Itoa(i)
		if v.oneSubject {
			subjects[i] = prefix + ".all"
		}
	}
	var delivered atomic.Int64
	if v.watched {
		wc, err := nats.Connect(url)
		if err != nil {
			return row, err
		}
		defer wc.Close()
		if _, err := wc.Subscribe(prefix+"live.*", func(*nats.Msg) { delivered.Add(1) }); err != nil {
			return row, err
		}
		if err := wc.Flush(); err != nil {
			return row, err
		}
	}
	cpu0, err := proc.usage()
	if err != nil {
		return row, err
	}
	start := time.Now()
	if err := p.run(ctx, subjects, perRun); err != nil {
		return row, err
	}
	want := int64(runs * perRun)
	for deadline := time.Now().Add(time.Minute); v.watched && delivered.Load() < want; {
		if time.Now().After(deadline) {
			return row, fmt.Errorf("the watcher received %d of %d events", delivered.Load(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	secs := time.Since(start).Seconds()
	cpu1, err := proc.usage()
	if err != nil {
		return row, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return row, err
	}
	if info.State.Msgs != uint64(want) {
		return row, fmt.Errorf("the stream holds %d events, want %d", info.State.Msgs, want)
	}
	row.Events = uint64(want)
	row.EventsPerSec = float64(want) / secs
	row.NATSCPUPerEvent = us(cpu1.CPU-cpu0.CPU) / float64(want)
	return row, nil
}

// ablationPublisher stores events the way its variant says.
type ablationPublisher struct {
	v    ablationVariant
	nc   *nats.Conn
	js   jetstream.JetStream
	data []byte
	hdr  nats.Header
}

// msg is event number seq (from 1) of a run on subject.
func (p ablationPublisher) msg(subject, run string, seq int) *nats.Msg {
	m := &nats.Msg{Subject: subject, Data: p.data, Header: nats.Header{}}
	if !p.v.noHeaders {
		for k, vs := range p.hdr {
			m.Header[k] = vs
		}
	}
	if !p.v.noMsgID {
		m.Header.Set(jetstream.MsgIDHeader, run+":"+strconv.Itoa(seq))
	}
	return m
}

// run publishes perRun events on each subject.
func (p ablationPublisher) run(ctx context.Context, subjects []string, perRun int) error {
	if p.v.pace > 0 {
		return p.runPaced(ctx, subjects, perRun)
	}
	if p.v.async {
		return p.runAsync(ctx, subjects, perRun)
	}
	// One goroutine per run, one publish in flight each, as the worker.
	var g errgroup.Group
	var open chan struct{} // batches open at once
	if p.v.batch > 1 {
		open = make(chan struct{}, maxOpenBatches)
	}
	for i, subj := range subjects {
		run := "r" + strconv.Itoa(i)
		g.Go(func() error {
			var last uint64
			for seq := 1; seq <= perRun; {
				n := 1
				var err error
				if p.v.batch > 1 {
					n = min(p.v.batch, perRun-seq+1)
					open <- struct{}{}
					last, err = p.publishBatch(ctx, subj, run, seq, n, last)
					<-open
				} else {
					last, err = p.publishOne(ctx, subj, run, seq, last)
				}
				if err != nil {
					return fmt.Errorf("run %s event %d: %w", run, seq, err)
				}
				seq += n
			}
			return nil
		})
	}
	return g.Wait()
}

func (p ablationPublisher) publishOne(ctx context.Context, subj, run string, seq int, last uint64) (uint64, error) {
	var opts []jetstream.PublishOpt
	if !p.v.noFence {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(last))
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ack, err := p.js.PublishMsg(pctx, p.msg(subj, run, seq), opts...)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// maxOpenBatches stays under nats-server's default limit of 50 atomic
// batches open at once per stream (max_batch_inflight_per_stream).
const maxOpenBatches = 48

// publishBatch stores events seq .. seq+n-1 as one atomic batch: the
// fence on the first, the commit on the last, whose reply is the ack.
func (p ablationPublisher) publishBatch(ctx context.Context, subj, run string, seq, n int, last uint64) (uint64, error) {
	id := run + "-" + strconv.Itoa(seq)
	for i := range n {
		m := p.msg(subj, run, seq+i)
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		if i == 0 && !p.v.noFence {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
		}
		if i < n-1 {
			if err := p.nc.PublishMsg(m); err != nil {
				return 0, err
			}
			continue
		}
		m.Header.Set("Nats-Batch-Commit", "1")
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		reply, err := p.nc.RequestMsgWithContext(pctx, m)
		cancel()
		if err != nil {
			return 0, err
		}
		var ack struct {
			Seq   uint64 `json:"seq"`
			Error *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(reply.Data, &ack); err != nil {
			return 0, err
		}
		if ack.Error != nil {
			return 0, errors.New(ack.Error.Description)
		}
		return ack.Seq, nil
	}
	return last, nil
}

// runPaced publishes an event of each run every pace, the runs' ticks
// spread over the pace, as a worker relays runs streaming at the event
// interval: one at a time and waiting for each ack, or without waiting.
func (p ablationPublisher) runPaced(ctx context.Context, subjects []string, perRun int) error {
	var g errgroup.Group
	for i, subj := range subjects {
		run := "r" + strconv.Itoa(i)
		offset := p.v.pace * time.Duration(i) / time.Duration(len(subjects))
		g.Go(func() error {
			var last uint64
			next := time.Now().Add(offset)
			for seq := 1; seq <= perRun; seq++ {
				select {
				case <-time.After(time.Until(next)):
				case <-ctx.Done():
					return ctx.Err()
				}
				next = next.Add(p.v.pace)
				var err error
				if p.v.async {
					_, err = p.js.PublishMsgAsync(p.msg(subj, run, seq), jetstream.WithStallWait(time.Minute))
				} else {
					last, err = p.publishOne(ctx, subj, run, seq, last)
				}
				if err != nil {
					return fmt.Errorf("run %s event %d: %w", run, seq, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil || !p.v.async {
		return err
	}
	return p.asyncComplete(ctx)
}

// runAsync publishes every event without waiting for acks, runs
// interleaved, and waits for every ack.
func (p ablationPublisher) runAsync(ctx context.Context, subjects []string, perRun int) error {
	for seq := 1; seq <= perRun; seq++ {
		for i, subj := range subjects {
			if _, err := p.js.PublishMsgAsync(p.msg(subj, "r"+strconv.Itoa(i), seq), jetstream.WithStallWait(time.Minute)); err != nil {
				return fmt.Errorf("publish: %w", err)
			}
		}
	}
	return p.asyncComplete(ctx)
}

// asyncComplete waits for every async publish's ack.
func (p ablationPublisher) asyncComplete(ctx context.Context) error {
	select {
	case <-p.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(5 * time.Minute):
		return errors.New("async publishes not acknowledged after 5m")
	}
}
