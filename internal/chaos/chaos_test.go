package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/devstack"
	"github.com/foundryq/foundryq/internal/natsembed"
)

// chaosModes are the FOUNDRYQ_CHAOS values: how long faults are injected
// and the fewest runs submitted meanwhile.
var chaosModes = map[string]struct {
	duration time.Duration
	minRuns  int
}{
	"short": {50 * time.Second, 200},
	"long":  {10 * time.Minute, 2000},
}

// chaosAckWait is the job lease of the chaos run: a SIGSTOPped worker
// loses its runs after it.
const chaosAckWait = 3 * time.Second

// foundryqBin is the foundryq binary TestMain builds when FOUNDRYQ_CHAOS is
// set.
var foundryqBin string

// TestChaos mixes every fault at once over hundreds of runs: foundryq worker
// processes SIGKILLed, SIGSTOPped past their lease then SIGCONTed, and
// SIGTERMed (hand-offs); NATS restarted; upstream 429s (a throttle, and
// transient ones per run), transient and permanent 5xx on create, stream
// cuts, slow creates; cancels at random moments. Then every run is
// audited and the table printed; any lost or repeated token, extra
// upstream response, run without a terminal event, token or tool call
// after a cancel, or malformed event stream fails it.
//
//	FOUNDRYQ_CHAOS=short go test -race -count=1 -v -run Chaos ./internal/chaos/
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
	s, err := devstack.Start(t.Context(), devstack.Config{
		NATS:     natsembed.Config{StoreDir: t.TempDir()},
		Connect:  reconnecting,
		Emulator: foundrytest.Config{APIKey: apiKey},
		Worker:   consumer.Config{Provision: consumer.ProvisionConfig{AckWait: chaosAckWait}},
		Client:   events.ClientConfig{CancelTimeout: 30 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("stop the stack: %v", err)
		}
	})
	js, err := jetstream.New(s.Conn)
	if err != nil {
		t.Fatal(err)
	}
	a := NewAuditor(js, s.Client.Names(), s.Emulator)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("FOUNDRYQ_CHAOS_SEED"); v != "" {
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("FOUNDRYQ_CHAOS_SEED=%q: %v", v, err)
		}
	}
	t.Logf("seed %d (FOUNDRYQ_CHAOS_SEED replays the same requests and faults; their timing differs)", seed)
	fleet := &fleet{t: t, bin: foundryqBin, logDir: logDir, rng: rand.New(rand.NewPCG(seed, 3)), args: []string{
		"worker", "--nats-url", s.NATS.ClientURL(), "--foundry-endpoint", s.Emulator.BaseURL(),
		"--http-addr", "", "--ack-wait", chaosAckWait.String(), "--retry-delay", "200ms",
		"--shutdown-timeout", "5s", "--cancel-audit-delay", "-1s", "--log-level", "warn",
	}, env: append(os.Environ(), "FOUNDRY_API_KEY="+apiKey)}
	t.Cleanup(fleet.stopAll)
	for range 3 {
		fleet.start()
	}

	ctx, cancel := context.WithTimeout(t.Context(), mode.duration+5*time.Minute)
	defer cancel()

	// Runs and cancels, until the end of the fault period and at least
	// minRuns runs.
	var wg sync.WaitGroup
	faultsEnd := time.Now().Add(mode.duration)
	interval := mode.duration / time.Duration(mode.minRuns+mode.minRuns/4)
	submitted := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(seed, 1))
		for i := 0; time.Now().Before(faultsEnd) || i < mode.minRuns; i++ {
			id := fmt.Sprintf("chaos-%04d", i)
			req := chaosRequest(id, r)
			if err := submit(ctx, s.Client, req); err != nil {
				t.Errorf("submit %s: %v", id, err)
				return
			}
			a.Submitted(id)
			submitted++
			if r.IntN(5) == 0 { // a fifth of the runs are cancelled at a random moment
				delay := time.Duration(r.IntN(3000)) * time.Millisecond
				wg.Add(1)
				go func() {
					defer wg.Done()
					cancelLater(ctx, t, s.Client, a, id, delay)
				}()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval):
			}
		}
	}()

	// Faults.
	faults := map[string]int{}
	fr := rand.New(rand.NewPCG(seed, 2))
	for time.Now().Before(faultsEnd) {
		switch k := fr.IntN(6); k {
		case 0:
			faults["worker SIGKILL"]++
			fleet.kill()
			fleet.start()
		case 1:
			faults["worker SIGSTOP past the lease, SIGCONT"]++
			fleet.pause(chaosAckWait + time.Duration(500+fr.IntN(2000))*time.Millisecond)
		case 2:
			faults["worker SIGTERM (hand-off)"]++
			fleet.term()
			fleet.start()
		case 3:
			faults["NATS restart"]++
			s.NATS.Stop()
			time.Sleep(time.Duration(200+fr.IntN(1500)) * time.Millisecond) // the outage
			if err := s.NATS.Restart(); err != nil {
				t.Fatalf("restart NATS: %v", err)
			}
		case 4:
			faults["upstream throttle (429 on every create)"]++
			s.Emulator.Throttle(time.Duration(500+fr.IntN(2000))*time.Millisecond, 500*time.Millisecond)
		case 5:
			faults["calm"]++
		}
		time.Sleep(time.Duration(1000+fr.IntN(2000)) * time.Millisecond) // between faults
	}
	wg.Wait()
	t.Logf("faults: %v; %d runs submitted", faults, submitted)
	if err := a.WaitEnded(ctx); err != nil {
		t.Error(err)
	}
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
// upstream fault of the emulator's.
func chaosRequest(id string, r *rand.Rand) events.RunRequest {
	md := map[string]string{
		"emu_tokens":   strconv.Itoa(10 + r.IntN(50)),
		"emu_token_ms": strconv.Itoa(10 + r.IntN(40)),
	}
	var tools []json.RawMessage
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
	}
	return events.RunRequest{RunID: id, Model: "gpt-chaos", Input: json.RawMessage(`"chaos"`), Metadata: md, Tools: tools}
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

// fleet is the foundryq worker processes of the chaos run.
type fleet struct {
	t      *testing.T
	bin    string
	args   []string
	env    []string
	logDir string
	rng    *rand.Rand // picks the worker a fault hits (used by the fault loop only)

	mu    sync.Mutex
	n     int // workers started so far
	procs []*exec.Cmd
	waits []chan error
}

// start starts one more worker process.
func (f *fleet) start() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	id := fmt.Sprintf("chaos-w%d", f.n)
	log, err := os.Create(filepath.Join(f.logDir, id+".log"))
	if err != nil {
		f.t.Fatal(err)
	}
	cmd := exec.Command(f.bin, append(append([]string{}, f.args...), "--worker-id", id)...)
	cmd.Env, cmd.Stdout, cmd.Stderr = f.env, log, log
	if err := cmd.Start(); err != nil {
		f.t.Fatalf("start worker %s: %v", id, err)
	}
	done := make(chan error, 1)
	go func() {
		done <- cmd.Wait()
		_ = log.Close()
	}()
	f.procs = append(f.procs, cmd)
	f.waits = append(f.waits, done)
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
