package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/retry"
	"github.com/foundryq/foundryq/internal/testkit"
)

// reconnecting are the options of every connection in a test whose servers
// go away for a while.
var reconnecting = []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond), nats.ReconnectJitter(0, 0)}

// On a three-node JetStream cluster with R3 streams and bucket, two
// workers run streaming runs while the leader of a stream loses its node
// mid-stream (the node is killed, a new leader is elected, the node comes
// back). Every run must complete with exactly one terminal event, seqs
// 1..n, the emulator's exact text and one upstream response, and the
// watchers that followed each run live must have seen every event once, in
// order, without a gap.
func TestClusterLeaderLoss(t *testing.T) {
	names, _ := events.NewNames("")
	for _, tc := range []struct {
		name  string
		kills []string // streams whose leader's node is killed, one after the other
		runs  int      // runs submitted before each kill
	}{
		{"events stream leader", []string{names.EventsStream()}, 100},
		{"runs stream and state bucket leaders", []string{names.RunsStream(), "KV_" + names.Bucket()}, 50},
	} {
		t.Run(tc.name, func(t *testing.T) { leaderLoss(t, tc.kills, tc.runs) })
	}
}

func leaderLoss(t *testing.T, kills []string, perKill int) {
	s := devstack.StartT(t, devstack.Config{
		Cluster: &natsembed.ClusterConfig{StoreDir: t.TempDir()},
		Connect: reconnecting,
		Workers: 2,
		Worker: consumer.Config{WorkerID: "cl", Provision: consumer.ProvisionConfig{
			Replicas: 3,
			// A job whose lease a failover interrupted comes back soon;
			// longer than events.StateReadTimeout (5s), so that a state
			// read lost with a dying leader cannot by itself cost the
			// owner its lease mid-create.
			AckWait: 10 * time.Second,
		}},
		Client: events.ClientConfig{CancelTimeout: 30 * time.Second},
	})
	js, err := jetstream.New(s.Conn)
	if err != nil {
		t.Fatal(err)
	}
	a := NewAuditor(js, s.Client.Names(), s.Emulator)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var followers []*follower
	for k, stream := range kills {
		var wave []*follower
		for i := range perKill {
			id := fmt.Sprintf("cl-%d-%03d", k, i)
			// 40 tokens at 20-60 ms each: 0.8-2.4 s of streaming.
			req := events.RunRequest{RunID: id, Model: "m", Input: json.RawMessage(`"tell me"`),
				Metadata: map[string]string{"emu_tokens": "40", "emu_token_ms": strconv.Itoa(20 + i%5*10)}}
			if err := submit(ctx, s.Client, req); err != nil {
				t.Fatal(err)
			}
			a.Submitted(id)
			wave = append(wave, follow(ctx, s.Client, id))
		}
		followers = append(followers, wave...)
		// Mid-stream: half of this wave's runs have relayed text.
		testkit.Eventually(t, 60*time.Second, "half of the runs streaming", func() bool {
			n := 0
			for _, f := range wave {
				if f.deltas() > 0 {
					n++
				}
			}
			return n >= len(wave)/2
		})
		node, err := s.Cluster.WaitStreamLeader(stream, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		streaming := 0
		for _, f := range wave {
			if !f.ended() {
				streaming++
			}
		}
		if streaming == 0 {
			t.Fatalf("every run had ended before the kill: the test would prove nothing")
		}
		t.Logf("killing node %d, leader of %s, with %d of %d runs streaming", node, stream, streaming, len(wave))
		s.Cluster.Kill(node)
		next, err := s.Cluster.WaitStreamLeader(stream, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("node %d leads %s", next, stream)
		if err := s.Cluster.Restart(node); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.WaitEnded(ctx); err != nil {
		t.Error(err)
	}
	rep, err := a.Audit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep.Table())
	if !rep.OK() || rep.Completed != rep.Submitted {
		t.Errorf("%d of %d runs completed; problems:\n%s", rep.Completed, rep.Submitted, strings.Join(rep.Problems, "\n"))
		diagnose(t, s, js, a)
	}
	for _, f := range followers {
		evs, err := f.wait(30 * time.Second)
		if err != nil {
			t.Errorf("watcher of %s: %v", f.runID, err)
			continue
		}
		if len(evs) == 0 || !evs[len(evs)-1].Type.Terminal() {
			t.Errorf("watcher of %s: %d events, no terminal event", f.runID, len(evs))
			continue
		}
		// What the watcher saw live is the whole text, once.
		if recs := s.Emulator.Records(f.runID); len(recs) == 1 && relayedText(evs) != recs[0].Text {
			t.Errorf("watcher of %s saw text %q, generated %q", f.runID, clip(relayedText(evs)), clip(recs[0].Text))
		}
	}
}

// submit submits req, trying again while the cluster elects a leader.
func submit(ctx context.Context, c *events.Client, req events.RunRequest) error {
	var err error
	b := retry.Backoff(50*time.Millisecond, 2*time.Second)
	for {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = c.Submit(sctx, req)
		cancel()
		if err == nil || errors.Is(err, events.ErrInvalidRequest) {
			return err
		}
		if !retry.Sleep(ctx, b.NextBackOff()) {
			return fmt.Errorf("submit %s: %w", req.RunID, err)
		}
	}
}

// follower follows one run live with an events.Watch, as a user would, and
// checks that it sees seqs 1, 2, 3, ... without a gap or a repeat.
type follower struct {
	runID string
	done  chan struct{}

	mu  sync.Mutex
	evs []events.RunEvent
	n   int // text.delta events seen
	err error
}

func follow(ctx context.Context, c *events.Client, runID string) *follower {
	f := &follower{runID: runID, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		w := c.Watch(ctx, runID, events.WatchOptions{NoHeartbeat: true})
		defer w.Close()
		for {
			ev, err := w.Next(ctx)
			if errors.Is(err, io.EOF) {
				return
			}
			f.mu.Lock()
			if err == nil && ev.Seq != uint64(len(f.evs)+1) {
				err = fmt.Errorf("after seq %d came seq %d", len(f.evs), ev.Seq)
			}
			if err != nil {
				f.err = err
				f.mu.Unlock()
				return
			}
			f.evs = append(f.evs, ev)
			if ev.Type == events.TypeTextDelta {
				f.n++
			}
			f.mu.Unlock()
		}
	}()
	return f
}

func (f *follower) deltas() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// ended reports whether the follower has seen the terminal event (or
// stopped).
func (f *follower) ended() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

func (f *follower) wait(limit time.Duration) ([]events.RunEvent, error) {
	select {
	case <-f.done:
	case <-time.After(limit):
		return nil, fmt.Errorf("still following after %s", limit)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.evs, f.err
}

// diagnose logs the state record and the work consumer's view of every run
// without a terminal event.
func diagnose(t *testing.T, s *devstack.Stack, js jetstream.JetStream, a *Auditor) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stored, _, err := a.stored(ctx)
	if err != nil {
		t.Logf("diagnose: %v", err)
		return
	}
	for _, id := range a.RunIDs() {
		if hasTerminal(stored[id]) {
			continue
		}
		st, rev, err := s.Client.State(ctx, id)
		b, _ := json.Marshal(st)
		t.Logf("diagnose %s: events %v; state rev %d %s (%v)", id, types(stored[id]), rev, b, err)
	}
	if dir := os.Getenv("FOUNDRYQ_CHAOS_DUMP"); dir != "" {
		f, err := os.Create(filepath.Join(dir, "goroutines-"+strings.ReplaceAll(t.Name(), "/", "_")+".txt"))
		if err == nil {
			_ = pprof.Lookup("goroutine").WriteTo(f, 2)
			_ = f.Close()
		}
	}
	names := s.Client.Names()
	if c, err := js.Consumer(ctx, names.RunsStream(), names.Consumer()); err == nil {
		if info, err := c.Info(ctx); err == nil {
			b, _ := json.Marshal(info)
			t.Logf("diagnose: work consumer %s", b)
		}
	}
}
