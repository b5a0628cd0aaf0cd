package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
)

// chaosModes are the FOUNDRYQ_CHAOS values: how long faults are injected
// and the fewest runs submitted meanwhile.
var chaosModes = map[string]struct {
	duration time.Duration
	minRuns  int
	maxStore int64 // the embedded NATS server's JetStream file store cap
}{
	"short": {50 * time.Second, 200, 64 << 20},
	"long":  {10 * time.Minute, 2000, 256 << 20},
}

// chaosAckWait is the job lease of the chaos run: a SIGSTOPped worker
// loses its runs after it.
const chaosAckWait = 3 * time.Second

// Worker settings of the chaos run, short enough that what they bound
// happens within it.
const (
	chaosCancelConfirm = 20 * time.Second // --cancel-confirm-timeout: the bound on retrying Foundry's cancel
	chaosQueued        = 5 * time.Second  // --queued-timeout
	chaosStoreFull     = 5 * time.Second  // --store-full-timeout
	chaosStreamIdle    = 3 * time.Second  // --foundry-stream-idle-timeout
)

// The chaos run's scheduling: chaosRequest's runs go to three fairness
// keys at three priorities, and flood submits bursts of short runs, mostly
// low, to a fourth key. Each worker runs few runs at once, so that slots
// are scarce during a burst and the priorities decide which runs wait;
// two keys are capped, small enough that the caps bind (flood's in every
// burst, tenant-b's when its runs bunch up).
const (
	chaosConcurrency = 4           // --concurrency of each worker
	chaosStartOrder  = time.Second // the priority rule's tolerance: LanePoll (100ms) and a worker's round, on a loaded machine
	chaosFloodBurst  = 24          // the fewest runs in one burst of the flood
)

// chaosCaps are the workers' --cap.
var chaosCaps = map[string]int{"flood": 6, "tenant-b": 4}

// chaosDrain bounds the wait for every run to end once the faults are
// over: the longest run (a timeout, a cancel Foundry never confirms)
// ends well within it.
const chaosDrain = 75 * time.Second

// fillSubject is the subject of the filler stream that fills JetStream's
// store (not one of foundryq's).
const fillSubject = "chaosfill.x"

// foundryqBin is the foundryq binary TestMain builds when FOUNDRYQ_CHAOS is
// set.
var foundryqBin string

// TestChaos mixes every fault at once over hundreds of runs: foundryq worker
// processes SIGKILLed, SIGSTOPped past their lease then SIGCONTed, and
// SIGTERMed (hand-offs); NATS restarted; upstream 429s (a throttle, and
// transient ones per run), transient and permanent 5xx on create, stream
// cuts, slow creates; cancels at random moments; Foundry's cancel failing
// or hanging for a few seconds (for every response, and per run); a worker
// cut off from NATS (a black hole) past its lease while cancels arrive;
// JetStream's store filled past the workers' store-full timeout, then
// freed; upstream stalls (a silent stream, a response stuck queued); runs
// with a short timeout_seconds whose stream would outlast it. The runs
// carry three fairness keys and the three priorities, and a fourth key
// floods the queue in bursts; the workers run few runs each, so that runs
// wait for a slot, and two keys are capped. Each kind of fault comes once,
// in a random order (even if that outlasts the fault period; a kind that
// did not run fails the test), then they come at random while the period
// lasts. Then every run is audited and the table printed; any lost or
// repeated token, extra upstream response, run without a terminal event,
// token or tool call after a cancel, malformed event stream, cancelled run
// whose response ran on unreported, run whose terminal event came too long
// after its timeout, response cancelled upstream too long after its run's
// deadline, run started out of priority order beyond the bound, or capped
// key with more runs running than its cap fails it.
//
//	FOUNDRYQ_CHAOS=short go test -race -count=1 -v -run Chaos ./devstack/chaos/
func TestChaos(t *testing.T) {
	mode, ok := chaosModes[os.Getenv("FOUNDRYQ_CHAOS")]
	if !ok {
		t.Skip("the chaos run takes a minute or more: set FOUNDRYQ_CHAOS=short (about a minute) or FOUNDRYQ_CHAOS=long (about ten)")
	}
	if foundryqBin == "" {
		t.Fatal("TestMain did not build the foundryq binary")
	}
	logDir := t.TempDir()
	if dir := os.Getenv("FOUNDRYQ_CHAOS_DUMP"); dir != "" {
		logDir = dir
	}
	const apiKey = "chaos-key"
	s := devstack.StartT(t, devstack.Config{
		NATS:     natsembed.Config{StoreDir: t.TempDir(), MaxStore: mode.maxStore},
		Connect:  reconnecting,
		Emulator: foundrytest.Config{APIKey: apiKey},
		Worker:   consumer.Config{Provision: consumer.ProvisionConfig{AckWait: chaosAckWait}},
		Client:   events.ClientConfig{CancelTimeout: 30 * time.Second},
	})
	js, err := jetstream.New(s.Conn)
	if err != nil {
		t.Fatal(err)
	}
	a := NewAuditor(js, s.Client.Names(), s.Emulator)
	a.SetBounds(Bounds{Terminal: chaosAckWait + 5*time.Second, UpstreamCancel: 3 * time.Second, CancelConfirm: chaosCancelConfirm,
		StartOrder: chaosStartOrder, PriorityAge: consumer.DefaultPriorityAge, Redelivery: chaosAckWait + 2*time.Second, Caps: chaosCaps})
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("FOUNDRYQ_CHAOS_SEED"); v != "" {
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("FOUNDRYQ_CHAOS_SEED=%q: %v", v, err)
		}
	}
	t.Logf("seed %d (FOUNDRYQ_CHAOS_SEED replays the same requests and faults; their timing differs)", seed)
	// One worker reaches NATS through a proxy that can cut it off.
	proxy, err := NewProxy(strings.TrimPrefix(s.NATS.ClientURL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{
		"worker", "--foundry-endpoint", s.Emulator.BaseURL(),
		"--http-addr", "", "--ack-wait", chaosAckWait.String(), "--retry-delay", "200ms",
		"--shutdown-timeout", "5s", "--cancel-audit-delay", "-1s", "--log-level", "warn",
		"--cancel-confirm-timeout", chaosCancelConfirm.String(), "--queued-timeout", chaosQueued.String(),
		"--store-full-timeout", chaosStoreFull.String(), "--foundry-stream-idle-timeout", chaosStreamIdle.String(),
		"--concurrency", strconv.Itoa(chaosConcurrency), "--cap", capsFlag(chaosCaps),
	}
	fleet := &fleet{t: t, bin: foundryqBin, logDir: logDir, rng: rand.New(rand.NewPCG(seed, 3)),
		url: s.NATS.ClientURL(), args: args, env: append(os.Environ(), "FOUNDRY_API_KEY="+apiKey)}
	t.Cleanup(func() {
		proxy.Resume() // a worker cut off when the test stopped hands its runs off too
		fleet.stopAll()
		_ = proxy.Close()
	})
	for range 3 {
		fleet.start()
	}
	cutOff := fleet.startProxied("nats://" + proxy.Addr())
	faults := newFaults(t, s, js, a, proxy, cutOff)
	faults.createFiller(t.Context())

	ctx, cancel := context.WithTimeout(t.Context(), mode.duration+5*time.Minute)
	defer cancel()

	// Runs and cancels, until the end of the fault period and at least
	// minRuns runs.
	var wg sync.WaitGroup
	faults.cancel = func(id string, delay time.Duration) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cancelLater(ctx, t, s.Client, a, id, delay)
		}()
	}
	faultsEnd := time.Now().Add(mode.duration)
	var faultsDone atomic.Bool // runs are submitted while faults are injected
	interval := mode.duration / time.Duration(mode.minRuns+mode.minRuns/4)
	submitted, flooded := 0, 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		// The last burst well before the end: the flood's cap drains it slowly.
		flooded = flood(ctx, t, s.Client, a, rand.New(rand.NewPCG(seed, 4)), faultsEnd.Add(-10*time.Second))
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(seed, 1))
		for i := 0; time.Now().Before(faultsEnd) || !faultsDone.Load() || i < mode.minRuns; i++ {
			id := fmt.Sprintf("chaos-%04d", i)
			// A run that may end only when Foundry's cancel has failed for
			// the whole cancel bound is not started near the end.
			long := time.Until(faultsEnd) > chaosCancelConfirm
			req, plan := chaosRequest(id, r, long)
			if err := submit(ctx, s.Client, req); err != nil {
				t.Errorf("submit %s: %v", id, err)
				return
			}
			plan.SubmittedAt = time.Now()
			a.Planned(id, plan)
			faults.submitted(id)
			submitted++
			if plan.Asks {
				wg.Add(1)
				go func() {
					defer wg.Done()
					answerLater(ctx, s.Client, id, time.Duration(r2ms(id))*time.Millisecond)
				}()
			}
			switch {
			case plan.CancelFault > 0: // a cancel fault is for a run that is cancelled
				faults.cancel(id, time.Duration(200+r.IntN(1500))*time.Millisecond)
			case r.IntN(5) == 0: // a fifth of the others are cancelled at a random moment
				faults.cancel(id, time.Duration(r.IntN(3000))*time.Millisecond)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval):
			}
		}
	}()

	// Faults: each kind once, in a random order (even past the fault
	// period, so that every kind runs), then at random while the period
	// lasts.
	fr := rand.New(rand.NewPCG(seed, 2))
	order := fr.Perm(faultKinds)
	for len(order) > 0 || time.Now().Before(faultsEnd) {
		k := fr.IntN(faultKinds)
		if len(order) > 0 {
			k, order = order[0], order[1:]
		}
		faults.inject(ctx, k, fleet, fr)
		time.Sleep(time.Duration(1000+fr.IntN(2000)) * time.Millisecond) // between faults
	}
	faultsDone.Store(true)
	faultsOver := time.Now()
	wg.Wait()
	t.Logf("faults: %s; %d runs submitted, and %d of the flood", faults, submitted, flooded)
	if ran := len(faults.ran); ran < faultKinds {
		t.Errorf("%d of the %d fault kinds were injected (%s)", ran, faultKinds, faults)
	}
	wctx, wcancel := context.WithTimeout(ctx, chaosDrain)
	defer wcancel()
	if err := a.WaitEnded(wctx); err != nil {
		t.Error(err)
		diagnose(t, s, js, a)
	}
	t.Logf("every run ended %s after the faults", time.Since(faultsOver).Round(time.Second))
	rep, err := a.Audit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("chaos %s, %s of faults:\n%s\nfailed runs:\n%s", os.Getenv("FOUNDRYQ_CHAOS"), mode.duration, rep.Table(), strings.Join(rep.Failures, "\n"))
	if !rep.OK() {
		t.Errorf("promises broken:\n%s\n(worker logs in %s)", strings.Join(rep.Problems, "\n"), logDir)
	}
	if rep.Submitted < mode.minRuns {
		t.Errorf("%d runs audited, want at least %d", rep.Submitted, mode.minRuns)
	}
}

// chaosRequest is a streaming run with a random length and, for some, an
// upstream fault of the emulator's, a short timeout, or a Foundry cancel
// that fails or hangs for a while; with the plan the Auditor checks it
// against (all but SubmittedAt). long: the run may take the whole cancel
// bound.
func chaosRequest(id string, r *rand.Rand, long bool) (events.RunRequest, RunPlan) {
	md := map[string]string{
		"emu_tokens":   strconv.Itoa(10 + r.IntN(50)),
		"emu_token_ms": strconv.Itoa(10 + r.IntN(40)),
	}
	var tools []json.RawMessage
	asks := false
	switch r.IntN(10) {
	case 0: // transient 429 on create
		md["emu_create_status"], md["emu_create_status_times"] = "429", strconv.Itoa(1+r.IntN(2))
	case 1: // transient 5xx on create
		md["emu_create_status"], md["emu_create_status_times"] = []string{"500", "503"}[r.IntN(2)], "1"
	case 2: // stream cut mid-way; the response goes on upstream
		md["emu_drop_after"] = strconv.Itoa(2 + r.IntN(20))
	case 3: // slow create: response.created held back
		md["emu_created_ms"], md["emu_keepalive_ms"] = strconv.Itoa(300+r.IntN(2000)), "200"
	case 4: // an MCP tool call before the text
		md["emu_tool_ms"] = strconv.Itoa(100 + r.IntN(500))
		tools = []json.RawMessage{json.RawMessage(`{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp","require_approval":"never"}`)}
	case 5: // a permanent 5xx on create: the failure budget runs out
		if r.IntN(4) == 0 {
			md["emu_create_status"] = "500"
		}
	case 6: // a run that asks: its MCP call waits for approval, then runs in a second step
		asks = true
		md["emu_tool_ms"] = strconv.Itoa(100 + r.IntN(500))
		tools = []json.RawMessage{json.RawMessage(`{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp"}`)}
	}
	fair := chaosFairness(r)
	req := events.RunRequest{RunID: id, Model: "gpt-chaos", Input: json.RawMessage(`"chaos"`), Metadata: md, Tools: tools,
		FairnessKey: fair.Key, Priority: fair.Priority}
	plan := RunPlan{Asks: asks, Fairness: fair}
	generating := func(d time.Duration) { // a stream that lasts about d
		md["emu_token_ms"] = "50"
		md["emu_tokens"] = strconv.Itoa(int(d / (50 * time.Millisecond)))
	}
	switch r.IntN(20) {
	case 0, 1, 2: // a short timeout, and a stream that would outlast it
		t := 5 + r.IntN(6)
		req.TimeoutSeconds, plan.Timeout = t, time.Duration(t)*time.Second
		generating(plan.Timeout + 10*time.Second)
	case 3, 4: // Foundry's cancel fails for a while (the run is cancelled)
		d := time.Duration(1000+r.IntN(5000)) * time.Millisecond
		if long && r.IntN(3) == 0 { // longer than the cancel bound: unconfirmed
			d = chaosCancelConfirm + 5*time.Second
		}
		md["emu_cancel_fail_ms"], plan.CancelFault = strconv.Itoa(int(d.Milliseconds())), d
		generating(d + 5*time.Second)
	case 5: // Foundry's cancel hangs for a while (the run is cancelled)
		d := time.Duration(1000+r.IntN(5000)) * time.Millisecond
		md["emu_cancel_hang_ms"], plan.CancelFault = strconv.Itoa(int(d.Milliseconds())), d
		generating(d + 5*time.Second)
	case 6: // the stream goes silent: the idle timeout ends the run upstream_stalled
		md["emu_silent_after"] = strconv.Itoa(2 + r.IntN(10))
	case 7: // the response stays queued past the queued timeout: upstream_queued
		md["emu_queued_ms"] = strconv.Itoa(int((chaosQueued + time.Duration(1000+r.IntN(3000))*time.Millisecond).Milliseconds()))
		md["emu_keepalive_ms"] = "1000" // a queued response is not a silent one
	}
	return req, plan
}

// chaosFairness draws a chaosRequest's fairness key (tenant-a half the
// time, tenant-c 30%, tenant-b 20%) and priority (high 20%, normal 50%,
// low 30%).
func chaosFairness(r *rand.Rand) events.Fairness {
	f := events.Fairness{Key: "tenant-a", Priority: events.PriorityNormal}
	switch k := r.IntN(10); {
	case k < 2:
		f.Key = "tenant-b"
	case k < 5:
		f.Key = "tenant-c"
	}
	switch p := r.IntN(10); {
	case p < 2:
		f.Priority = events.PriorityHigh
	case p < 5:
		f.Priority = events.PriorityLow
	}
	return f
}

// flood submits bursts of the flooding key's runs, each burst at once and
// larger than the key's cap, every 6-12 s until end; it returns how many
// runs it submitted.
func flood(ctx context.Context, t *testing.T, c *events.Client, a *Auditor, r *rand.Rand, end time.Time) int {
	n := 0
	for {
		select {
		case <-ctx.Done():
			return n
		case <-time.After(time.Duration(6000+r.IntN(6000)) * time.Millisecond):
		}
		if time.Now().After(end) {
			return n
		}
		for range chaosFloodBurst + r.IntN(chaosFloodBurst/2) {
			id := fmt.Sprintf("flood-%04d", n)
			req, plan := floodRequest(id, r)
			if err := submit(ctx, c, req); err != nil {
				t.Errorf("submit %s: %v", id, err)
				return n
			}
			plan.SubmittedAt = time.Now()
			a.Planned(id, plan)
			n++
		}
	}
}

// floodRequest is a run of the flood: plain, under a second upstream, low
// priority (a quarter normal).
func floodRequest(id string, r *rand.Rand) (events.RunRequest, RunPlan) {
	fair := events.Fairness{Key: "flood", Priority: events.PriorityLow}
	if r.IntN(4) == 0 {
		fair.Priority = events.PriorityNormal
	}
	md := map[string]string{"emu_tokens": strconv.Itoa(5 + r.IntN(6)), "emu_token_ms": "100"}
	req := events.RunRequest{RunID: id, Model: "gpt-chaos", Input: json.RawMessage(`"flood"`), Metadata: md,
		FairnessKey: fair.Key, Priority: fair.Priority}
	return req, RunPlan{Fairness: fair}
}

// capsFlag renders caps as --cap's KEY=N list.
func capsFlag(caps map[string]int) string {
	parts := make([]string, 0, len(caps))
	for _, k := range slices.Sorted(maps.Keys(caps)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, caps[k]))
	}
	return strings.Join(parts, ",")
}

// cancelLater cancels runID after delay and tells the Auditor what the
// workers acknowledged.
func cancelLater(ctx context.Context, t *testing.T, c *events.Client, a *Auditor, runID string, delay time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(delay):
	}
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		reply, err := c.Cancel(cctx, runID, "chaos")
		cancel()
		if err == nil && reply.Error == "" {
			a.CancelAcknowledged(runID, reply)
			return
		}
		time.Sleep(200 * time.Millisecond) // NATS or the answering worker went away: ask again
	}
}

// answerLater follows runID and approves everything it asks, delay after
// it asks, until the run ends; answers that do not reach a worker (NATS or
// the answering worker went away) are sent again.
func answerLater(ctx context.Context, c *events.Client, runID string, delay time.Duration) {
	for ctx.Err() == nil {
		w := c.Watch(ctx, runID, events.WatchOptions{NoHeartbeat: true})
		for {
			ev, err := w.Next(ctx)
			if err != nil {
				w.Close()
				if errors.Is(err, io.EOF) {
					return // the run ended
				}
				break // watch again from the start
			}
			if ev.Type != events.TypeInputRequired {
				continue
			}
			select {
			case <-ctx.Done():
			case <-time.After(delay):
			}
			for _, it := range ev.Items {
				for ctx.Err() == nil {
					actx, cancel := context.WithTimeout(ctx, 30*time.Second)
					_, err := c.Approve(actx, runID, it.ID, true, "chaos")
					cancel()
					if err == nil {
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
			}
		}
	}
}

// r2ms is a delay of 0-2 s before an answer, fixed by the run id.
func r2ms(id string) int {
	h := 0
	for _, c := range id {
		h = h*31 + int(c)
	}
	return (h%2000 + 2000) % 2000
}

// fleet is the foundryq worker processes of the chaos run.
type fleet struct {
	t      *testing.T
	bin    string
	url    string // NATS
	args   []string
	env    []string
	logDir string
	rng    *rand.Rand // picks the worker a fault hits (used by the fault loop only)

	mu      sync.Mutex
	n       int // workers started so far
	procs   []*exec.Cmd
	waits   []chan error
	proxied *exec.Cmd // the worker that reaches NATS through the Proxy; no signal fault hits it
	pwait   chan error
}

// start starts one more worker process.
func (f *fleet) start() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	cmd, done := f.spawn(fmt.Sprintf("chaos-w%d", f.n), f.url)
	f.procs = append(f.procs, cmd)
	f.waits = append(f.waits, done)
}

// startProxied starts the worker that reaches NATS at url (the Proxy) and
// returns its id.
func (f *fleet) startProxied(url string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	const id = "chaos-cut1"
	f.proxied, f.pwait = f.spawn(id, url)
	return id
}

// spawn starts a worker process with id, connecting to NATS at url.
func (f *fleet) spawn(id, url string) (*exec.Cmd, chan error) {
	log, err := os.Create(filepath.Join(f.logDir, id+".log"))
	if err != nil {
		f.t.Fatal(err)
	}
	cmd := exec.Command(f.bin, append(append([]string{}, f.args...), "--nats-url", url, "--worker-id", id)...)
	cmd.Env, cmd.Stdout, cmd.Stderr = f.env, log, log
	if err := cmd.Start(); err != nil {
		f.t.Fatalf("start worker %s: %v", id, err)
	}
	done := make(chan error, 1)
	go func() {
		done <- cmd.Wait()
		_ = log.Close()
	}()
	return cmd, done
}

// take removes a random running worker from the fleet.
func (f *fleet) take() (*exec.Cmd, chan error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.rng.IntN(len(f.procs))
	cmd, done := f.procs[i], f.waits[i]
	f.procs = append(f.procs[:i], f.procs[i+1:]...)
	f.waits = append(f.waits[:i], f.waits[i+1:]...)
	return cmd, done
}

// kill SIGKILLs a random worker.
func (f *fleet) kill() {
	cmd, done := f.take()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	f.reap(cmd, done, 10*time.Second)
}

// term SIGTERMs a random worker: it hands its runs off and exits.
func (f *fleet) term() {
	cmd, done := f.take()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	f.reap(cmd, done, 30*time.Second)
}

// pause SIGSTOPs a random worker for d, then SIGCONTs it.
func (f *fleet) pause(d time.Duration) {
	f.mu.Lock()
	cmd := f.procs[f.rng.IntN(len(f.procs))]
	f.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(d) // how long the process stays frozen
	_ = cmd.Process.Signal(syscall.SIGCONT)
}

func (f *fleet) reap(cmd *exec.Cmd, done chan error, limit time.Duration) {
	select {
	case <-done:
	case <-time.After(limit):
		f.t.Errorf("worker pid %d did not exit within %s; killing it", cmd.Process.Pid, limit)
		_ = cmd.Process.Kill()
		<-done
	}
}

// stopAll SIGTERMs every worker and waits for it.
func (f *fleet) stopAll() {
	f.mu.Lock()
	cmd, done := f.proxied, f.pwait
	f.proxied = nil
	f.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		f.reap(cmd, done, 30*time.Second)
	}
	for {
		f.mu.Lock()
		n := len(f.procs)
		f.mu.Unlock()
		if n == 0 {
			return
		}
		f.term()
	}
}
