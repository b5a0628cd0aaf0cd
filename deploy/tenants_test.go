package deploy

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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
		"TEAM_A_WORKER_PASSWORD": "aworkerpw", "TEAM_A_CLIENT_PASSWORD": "aclientpw", "TEAM_A_GATEWAY_PASSWORD": "agatewaypw", "TEAM_B_GATEWAY_PASSWORD": "bgatewaypw",
		"TEAM_B_WORKER_PASSWORD": "bworkerpw", "TEAM_B_CLIENT_PASSWORD": "bclientpw", "TEAM_A_TOOLS_PASSWORD": "atoolspw", "TEAM_B_TOOLS_PASSWORD": "btoolspw",
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

	// Workers subscribe to the stored cancel records and to every state
	// write of their account: subjects are per account, so the same
	// subscription of team A's worker hears none of team B's.
	t.Run("A's workers do not hear B's cancel records or state writes", func(t *testing.T) {
		aw := connectAs(t, s, "team-a-worker", "aworkerpw")
		var mu sync.Mutex
		var heard []string
		for _, subject := range []string{a.names.CancelRecordsWildcard(), "$KV." + a.names.Bucket() + ".*"} {
			sub, err := aw.nc.Subscribe(subject, func(m *nats.Msg) {
				mu.Lock()
				heard = append(heard, m.Subject)
				mu.Unlock()
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = sub.Unsubscribe() }()
		}
		if err := aw.nc.FlushTimeout(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		// B's own worker role hears both (the control), ...
		bw := connectAs(t, s, "team-b-worker", "bworkerpw")
		bw.subHears(t, b.names.CancelRecordsWildcard(), b.names.CancelRecordSubject("b-other"), func() {
			if _, err := b.client.js.Publish(testContext(t), b.names.CancelRecordSubject("b-other"), []byte(`{"reason":"b only"}`)); err != nil {
				t.Fatalf("B's cancel record: %v", err)
			}
		})
		bState := "b-state"
		bw.subHears(t, "$KV."+b.names.Bucket()+".*", "$KV."+b.names.Bucket()+"."+bState, func() {
			submit(t, b.c, bState, map[string]string{"emu_tokens": "2"})
		})
		if evs := watchToEnd(t, b.c, bState, events.FromStart, nil); evs[len(evs)-1].Type != events.TypeRunCompleted {
			t.Fatalf("B's run %s: %v", bState, types(evs))
		}
		// ... and A's, subscribed before B wrote anything, heard none of it.
		if err := aw.nc.FlushTimeout(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, subject := range heard {
			if strings.HasSuffix(subject, ".b-other") || strings.HasSuffix(subject, "."+bState) || strings.HasSuffix(subject, "."+bRun) {
				t.Fatalf("team A's worker heard %s of team B", subject)
			}
		}
		// Nor may it subscribe to B's inboxes.
		aw.subDenied(t, "_INBOX.team-b-worker.>")
		aw.subDenied(t, "_INBOX.team-b-client.>")
		aw.clean(t)
		bw.clean(t)
	})

	// Tools are per account too: team A's tools user serves a tool of the
	// same name as B's, and never receives B's calls or cancels.
	t.Run("A's tools never receive B's calls", func(t *testing.T) {
		aTools := connectAs(t, s, "team-a-tools", "atoolspw")
		aLookup := serveProbe(t, aTools, "lookup", "a")
		// Served in A only: B's worker finds nobody serving it.
		ctx := testContext(t)
		if _, err := b.worker.nc.RequestWithContext(ctx, b.names.ToolSubject("lookup"), []byte(`{}`)); !errors.Is(err, nats.ErrNoResponders) {
			t.Fatalf("B's call of a tool only A serves: %v, want nats.ErrNoResponders", err)
		}
		aCancels := make(chan string, 16)
		sub, err := aTools.nc.Subscribe(a.names.ToolCancelWildcard(), func(m *nats.Msg) { aCancels <- m.Subject })
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := aTools.nc.FlushTimeout(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		// B's own tools user gets B's call and cancel (the control) ...
		bTools := connectAs(t, s, "team-b-tools", "btoolspw")
		bLookup := serveProbe(t, bTools, "lookup", "b")
		reply := callTool(t, b.worker, b.names, "lookup", "b-tool-run", "call_b", `{"q":"b"}`)
		if call := bLookup.nextStart(t); call.RunID != "b-tool-run" {
			t.Fatalf("B's tool got %+v", call)
		}
		if answer := progressThenAnswer(t, reply, 1, func() { bLookup.release <- struct{}{} }); string(answer.Data) != "b" {
			t.Fatalf("B's call answered %q %v, want B's tool's answer", answer.Data, answer.Header)
		}
		bTools.subHears(t, b.names.ToolCancelWildcard(), b.names.ToolCancelSubject("b-tool-run"), func() {
			cancelToolCall(t, b.worker, b.names, "b-tool-run", "call_b")
		})
		// ... and A's tool, served all along, got neither: A's own call and
		// cancel, sent last, are the first it sees.
		reply = callTool(t, a.worker, a.names, "lookup", "a-tool-run", "call_a", `{"q":"a"}`)
		if call := aLookup.nextStart(t); call.RunID != "a-tool-run" {
			t.Fatalf("A's tool got %+v, want A's own call only", call)
		}
		if answer := progressThenAnswer(t, reply, 1, func() { aLookup.release <- struct{}{} }); string(answer.Data) != "a" {
			t.Fatalf("A's call answered %q %v", answer.Data, answer.Header)
		}
		cancelToolCall(t, a.worker, a.names, "a-tool-run", "call_a")
		if got := <-aCancels; got != a.names.ToolCancelSubject("a-tool-run") {
			t.Fatalf("A's tools user heard the cancel %s, want A's own first", got)
		}
		// Nor may it read B's workers' inboxes, where B's tools answer.
		aTools.subDenied(t, "_INBOX.team-b-worker.>")
		aTools.clean(t)
		bTools.clean(t)
	})

	t.Run("neither team's users were refused anything they use", func(t *testing.T) {
		for _, u := range []*natsUser{a.worker, a.client, b.worker, b.client} {
			u.clean(t)
		}
	})
}
