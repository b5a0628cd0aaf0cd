package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

// TestCancelPastAFrozenWorker freezes one of two worker processes
// (SIGSTOP) and cancels runs through the Go client: a cancel the queue
// group hands to the frozen worker is still applied by the owner (it
// follows the stored cancel records) within about a second, and the client
// answers within its one timeout, without an error; a cancel of a run the
// frozen worker owns has its response cancelled upstream within a few
// seconds by the worker that answered (no owner acknowledged its notice),
// and the run ends run.cancelled once its lease lapses. It runs with the
// chaos run (FOUNDRYQ_CHAOS=short or long), which builds the binary.
func TestCancelPastAFrozenWorker(t *testing.T) {
	if _, ok := chaosModes[os.Getenv("FOUNDRYQ_CHAOS")]; !ok {
		t.Skip("runs worker processes: set FOUNDRYQ_CHAOS=short (with the chaos run)")
	}
	if foundryqBin == "" {
		t.Fatal("TestMain did not build the foundryq binary")
	}
	const apiKey, ackWait = "frozen-key", 20 * time.Second
	s := devstack.StartT(t, devstack.Config{
		NATS:     natsembed.Config{StoreDir: t.TempDir()},
		Connect:  reconnecting,
		Emulator: foundrytest.Config{APIKey: apiKey},
		Worker:   consumer.Config{Provision: consumer.ProvisionConfig{AckWait: ackWait}},
		Client:   events.ClientConfig{CancelTimeout: 5 * time.Second},
	})
	fleet := &fleet{t: t, bin: foundryqBin, logDir: t.TempDir(), url: s.NATS.ClientURL(),
		args: []string{"worker", "--foundry-endpoint", s.Emulator.BaseURL(), "--http-addr", "",
			"--ack-wait", ackWait.String(), "--shutdown-timeout", "5s", "--cancel-audit-delay", "-1s", "--log-level", "warn"},
		env: append(os.Environ(), "FOUNDRY_API_KEY="+apiKey)}
	procs := map[string]*fleetProc{}
	for _, id := range []string{"frozen-a", "frozen-b"} {
		cmd, done := fleet.spawn(id, fleet.url)
		procs[id] = &fleetProc{cmd: cmd, done: done}
	}
	t.Cleanup(func() {
		for _, p := range procs {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			fleet.reap(p.cmd, p.done, 30*time.Second)
		}
	})
	js, err := jetstream.New(s.Conn)
	if err != nil {
		t.Fatal(err)
	}
	a := NewAuditor(js, s.Client.Names(), s.Emulator)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()

	// Runs until each worker owns two.
	owned := map[string][]string{}
	for i := 0; len(owned["frozen-a"]) < 2 || len(owned["frozen-b"]) < 2; i++ {
		if i == 40 {
			t.Fatalf("40 runs and still %v", owned)
		}
		id := fmt.Sprintf("frozen-%02d", i)
		req := events.RunRequest{RunID: id, Model: "gpt-test", Input: json.RawMessage(`"hi"`),
			Metadata: map[string]string{"emu_tokens": "6000", "emu_token_ms": "10"}}
		if err := submit(ctx, s.Client, req); err != nil {
			t.Fatal(err)
		}
		a.Submitted(id)
		var st events.RunState
		testkit.Eventually(t, 30*time.Second, "an owner of "+id, func() bool {
			st, _, err = s.Client.State(ctx, id)
			return err == nil && st.Owner != "" && st.ResponseID != ""
		})
		owned[st.Owner] = append(owned[st.Owner], id)
	}
	_ = procs["frozen-a"].cmd.Process.Signal(syscall.SIGSTOP)
	frozenAt := time.Now()

	// Runs the live worker owns: about half of the requests go to the
	// frozen worker's queue subscription.
	for _, id := range owned["frozen-b"] {
		start := time.Now()
		reply, err := s.Client.Cancel(ctx, id, "frozen test")
		took := time.Since(start)
		if err != nil || (reply.Result != events.CancelCancelling && reply.Result != events.CancelAlreadyFinished) {
			t.Fatalf("cancel %s: %+v, %v; want cancelling and no error", id, reply, err)
		}
		a.CancelAcknowledged(id, reply)
		testkit.Eventually(t, 10*time.Second, id+" to end", func() bool {
			st, _, err := s.Client.State(ctx, id)
			return err == nil && st.Finished()
		})
		t.Logf("%s: client answered %s in %s, run ended %s after the cancel", id, reply.Result, took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		if ended := time.Since(start); ended > took+3*time.Second {
			t.Errorf("%s ended %s after its cancel, want about a second after the answer", id, ended)
		}
	}
	// Runs the frozen worker owns: the response is cancelled upstream by
	// the live worker that answered (no owner acknowledged its notice), in
	// seconds; if every request of a cancel went to the frozen worker's
	// queue subscription nobody answered it, and the cancel on record is
	// applied by the worker that takes the run when the lease lapses.
	for _, id := range owned["frozen-a"] {
		start := time.Now()
		reply, err := s.Client.Cancel(ctx, id, "frozen owner")
		if err != nil || reply.Result != events.CancelCancelling {
			t.Fatalf("cancel %s: %+v, %v; want cancelling and no error", id, reply, err)
		}
		a.CancelAcknowledged(id, reply)
		testkit.Eventually(t, ackWait+15*time.Second, "the response of "+id+" to be cancelled upstream", func() bool {
			recs := s.Emulator.Records(id)
			return len(recs) == 1 && recs[0].Status == "cancelled"
		})
		if took := s.Emulator.Records(id)[0].CancelledAt.Sub(start); took > ackWait+10*time.Second {
			t.Errorf("%s: the frozen owner's response was cancelled %s after the cancel, want within its lease", id, took)
		} else {
			t.Logf("%s: frozen owner's response cancelled upstream %s after the cancel", id, took.Round(time.Millisecond))
		}
	}
	// Past the frozen worker's lease the other one ends its runs; then it
	// comes back, a zombie, and must change nothing.
	if err := a.WaitEnded(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("every run ended %s after the freeze", time.Since(frozenAt).Round(time.Millisecond))
	_ = procs["frozen-a"].cmd.Process.Signal(syscall.SIGCONT)
	time.Sleep(2 * time.Second) // let the zombie try its last writes before the audit
	rep, err := a.Audit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Table())
	if !rep.OK() {
		t.Fatalf("audit: a promise broke: %s", strings.Join(rep.Problems, "\n"))
	}
	for _, ids := range owned {
		for _, id := range ids {
			recs := s.Emulator.Records(id)
			if len(recs) != 1 || recs[0].Status != "cancelled" || recs[0].TokensAfterCancel != 0 {
				t.Errorf("%s: emulator %+v, want one response, cancelled, no token after", id, recs)
			}
		}
	}
}

// fleetProc is one worker process of a test that signals it by name.
type fleetProc struct {
	cmd  *exec.Cmd
	done chan error
}
