package consumer_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

// dropper dials NATS connections that a test can drop: while it is down
// every connection it dialled is closed and new dials fail, so the client
// sees a disconnect and keeps trying to reconnect until it is up again.
type dropper struct {
	mu    sync.Mutex
	down  bool
	conns []net.Conn
}

func (d *dropper) Dial(network, address string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.down {
		return nil, errors.New("dropper: down")
	}
	conn, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	d.conns = append(d.conns, conn)
	return conn, nil
}

// set drops every connection and refuses new ones (true), or lets them
// be dialled again.
func (d *dropper) set(down bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down = down
	if down {
		for _, c := range d.conns {
			_ = c.Close()
		}
		d.conns = nil
	}
}

// A cancel stored while the owner is disconnected from NATS (so it never
// hears the record) is applied when the owner reconnects: it re-reads the
// cancel records of its runs (recheckCancels). The response is cancelled
// upstream within about a second of the reconnect, and the run ends. With
// recheckCancels disabled the response streamed on (still running 40 s
// later): the owner keeps its lease, so no other take of the run reads the
// record.
func TestCancelStoredWhileTheOwnerIsDisconnected(t *testing.T) {
	t.Parallel()
	e := setup(t, withNATS(natsembed.Config{}))
	drop := &dropper{}
	defer drop.set(false)
	var logs testkit.Buffer
	log := zerolog.New(&logs)
	defer func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	}()
	w := e.startWorkerWith(consumer.Config{WorkerID: "owner", Logger: &log}, nats.SetCustomDialer(drop))
	const id = "recheck-1"
	e.submit(request(id, map[string]string{"emu_tokens": "100000", "emu_token_ms": "20"}))
	if o := e.owner(id); o != "owner" {
		t.Fatalf("run owned by %s", o)
	}
	e.waitEvent(id, events.TypeTextDelta, 20*time.Second)

	drop.set(true)
	testkit.Eventually(t, 10*time.Second, "the owner to be disconnected", func() bool {
		return !w.Jobs.IsConnected() && !w.Events.IsConnected()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.js.Publish(ctx, "foundryq.cancels."+id, []byte(`{"reason":"test"}`)); err != nil {
		t.Fatalf("store the cancel: %v", err)
	}
	if st := e.state(id); st.Status.Finished() {
		t.Fatalf("the run ended (%s) while its owner was disconnected", st.Status)
	}

	back := time.Now() // the owner reconnects within its 50ms reconnect wait
	drop.set(false)
	testkit.Eventually(t, 15*time.Second, "the response to be cancelled upstream", func() bool {
		return e.emu.Records(id)[0].Status == "cancelled"
	})
	took := time.Since(back)
	t.Logf("the response was cancelled upstream %s after the owner reconnected", took.Round(time.Millisecond))
	// About a second; the slack is for a loaded machine under the race
	// detector.
	if took > 1500*time.Millisecond {
		t.Errorf("the response was cancelled upstream %s after the owner reconnected, want about a second", took)
	}
	// The terminal event follows; it may wait behind an event whose
	// publish was in flight when the connection dropped (its ack never
	// comes: the relay's 5 s publish timeout).
	testkit.Eventually(t, 15*time.Second, "the run to end", func() bool {
		st, _, err := e.client.State(context.Background(), id)
		return err == nil && st.Status.Finished()
	})
	if took := time.Since(back); took > 8*time.Second {
		t.Errorf("the run ended %s after the owner reconnected", took)
	}
	last := checkWellFormed(t, e.collect(id, 10*time.Second))
	if last.Type != events.TypeRunCancelled || last.UpstreamStatus != "cancelled" {
		t.Fatalf("ended %+v, want run.cancelled, upstream cancelled", last)
	}
	if rec := e.emu.Records(id)[0]; rec.Status != "cancelled" {
		t.Fatalf("emulator: %s, want cancelled", rec.Status)
	}
}
