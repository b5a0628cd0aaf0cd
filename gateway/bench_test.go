package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/gateway"
	"github.com/foundryq/foundryq/internal/testkit"
)

// BenchmarkGatewayAddedLatency runs many runs streaming 20 tokens/s each
// (emu_token_ms=50), every run followed by one SSE client through the
// gateway and one NATS watcher, with NATS (file storage, loopback TCP), the
// emulator and two workers. For
// every event both saw, it takes the SSE client's arrival time minus the
// NATS watcher's: the latency the gateway adds.
//
// As deployed, the gateway is a process of its own: by default NATS and the
// Foundry emulator run in a `foundryq dev --workers 0` subprocess and the
// two workers in `foundryq worker` subprocesses (built from this module),
// while the gateway, the SSE clients and the NATS watchers run in the
// benchmark's process. FOUNDRYQ_GATEWAY_BENCH_INPROCESS=1 puts everything in
// one process (one Go scheduler for the emulator's, the workers' and the
// gateway's goroutines). It reports the p50, p99 and
// max of that difference over the events published after both watchers
// were attached.
//
//	go test -run '^$' -bench GatewayAddedLatency -benchtime 1x ./gateway/
//
// FOUNDRYQ_GATEWAY_BENCH_RUNS (default 1000) and FOUNDRYQ_GATEWAY_BENCH_TOKENS
// (default 100, i.e. 5 s per run) change the load. The NATS watcher is, by
// default, an events.Client.Watch (what `foundryq watch` and Go clients
// use: an ordered JetStream consumer per run); FOUNDRYQ_GATEWAY_BENCH_WATCHER=core
// makes it a bare core NATS subscription on the run's event subject (what
// `nats sub foundryq.events.<run_id>` sees, and what the gateway itself
// follows), a stricter baseline: it holds no consumer and replays nothing.
func BenchmarkGatewayAddedLatency(b *testing.B) {
	runs := envInt(b, "FOUNDRYQ_GATEWAY_BENCH_RUNS", 1000)
	tokens := envInt(b, "FOUNDRYQ_GATEWAY_BENCH_TOKENS", 100)
	useWatch := true
	switch v := os.Getenv("FOUNDRYQ_GATEWAY_BENCH_WATCHER"); v {
	case "", "watch":
	case "core":
		useWatch = false
	default:
		b.Fatalf("FOUNDRYQ_GATEWAY_BENCH_WATCHER=%q: want core or watch", v)
	}
	inProcess := os.Getenv("FOUNDRYQ_GATEWAY_BENCH_INPROCESS") == "1"
	for range b.N {
		res := measureAddedLatency(b, runs, tokens, useWatch, inProcess)
		b.ReportMetric(res.p50, "p50-added-ms")
		b.ReportMetric(res.p99, "p99-added-ms")
		b.ReportMetric(res.max, "max-added-ms")
		b.ReportMetric(float64(res.samples), "events")
		watcher := "events.Watch"
		if !useWatch {
			watcher = "core subscription"
		}
		b.Logf("%d runs x %d tokens at 20 tokens/s, NATS watcher %s: %d events compared; gateway added p50 %.2f ms, p99 %.2f ms, max %.2f ms (NATS watcher: first event to last %s)",
			runs, tokens, watcher, res.samples, res.p50, res.p99, res.max, res.span.Round(time.Millisecond))
	}
}

func envInt(tb testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

type latencyResult struct {
	p50, p99, max float64 // ms
	samples       int
	span          time.Duration
}

// arrivals records when each event of a run reached one watcher.
type arrivals struct {
	attached time.Time
	at       []time.Time // index seq
	times    []time.Time // the events' own Time, index seq
	ended    bool
}

func (a *arrivals) record(seq uint64, now, evTime time.Time) {
	for uint64(len(a.at)) <= seq {
		a.at = append(a.at, time.Time{})
		a.times = append(a.times, time.Time{})
	}
	a.at[seq], a.times[seq] = now, evTime
}

func measureAddedLatency(tb testing.TB, runs, tokens int, useWatch, inProcess bool) latencyResult {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var url string
	var startWorkers func()
	if inProcess {
		var stop func()
		url, startWorkers, stop = inProcessSystem(ctx, tb, runs)
		defer stop()
	} else {
		url, startWorkers = processSystem(tb, runs)
	}
	var conns []*nats.Conn
	connect := func() *nats.Conn {
		nc, err := nats.Connect(url)
		if err != nil {
			tb.Fatal(err)
		}
		conns = append(conns, nc)
		return nc
	}
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	cnc := connect()
	client, err := events.NewClient(cnc, events.ClientConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	js, err := jetstream.New(cnc)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := consumer.Provision(ctx, js, client.Names(), consumer.ProvisionConfig{}); err != nil {
		tb.Fatal(err)
	}
	// One client address opens every stream: per-client limits out of the way.
	gw, err := gateway.New(gateway.Config{Addr: "127.0.0.1:0", NoAuth: true, Tenants: []gateway.Tenant{{Name: "bench", Conn: connect()}},
		MaxStreamsPerToken: 1 << 20, RateLimit: 1e9, RateBurst: 1 << 20})
	if err != nil {
		tb.Fatal(err)
	}
	gctx, stopGateway := context.WithCancel(ctx)
	gdone := make(chan error, 1)
	go func() { gdone <- gw.Run(gctx) }()
	defer func() {
		stopGateway()
		if err := <-gdone; err != nil {
			tb.Errorf("gateway: %v", err)
		}
	}()
	<-gw.Ready()
	base := "http://" + gw.Addr()
	return compare(ctx, tb, client, connect(), base, runs, tokens, useWatch, startWorkers)
}

// inProcessSystem runs NATS, the emulator and (from startWorkers on) two
// workers in this process.
func inProcessSystem(ctx context.Context, tb testing.TB, runs int) (url string, startWorkers, stop func()) {
	// Each events.Watch is a consumer on the events stream: lift
	// nats-server's default limit of 1000 consumers per stream.
	url = startNATSConf(tb, "", "default_max_consumers: -1")
	emu := foundrytest.NewServer(foundrytest.Config{})
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = runs + 16
	up, err := foundry.New(foundry.Config{BaseURL: emu.BaseURL(), APIKey: "bench", HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		tb.Fatal(err)
	}
	wctx, stopWorkers := context.WithCancel(ctx)
	wg, wgctx := errgroup.WithContext(wctx)
	var conns []*nats.Conn
	stop = func() {
		stopWorkers()
		_ = wg.Wait()
		for _, nc := range conns {
			nc.Close()
		}
		up.CloseIdleConnections()
		emu.Close()
	}
	startWorkers = func() {
		for i := range 2 {
			nc, err := nats.Connect(url)
			if err != nil {
				tb.Fatal(err)
			}
			pub, err := nats.Connect(url)
			if err != nil {
				tb.Fatal(err)
			}
			conns = append(conns, nc, pub)
			w, err := consumer.New(nc, up, consumer.Config{
				WorkerID: fmt.Sprintf("bench-%d", i+1), Concurrency: runs/2 + 16, PublishConn: pub, CancelAuditDelay: -1,
			})
			if err != nil {
				tb.Fatal(err)
			}
			wg.Go(func() error { return w.Run(wgctx) })
		}
	}
	return url, startWorkers, stop
}

// compare queues the runs, attaches both watchers of each, starts the
// workers and compares the arrival times.
func compare(ctx context.Context, tb testing.TB, client *events.Client, watchConn *nats.Conn, base string, runs, tokens int, useWatch bool, startWorkers func()) latencyResult {
	// The runs are queued before any worker runs, every watcher attaches
	// (the SSE clients find the runs queued), and only then do the workers
	// start: every event is published to two attached watchers.
	ids := make([]string, runs)
	md := map[string]string{"emu_tokens": strconv.Itoa(tokens), "emu_token_ms": "50"}
	for i := range ids {
		ids[i] = events.NewRunID()
		if _, err := client.Submit(ctx, events.RunRequest{RunID: ids[i], Model: "bench", Input: json.RawMessage(`"go"`), Metadata: md}); err != nil {
			tb.Fatal(err)
		}
	}
	watcher, err := events.NewClient(watchConn, events.ClientConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	htr := http.DefaultTransport.(*http.Transport).Clone()
	htr.MaxIdleConnsPerHost = runs + 16
	hc := &http.Client{Transport: htr}
	defer hc.CloseIdleConnections()

	viaNATS := make([]arrivals, runs)
	viaSSE := make([]arrivals, runs)
	var g errgroup.Group
	var attached sync.WaitGroup
	attached.Add(2 * runs)
	for i, id := range ids {
		if useWatch {
			g.Go(func() error { return watchNATS(ctx, watcher, id, &viaNATS[i], attached.Done) })
		} else {
			g.Go(func() error { return subscribeNATS(ctx, watchConn, watcher.Names(), id, &viaNATS[i], attached.Done) })
		}
		g.Go(func() error { return watchSSE(ctx, hc, base, id, &viaSSE[i], attached.Done) })
	}
	attachStart := time.Now()
	attached.Wait()
	tb.Logf("%d watchers attached in %s", 2*runs, time.Since(attachStart).Round(time.Millisecond))
	startWorkers()
	if err := g.Wait(); err != nil {
		tb.Fatal(err)
	}

	var diffs []float64
	var first, last time.Time
	for i := range ids {
		n, s := &viaNATS[i], &viaSSE[i]
		if !n.ended || !s.ended || len(n.at) != len(s.at) {
			tb.Fatalf("run %s: NATS saw %d events (ended %v), SSE %d (ended %v)", ids[i], len(n.at)-1, n.ended, len(s.at)-1, s.ended)
		}
		since := n.attached
		if s.attached.After(since) {
			since = s.attached
		}
		for seq := 1; seq < len(n.at); seq++ {
			if n.times[seq].Before(since) {
				continue
			}
			diffs = append(diffs, float64(s.at[seq].Sub(n.at[seq]))/float64(time.Millisecond))
			if first.IsZero() || n.at[seq].Before(first) {
				first = n.at[seq]
			}
			if n.at[seq].After(last) {
				last = n.at[seq]
			}
		}
	}
	if len(diffs) == 0 {
		tb.Fatal("no event was seen by both watchers after they attached")
	}
	slices.Sort(diffs)
	q := func(p float64) float64 { return diffs[min(len(diffs)-1, int(p*float64(len(diffs))))] }
	return latencyResult{p50: q(0.50), p99: q(0.99), max: diffs[len(diffs)-1], samples: len(diffs), span: last.Sub(first)}
}

// subscribeNATS follows a run with a core NATS subscription on its event
// subject, until the terminal event.
func subscribeNATS(ctx context.Context, nc *nats.Conn, names events.Names, id string, a *arrivals, attached func()) error {
	a.attached = time.Now()
	ch := make(chan *nats.Msg, 4096)
	sub, err := nc.ChanSubscribe(names.EventSubject(id), ch)
	if err != nil {
		attached()
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.FlushWithContext(ctx); err != nil { // the server has the interest
		attached()
		return err
	}
	attached()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("subscription of %s: %w", id, ctx.Err())
		case msg := <-ch:
			now := time.Now()
			ev, err := events.DecodeRunEvent(msg.Data)
			if err != nil {
				return err
			}
			if uint64(len(a.at)) > ev.Seq && !a.at[ev.Seq].IsZero() {
				continue // a repeated publish
			}
			a.record(ev.Seq, now, ev.Time)
			if ev.Type.Terminal() {
				a.ended = true
				return nil
			}
		}
	}
}

func watchNATS(ctx context.Context, c *events.Client, id string, a *arrivals, attached func()) error {
	a.attached = time.Now()
	w := c.Watch(ctx, id, events.WatchOptions{NoHeartbeat: true})
	defer w.Close()
	attached()
	for {
		ev, err := w.Next(ctx)
		if errors.Is(err, io.EOF) {
			a.ended = true
			return nil
		}
		if err != nil {
			return fmt.Errorf("watch %s: %w", id, err)
		}
		a.record(ev.Seq, time.Now(), ev.Time)
	}
}

var sseBufs = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}

func watchSSE(ctx context.Context, hc *http.Client, base, id string, a *arrivals, attached func()) error {
	a.attached = time.Now()
	once := sync.OnceFunc(attached)
	defer once() // an error before the headers must not block the wait
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/runs/"+id+"/events", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("stream %s: %w", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("stream %s: HTTP %d", id, resp.StatusCode)
	}
	once() // the gateway sends the headers once its watch has started
	rd := sseBufs.Get().(*bufio.Reader)
	rd.Reset(resp.Body)
	defer sseBufs.Put(rd)
	var seq uint64
	var evTime time.Time
	var typ string
	for {
		line, err := rd.ReadSlice('\n')
		if errors.Is(err, io.EOF) {
			if !a.ended {
				return fmt.Errorf("stream %s: ended without a terminal event", id)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("stream %s: %w", id, err)
		}
		s := strings.TrimRight(string(line), "\n")
		switch {
		case s == "":
			if seq > 0 {
				a.record(seq, time.Now(), evTime)
				if events.EventType(typ).Terminal() {
					a.ended = true
				}
				seq = 0
			}
		case strings.HasPrefix(s, "id: "):
			seq, _ = strconv.ParseUint(s[4:], 10, 64)
		case strings.HasPrefix(s, "event: "):
			typ = s[7:]
		case strings.HasPrefix(s, "data: "):
			var ev struct {
				Time time.Time `json:"time"`
			}
			_ = json.Unmarshal([]byte(s[6:]), &ev)
			evTime = ev.Time
		}
	}
}

// processSystem runs NATS and the emulator in a `foundryq dev --workers 0`
// subprocess and, from startWorkers on, two `foundryq worker` subprocesses;
// all are stopped when the benchmark ends.
func processSystem(tb testing.TB, runs int) (url string, startWorkers func()) {
	tb.Helper()
	dir := tb.TempDir()
	bin := dir + "/foundryq"
	build := exec.Command("go", "build", "-o", bin, "github.com/foundryq/foundryq/cmd/foundryq")
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("build foundryq: %v\n%s", err, out)
	}
	ports := testkit.FreePorts(tb, 2)
	natsPort, emuPort := ports[0], ports[1]
	url = "nats://127.0.0.1:" + strconv.Itoa(natsPort)
	emuAddr := "127.0.0.1:" + strconv.Itoa(emuPort)
	startProcess(tb, "foundryq dev is running", bin, "dev", "--workers", "0", "--nats-port", strconv.Itoa(natsPort),
		"--emulator-addr", emuAddr, "--http-addr", "", "--gateway-addr", "", "--data-dir", dir+"/nats", "--log-level", "warn")
	startWorkers = func() {
		for i := range 2 {
			startProcess(tb, "worker started", bin, "worker", "--nats-url", url, "--foundry-endpoint", "http://"+emuAddr+"/openai/v1/",
				"--foundry-api-key", "bench", "--worker-id", fmt.Sprintf("bench-%d", i+1), "--concurrency", strconv.Itoa(runs/2+16),
				"--cancel-audit-delay", "-1s", "--http-addr", "", "--log-level", "info")
		}
	}
	return url, startWorkers
}

// startProcess starts a subprocess, waits until its output says ready, and
// stops it (SIGTERM, then SIGKILL after 20 s) when the benchmark ends.
func startProcess(tb testing.TB, ready, bin string, args ...string) {
	tb.Helper()
	var out testkit.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			tb.Errorf("%s %s did not stop on SIGTERM", bin, args[0])
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), ready) {
		select {
		case err := <-done:
			tb.Fatalf("%s %s exited: %v\n%s", bin, args[0], err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s %s not ready after 30s:\n%s", bin, args[0], out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
