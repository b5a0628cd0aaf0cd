package deploy

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
)

// tenant is one team's account: its worker, its client and its emulator.
type tenant struct {
	worker, client *natsUser
	c              *events.Client
	names          events.Names
}

// TestTenants runs tenants.conf (an account per team, the same subject and
// stream names in both) with a worker per team, and checks that team A
// cannot submit to, watch, read the state of, or cancel team B's runs.
func TestTenants(t *testing.T) {
	s := startConfig(t, "tenants.conf", map[string]string{
		"TEAM_A_WORKER_PASSWORD": "aworkerpw", "TEAM_A_CLIENT_PASSWORD": "aclientpw",
		"TEAM_B_WORKER_PASSWORD": "bworkerpw", "TEAM_B_CLIENT_PASSWORD": "bclientpw",
	})
	emuA, emuB := emulator(t), emulator(t)
	team := func(name, wpw, cpw string) *tenant {
		tn := &tenant{worker: connectAs(t, s, "team-"+name+"-worker", wpw)}
		tn.names = provisionAs(t, tn.worker, "")
		tn.client = connectAs(t, s, "team-"+name+"-client", cpw)
		c, err := events.NewClient(tn.client.nc, events.ClientConfig{CancelTimeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		tn.c = c
		return tn
	}
	a, b := team("a", "aworkerpw", "aclientpw"), team("b", "bworkerpw", "bclientpw")
	runWorker(t, a.worker, emuA, consumer.Config{WorkerID: "team-a-1"})
	runWorker(t, b.worker, emuB, consumer.Config{WorkerID: "team-b-1"})

	// B's run: long enough to be running while A tries things, bounded.
	bRun := "b-run"
	submit(t, b.c, bRun, map[string]string{"emu_tokens": "400", "emu_token_ms": "10"})
	started := make(chan struct{})
	ended := make(chan []events.RunEvent, 1)
	go func() {
		once := false
		ended <- watchToEnd(t, b.c, bRun, events.FromStart, func(ev events.RunEvent) {
			if ev.Type == events.TypeTextDelta && !once {
				once = true
				close(started)
			}
		})
	}()
	select {
	case <-started:
	case <-time.After(60 * time.Second):
		t.Fatal("team B's run did not start")
	}

	t.Run("A cannot read B's run state", func(t *testing.T) {
		if st, _, err := b.c.State(testContext(t), bRun); err != nil || st.Owner != "team-b-1" {
			t.Fatalf("B's own state: %+v, %v", st, err)
		}
		if _, _, err := a.c.State(testContext(t), bRun); !errors.Is(err, events.ErrStateNotFound) {
			t.Fatalf("A's state look-up of B's run: %v, want ErrStateNotFound", err)
		}
	})

	t.Run("A cannot watch B's run", func(t *testing.T) {
		ctx := testContext(t)
		stream, err := a.client.js.Stream(ctx, a.names.EventsStream())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.GetLastMsgForSubject(ctx, a.names.EventSubject(bRun)); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatalf("A's events stream has an event of B's run: %v", err)
		}
		// Nor read the replies to B's requests.
		a.client.subDenied(t, "_INBOX.team-b-client.>")
		a.client.subDenied(t, "_INBOX.team-b-worker.>")
	})

	t.Run("A cannot cancel B's run", func(t *testing.T) {
		ctx := testContext(t)
		reply, err := a.c.Cancel(ctx, bRun, "not mine")
		if err != nil || reply.Result != events.CancelNotFound {
			t.Fatalf("A's cancel of B's run: %+v, %v; want not_found from A's own workers", reply, err)
		}
		if _, err := a.client.js.Publish(ctx, a.names.CancelRecordSubject(bRun), []byte(`{"reason":"not mine"}`)); err != nil {
			t.Fatalf("A's durable cancel record (in A's stream): %v", err)
		}
		evs := <-ended
		if last := evs[len(evs)-1]; last.Type != events.TypeRunCompleted {
			t.Fatalf("B's run ended %s, want run.completed", last.Type)
		}
		if n := emuA.Stats().CancelsReceived + emuB.Stats().CancelsReceived; n != 0 {
			t.Fatalf("Foundry received %d cancels", n)
		}
		bCancels, err := b.worker.js.Stream(ctx, b.names.CancelsStream()) // clients only publish there
		if err != nil {
			t.Fatal(err)
		}
		if info, err := bCancels.Info(ctx, jetstream.WithSubjectFilter(b.names.CancelRecordSubject(bRun))); err != nil || info.State.Subjects[b.names.CancelRecordSubject(bRun)] != 0 {
			t.Fatalf("B's cancels stream holds a record for its run: %v, %v", info, err)
		}
	})

	t.Run("A cannot submit to B's workers", func(t *testing.T) {
		id := "a-into-b"
		submit(t, a.c, id, map[string]string{"emu_tokens": "3"})
		evs := watchToEnd(t, a.c, id, events.FromStart, nil)
		if last := evs[len(evs)-1]; last.Type != events.TypeRunCompleted || evs[0].Worker != "team-a-1" {
			t.Fatalf("A's run: %v on %q, want run.completed by A's own worker", types(evs), evs[0].Worker)
		}
		if n := emuB.Stats().ResponsesByRun[id]; n != 0 {
			t.Fatalf("B's Foundry got %d responses for A's run", n)
		}
		if _, _, err := b.c.State(testContext(t), id); !errors.Is(err, events.ErrStateNotFound) {
			t.Fatalf("B's state has A's run: %v", err)
		}
	})

	t.Run("neither team's users were refused anything they use", func(t *testing.T) {
		for _, u := range []*natsUser{a.worker, a.client, b.worker, b.client} {
			u.clean(t)
		}
	})
}
