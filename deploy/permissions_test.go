package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/testkit"
	"github.com/foundryq/foundryq/tools"
)

// serverConfPasswords are the password variables of nats-server.conf for
// the tests that run it in process.
var serverConfPasswords = map[string]string{"WORKER_PASSWORD": "workerpw1", "CLIENT_PASSWORD": "clientpw1", "GATEWAY_PASSWORD": "gatewaypw1", "TOOLS_PASSWORD": "toolspw1"}

// TestPermissions runs nats-server from the shipped nats-server.conf (in
// process: no Docker) with a real worker connected as "worker", and checks
// both sides of least privilege: everything foundryq submit/watch/cancel/
// runs do as "client" works without a single refusal, and each thing a
// client must not do is refused by the server, as are the things a worker
// has no use for.
func TestPermissions(t *testing.T) {
	s := startConfig(t, "nats-server.conf", serverConfPasswords)
	emu := emulator(t)

	worker := connectAs(t, s, "worker", "workerpw1")
	names := provisionAs(t, worker, "")
	stopWorker := runWorker(t, worker, emu, consumer.Config{Concurrency: 1})

	client := connectAs(t, s, "client", "clientpw1")
	c, err := events.NewClient(client.nc, events.ClientConfig{CancelTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("client: submit and watch a run to its end", func(t *testing.T) {
		id := "perm-complete"
		submit(t, c, id, map[string]string{"emu_tokens": "5"})
		evs := watchToEnd(t, c, id, events.FromStart, nil)
		if last := evs[len(evs)-1]; last.Type != events.TypeRunCompleted {
			t.Fatalf("terminal event %s, want run.completed (%v)", last.Type, types(evs))
		}
		if evs := watchToEnd(t, c, id, events.FromNow, nil); len(evs) != 1 || evs[0].Type != events.TypeRunCompleted {
			t.Fatalf("watch from now of a finished run: %v", types(evs))
		}
		st, _, err := c.State(testContext(t), id)
		if err != nil || st.Status != events.StatusCompleted {
			t.Fatalf("state: %+v, %v", st, err)
		}
	})

	t.Run("client: list the runs (foundryq runs)", func(t *testing.T) {
		ctx := testContext(t)
		kvStream, err := client.js.Stream(ctx, "KV_"+names.Bucket())
		if err != nil {
			t.Fatal(err)
		}
		info, err := kvStream.Info(ctx, jetstream.WithSubjectFilter("$KV."+names.Bucket()+".>"))
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Subjects["$KV."+names.Bucket()+".perm-complete"] == 0 {
			t.Fatalf("run perm-complete not listed: %v", info.State.Subjects)
		}
	})

	t.Run("client: cancel a running run and a queued one", func(t *testing.T) {
		ctx := testContext(t)
		running, queued := "perm-running", "perm-queued"
		submit(t, c, running, map[string]string{"emu_tokens": "100000", "emu_token_ms": "20"})
		first := make(chan struct{})
		ended := make(chan []events.RunEvent, 1)
		go func() {
			var once bool
			ended <- watchToEnd(t, c, running, events.FromStart, func(ev events.RunEvent) {
				if ev.Type == events.TypeTextDelta && !once {
					once = true
					close(first)
				}
			})
		}()
		select {
		case <-first:
		case <-time.After(60 * time.Second):
			t.Fatal("no text from the running run")
		}
		// Concurrency 1: the worker is busy, so this one waits in the queue.
		submit(t, c, queued, nil)
		// Queued or not, told by the runs and queue streams' subject
		// counts (Exists): no job body read.
		if ok, err := c.Exists(ctx, queued); err != nil || !ok {
			t.Fatalf("queued check by stream info: %v, %v", ok, err)
		}
		// Its place in the queue: the client asks, a worker reads the
		// queue and answers.
		var pos events.QueuePosition
		testkit.Eventually(t, 30*time.Second, "the queued run's place in its lane", func() bool {
			pos, err = c.QueuePosition(ctx, queued)
			return err == nil && pos.Where == events.WhereLane
		})
		if pos.Position != 1 || pos.LaneWaiting != 1 {
			t.Fatalf("queue position of the queued run: %+v", pos)
		}
		reply, err := c.Cancel(ctx, queued, "queued one")
		if err != nil || reply.Result != events.CancelCancelled {
			t.Fatalf("cancel of the queued run: %+v, %v; want cancelled", reply, err)
		}
		reply, err = c.Cancel(ctx, running, "running one")
		if err != nil || reply.Result != events.CancelCancelling {
			st, _, serr := c.State(ctx, running)
			t.Fatalf("cancel of the running run: %+v, %v; want cancelling (state %+v cancel %+v, %v)", reply, err, st, st.Cancel, serr)
		}
		evs := <-ended
		if last := evs[len(evs)-1]; last.Type != events.TypeRunCancelled {
			t.Fatalf("terminal event %s, want run.cancelled", last.Type)
		}
	})

	t.Run("client: store a durable cancel record", func(t *testing.T) {
		// What Client.Cancel does first in the final design (wire level).
		ack, err := client.js.Publish(testContext(t), names.CancelRecordSubject("perm-record"), []byte(`{"reason":"test"}`))
		if err != nil || ack.Stream != names.CancelsStream() {
			t.Fatalf("publish a cancel record: %+v, %v", ack, err)
		}
	})

	// A run that asks, as the roles allow it: the worker pauses it (the
	// inputs stream, its own request kept), the client answers on the
	// input subject, and the worker queues the run's next step.
	t.Run("client: answers a run that asks", func(t *testing.T) {
		id := "perm-ask"
		req := events.RunRequest{RunID: id, Model: "gpt-test", Input: json.RawMessage(`"hi"`),
			Metadata: map[string]string{"emu_tool_ms": "5", "emu_tokens": "2"},
			Tools:    []json.RawMessage{json.RawMessage(`{"type":"function","name":"get_weather"}`)}}
		if _, err := c.Submit(testContext(t), req); err != nil {
			t.Fatal(err)
		}
		var asked events.InputItem
		evs := watchToEnd(t, c, id, events.FromStart, func(ev events.RunEvent) {
			if ev.Type == events.TypeInputRequired {
				asked = ev.Items[0]
				go func() {
					if r, err := c.SendOutput(testContext(t), id, asked.ID, `{"temp":21}`); err != nil || r.Result != events.InputAccepted {
						t.Errorf("answer: %+v, %v", r, err)
					}
				}()
			}
		})
		if last := evs[len(evs)-1]; last.Type != events.TypeRunCompleted || asked.ID == "" {
			t.Fatalf("run %s: %v", id, types(evs))
		}
	})

	t.Run("client: a malformed request is dead-lettered by the worker", func(t *testing.T) {
		id := "perm-bad"
		if _, err := client.js.Publish(testContext(t), names.RunSubject(id), []byte(`{"run_id":"perm-bad","model":5}`)); err != nil {
			t.Fatal(err)
		}
		evs := watchToEnd(t, c, id, events.FromStart, nil)
		if last := evs[len(evs)-1]; last.Type != events.TypeRunFailed || last.Error == nil || last.Error.Code != "invalid_request" {
			t.Fatalf("terminal event %+v, want run.failed invalid_request", last)
		}
	})

	// What every worker subscribes to besides requests and heartbeats: the
	// stored cancel records (so a run's owner applies a cancel however the
	// request was routed) and every state write (so any worker enforces a
	// passed deadline while a run's owner is dead).
	t.Run("worker: hears stored cancel records and state writes", func(t *testing.T) {
		x := connectAs(t, s, "worker", "workerpw1")
		x.subHears(t, names.CancelRecordsWildcard(), names.CancelRecordSubject("perm-heard"), func() {
			if _, err := client.js.Publish(testContext(t), names.CancelRecordSubject("perm-heard"), []byte(`{"reason":"heard"}`)); err != nil {
				t.Fatalf("store a cancel record: %v", err)
			}
		})
		id := "perm-state-heard"
		x.subHears(t, "$KV."+names.Bucket()+".*", "$KV."+names.Bucket()+"."+id, func() {
			submit(t, c, id, map[string]string{"emu_tokens": "2"})
		})
		if evs := watchToEnd(t, c, id, events.FromStart, nil); evs[len(evs)-1].Type != events.TypeRunCompleted {
			t.Fatalf("run %s: %v", id, types(evs))
		}
		x.clean(t)
	})

	t.Run("worker: a stopping worker hands its run to another one", func(t *testing.T) {
		worker2 := connectAs(t, s, "worker", "workerpw1")
		stopWorker2 := runWorker(t, worker2, emu, consumer.Config{WorkerID: "w-second"})
		stops := map[string]func(){"w-worker": stopWorker, "w-second": stopWorker2}
		id := "perm-handoff"
		submit(t, c, id, map[string]string{"emu_tokens": "300", "emu_token_ms": "10"})
		var owner string
		stopped := make(chan struct{})
		evs := watchToEnd(t, c, id, events.FromStart, func(ev events.RunEvent) {
			if ev.Type == events.TypeRunStarted && owner == "" {
				owner = ev.Worker
				stop, ok := stops[owner]
				if !ok {
					t.Errorf("run.started names worker %q", owner)
					close(stopped)
					return
				}
				go func() { stop(); close(stopped) }() // hand-off: flush, Nak
			}
		})
		select {
		case <-stopped:
		case <-time.After(90 * time.Second):
			t.Fatal("the owner did not stop")
		}
		var starts []string
		for _, ev := range evs {
			if ev.Type == events.TypeRunStarted {
				starts = append(starts, ev.Worker)
			}
		}
		if last := evs[len(evs)-1]; last.Type != events.TypeRunCompleted || len(starts) < 2 || starts[len(starts)-1] == owner {
			t.Fatalf("events %v, starts %v: want run.completed after a start on the other worker than %s", types(evs), starts, owner)
		}
		stopWorker2()
		worker2.clean(t)
	})

	t.Run("client: nothing it did was refused", func(t *testing.T) { client.clean(t) })
	t.Run("worker: nothing it did, shutdown included, was refused", func(t *testing.T) {
		stopWorker()
		worker.clean(t)
	})

	t.Run("client may not", func(t *testing.T) {
		x := connectAs(t, s, "client", "clientpw1")
		victim := "perm-complete"
		kvSubject := "$KV." + names.Bucket() + "." + victim

		t.Run("read other users' inboxes", func(t *testing.T) {
			x.subDenied(t, "_INBOX.worker.>")
			x.subDenied(t, "_INBOX.>")
			x.subDenied(t, ">")
		})
		t.Run("read run requests or cancel requests as they pass", func(t *testing.T) {
			x.subDenied(t, "foundryq.runs.*")
			x.subDenied(t, "foundryq.cancel.*")
		})
		t.Run("read job bodies in the lanes, or write there", func(t *testing.T) {
			queue := "FOUNDRYQ_QUEUE"
			x.denied(t, "$JS.API.STREAM.MSG.GET."+queue, func(ctx context.Context) error {
				_, err := x.request(ctx, "$JS.API.STREAM.MSG.GET."+queue, map[string]any{"last_by_subj": "foundryq.queue.*.*." + victim})
				return err
			})
			x.denied(t, "$JS.API.CONSUMER.CREATE."+queue+".peek", func(ctx context.Context) error {
				_, err := x.request(ctx, "$JS.API.CONSUMER.CREATE."+queue+".peek", map[string]any{"stream_name": queue, "config": map[string]any{"name": "peek", "ack_policy": "explicit"}})
				return err
			})
			x.denied(t, "foundryq.queue.high.default.jump", func(ctx context.Context) error {
				_, err := x.request(ctx, "foundryq.queue.high.default.jump", map[string]any{})
				return err
			})
		})
		t.Run("read job bodies in the runs stream", func(t *testing.T) {
			x.denied(t, "$JS.API.STREAM.MSG.GET."+names.RunsStream(), func(ctx context.Context) error {
				_, err := x.request(ctx, "$JS.API.STREAM.MSG.GET."+names.RunsStream(), map[string]any{"last_by_subj": names.RunSubject(victim)})
				return err
			})
			x.denied(t, "$JS.API.DIRECT.GET."+names.RunsStream()+"."+names.RunSubject(victim), func(ctx context.Context) error {
				_, err := x.request(ctx, "$JS.API.DIRECT.GET."+names.RunsStream()+"."+names.RunSubject(victim), nil)
				return err
			})
			x.denied(t, "$JS.API.CONSUMER.CREATE."+names.RunsStream()+".peek", func(ctx context.Context) error {
				_, err := x.request(ctx, "$JS.API.CONSUMER.CREATE."+names.RunsStream()+".peek", map[string]any{"stream_name": names.RunsStream(), "config": map[string]any{"name": "peek", "ack_policy": "explicit"}})
				return err
			})
			x.denied(t, "$JS.API.CONSUMER.MSG.NEXT."+names.RunsStream()+"."+names.Consumer(), func(ctx context.Context) error {
				_, err := x.request(ctx, "$JS.API.CONSUMER.MSG.NEXT."+names.RunsStream()+"."+names.Consumer(), map[string]any{"batch": 1})
				return err
			})
		})
		t.Run("write the state bucket", func(t *testing.T) {
			ctx := testContext(t)
			before, _, err := c.State(ctx, victim)
			if err != nil {
				t.Fatal(err)
			}
			x.denied(t, kvSubject, func(ctx context.Context) error {
				kv, err := x.js.KeyValue(ctx, names.Bucket())
				if err != nil {
					return err
				}
				_, err = kv.Put(ctx, victim, []byte(`{"run_id":"perm-complete","status":"running"}`))
				return err
			})
			x.denied(t, kvSubject, func(ctx context.Context) error {
				kv, err := x.js.KeyValue(ctx, names.Bucket())
				if err != nil {
					return err
				}
				return kv.Delete(ctx, victim)
			})
			after, _, err := c.State(ctx, victim)
			if err != nil || after.Status != before.Status || !after.UpdatedAt.Equal(before.UpdatedAt) {
				t.Fatalf("state changed: %+v -> %+v (%v)", before, after, err)
			}
		})
		t.Run("watch the state bucket with a consumer", func(t *testing.T) {
			x.denied(t, "$JS.API.CONSUMER.CREATE.KV_"+names.Bucket()+".kvpeek", func(ctx context.Context) error {
				_, err := x.request(ctx, "$JS.API.CONSUMER.CREATE.KV_"+names.Bucket()+".kvpeek", map[string]any{"stream_name": "KV_" + names.Bucket(), "config": map[string]any{"name": "kvpeek"}})
				return err
			})
		})
		// Workers tell a run's owner about a cancel on the notice subject;
		// a client that could publish there would cancel runs with no
		// cancel on record.
		t.Run("send workers' internal notices", func(t *testing.T) {
			subject := names.NoticeSubject(victim)
			x.denied(t, subject, func(ctx context.Context) error {
				m := nats.NewMsg(subject)
				m.Data = []byte(`{"reason":"forged"}`)
				m.Header.Set(events.HeaderCancelNotice, "w-worker")
				_, err := x.nc.RequestMsgWithContext(ctx, m)
				return err
			})
			x.subDenied(t, names.NoticeWildcard())
		})
		// Answers are stored by the workers that check them: a client
		// that could write the inputs stream would answer any run, past
		// every check.
		t.Run("store answers of runs that ask", func(t *testing.T) {
			subject := names.InputRecordSubject(victim, "mcpr_forged")
			x.denied(t, subject, func(ctx context.Context) error {
				_, err := x.js.Publish(ctx, subject, []byte(`{"id":"mcpr_forged","approve":true}`))
				return err
			})
		})
		t.Run("publish run events", func(t *testing.T) {
			subject := names.EventSubject(victim)
			x.denied(t, subject, func(ctx context.Context) error {
				_, err := x.js.Publish(ctx, subject, []byte(`{"run_id":"perm-complete","seq":99,"type":"run.completed"}`))
				return err
			})
		})
		t.Run("touch dead letters", func(t *testing.T) {
			x.denied(t, "$JS.API.STREAM.INFO."+names.DeadStream(), func(ctx context.Context) error {
				_, err := x.js.Stream(ctx, names.DeadStream())
				return err
			})
			x.denied(t, "$JS.API.DIRECT.GET."+names.DeadStream()+"."+names.DeadSubject("perm-bad"), func(ctx context.Context) error {
				_, err := x.request(ctx, "$JS.API.DIRECT.GET."+names.DeadStream()+"."+names.DeadSubject("perm-bad"), nil)
				return err
			})
			x.denied(t, "$JS.API.STREAM.MSG.GET."+names.DeadStream(), func(ctx context.Context) error {
				_, err := x.request(ctx, "$JS.API.STREAM.MSG.GET."+names.DeadStream(), map[string]any{"last_by_subj": names.DeadSubject("perm-bad")})
				return err
			})
			x.denied(t, "$JS.API.CONSUMER.CREATE."+names.DeadStream()+".deadpeek", func(ctx context.Context) error {
				_, err := x.request(ctx, "$JS.API.CONSUMER.CREATE."+names.DeadStream()+".deadpeek", map[string]any{"stream_name": names.DeadStream(), "config": map[string]any{"name": "deadpeek"}})
				return err
			})
			x.denied(t, names.DeadSubject("forged"), func(ctx context.Context) error {
				_, err := x.js.Publish(ctx, names.DeadSubject("forged"), []byte(`{}`))
				return err
			})
		})
		t.Run("delete, purge or change streams", func(t *testing.T) {
			ctx := testContext(t)
			for _, stream := range []string{names.RunsStream(), names.EventsStream(), names.DeadStream(), names.CancelsStream(), "KV_" + names.Bucket()} {
				x.denied(t, "$JS.API.STREAM.DELETE."+stream, func(ctx context.Context) error { return x.js.DeleteStream(ctx, stream) })
				x.denied(t, "$JS.API.STREAM.PURGE."+stream, func(ctx context.Context) error {
					_, err := x.request(ctx, "$JS.API.STREAM.PURGE."+stream, nil)
					return err
				})
			}
			x.denied(t, "$JS.API.STREAM.UPDATE."+names.EventsStream(), func(ctx context.Context) error {
				cfg := events.EventsStreamConfig(names, events.ProvisionConfig{EventsMaxConsumers: -1})
				_, err := x.js.UpdateStream(ctx, cfg)
				return err
			})
			x.denied(t, "$JS.API.STREAM.MSG.DELETE."+names.EventsStream(), func(ctx context.Context) error {
				_, err := x.request(ctx, "$JS.API.STREAM.MSG.DELETE."+names.EventsStream(), map[string]any{"seq": 1})
				return err
			})
			x.denied(t, "$JS.API.CONSUMER.DELETE."+names.RunsStream()+"."+names.Consumer(), func(ctx context.Context) error {
				_, err := x.request(ctx, "$JS.API.CONSUMER.DELETE."+names.RunsStream()+"."+names.Consumer(), nil)
				return err
			})
			for _, stream := range []string{names.RunsStream(), names.EventsStream(), "KV_" + names.Bucket()} {
				if _, err := client.js.Stream(ctx, stream); err != nil {
					t.Fatalf("stream %s after the refused delete: %v", stream, err)
				}
			}
			if evs := watchToEnd(t, c, victim, events.FromStart, nil); len(evs) < 2 {
				t.Fatalf("events of %s after the refused purge: %v", victim, types(evs))
			}
		})

		// Permissions cannot tell a durable consumer from the ordered one of
		// a watch: a client can create one on the events stream, and the
		// stream's limits bound it.
		t.Run("leave unbounded consumers behind", func(t *testing.T) {
			ctx := testContext(t)
			info, err := client.js.Stream(ctx, names.EventsStream())
			if err != nil {
				t.Fatal(err)
			}
			cfg := info.CachedInfo().Config
			if cfg.MaxConsumers <= 0 || cfg.ConsumerLimits.InactiveThreshold <= 0 {
				t.Fatalf("events stream without consumer limits: max_consumers %d, inactive_threshold %s", cfg.MaxConsumers, cfg.ConsumerLimits.InactiveThreshold)
			}
			cons, err := x.js.CreateConsumer(ctx, names.EventsStream(), jetstream.ConsumerConfig{Durable: "left-behind", AckPolicy: jetstream.AckNonePolicy})
			if err != nil {
				t.Fatalf("durable on the events stream: %v", err)
			}
			if got := cons.CachedInfo().Config.InactiveThreshold; got != cfg.ConsumerLimits.InactiveThreshold {
				t.Fatalf("client's durable consumer: inactive threshold %s, want the stream's %s", got, cfg.ConsumerLimits.InactiveThreshold)
			}
			if _, err := x.js.CreateConsumer(ctx, names.EventsStream(), jetstream.ConsumerConfig{Durable: "forever", InactiveThreshold: 365 * 24 * time.Hour}); err == nil {
				t.Fatal("a consumer that outlives the stream's inactive threshold was created")
			}
		})

		// A push consumer's deliver subject is not checked against the
		// creator's permissions: delivering event copies into the runs
		// stream or the state bucket must not write them.
		t.Run("write streams through a consumer's deliver subject", func(t *testing.T) {
			ctx := testContext(t)
			for i, target := range []string{names.RunSubject("injected"), "$KV." + names.Bucket() + ".injected", names.EventSubject("injected")} {
				name := []string{"inject-runs", "inject-kv", "inject-events"}[i]
				_, err := x.request(ctx, "$JS.API.CONSUMER.CREATE."+names.EventsStream()+"."+name, map[string]any{
					"stream_name": names.EventsStream(),
					"config":      map[string]any{"durable_name": name, "deliver_subject": target, "ack_policy": "none", "deliver_policy": "all"},
				})
				t.Logf("push consumer delivering to %s: %v", target, err)
			}
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) {
				runs, err := client.js.Stream(ctx, names.RunsStream())
				if err != nil {
					t.Fatal(err)
				}
				ri, err := runs.Info(ctx, jetstream.WithSubjectFilter(names.RunSubject("injected")))
				if err != nil {
					t.Fatal(err)
				}
				if ri.State.Subjects[names.RunSubject("injected")] != 0 {
					t.Fatal("a consumer's deliveries were stored as a run request")
				}
				if _, _, err := c.State(ctx, "injected"); !errors.Is(err, events.ErrStateNotFound) {
					t.Fatalf("a consumer's deliveries were stored as run state: %v", err)
				}
				evStream, err := client.js.Stream(ctx, names.EventsStream())
				if err != nil {
					t.Fatal(err)
				}
				if _, err := evStream.GetLastMsgForSubject(ctx, names.EventSubject("injected")); !errors.Is(err, jetstream.ErrMsgNotFound) {
					t.Fatalf("a consumer's deliveries were stored as run events: %v", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	})

	t.Run("worker may not", func(t *testing.T) {
		x := connectAs(t, s, "worker", "workerpw1")
		// Notices go on the notice subject: the cancel subject is the
		// clients' alone.
		for _, subject := range []string{names.CancelRecordSubject("forged"), names.WatchSubject("forged"), names.CancelSubject("forged"), names.InputSubject("forged")} {
			x.denied(t, subject, func(ctx context.Context) error {
				_, err := x.nc.RequestWithContext(ctx, subject, []byte(`{}`))
				return err
			})
		}
		// It hears cancel records but never writes one: a JetStream
		// publish (acked) is refused as well. (It may queue a run's
		// request again: the next step of a run that asks.)
		for _, subject := range []string{names.CancelRecordSubject("forged-js")} {
			x.denied(t, subject, func(ctx context.Context) error {
				_, err := x.js.Publish(ctx, subject, []byte(`{"reason":"forged"}`))
				return err
			})
		}
		for _, stream := range []string{names.RunsStream(), names.EventsStream()} {
			x.denied(t, "$JS.API.STREAM.DELETE."+stream, func(ctx context.Context) error { return x.js.DeleteStream(ctx, stream) })
			x.denied(t, "$JS.API.STREAM.PURGE."+stream, func(ctx context.Context) error {
				_, err := x.request(ctx, "$JS.API.STREAM.PURGE."+stream, nil)
				return err
			})
		}
		x.subDenied(t, "_INBOX.client.>")
		x.subDenied(t, "foundryq.runs.*")
		// The state grant is its own bucket's keys, not the KV namespace.
		x.subDenied(t, "$KV.>")
	})

	t.Run("no user may connect without a password", func(t *testing.T) {
		if nc, err := nats.Connect(s.ClientURL(), nats.Timeout(5*time.Second)); err == nil {
			nc.Close()
			t.Fatal("anonymous connection accepted")
		}
		if nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("client", "wrong"), nats.Timeout(5*time.Second)); err == nil {
			nc.Close()
			t.Fatal("wrong password accepted")
		}
	})
}

// TestToolsPermissions runs nats-server.conf with a function tool served
// as the "tools" user (package tools) and checks the roles around it: a
// worker calls it end to end (progress messages and the answer reach the
// worker's inbox) and cancels a call in flight; nats micro's discovery
// answers; the tools user reads and writes nothing else of foundryq; and
// clients and the gateway can neither read the calls (their arguments)
// nor make any, nor cancel one.
func TestToolsPermissions(t *testing.T) {
	s := startConfig(t, "nats-server.conf", serverConfPasswords)
	worker := connectAs(t, s, "worker", "workerpw1")
	names := provisionAs(t, worker, "")
	toolsUser := connectAs(t, s, "tools", "toolspw1")
	weather := serveProbe(t, toolsUser, "get_weather", `{"temp_c":21}`)

	t.Run("worker: calls a tool served by the tools user", func(t *testing.T) {
		sub := callTool(t, worker, names, "get_weather", "tool-run", "call_1", `{"city":"Paris"}`)
		call := weather.nextStart(t)
		if call.RunID != "tool-run" || call.CallID != "call_1" || string(call.Arguments) != `{"city":"Paris"}` {
			t.Fatalf("the tool got %+v", call)
		}
		// Several replies to one request: progress messages, then the answer.
		answer := progressThenAnswer(t, sub, 3, func() { weather.release <- struct{}{} })
		if string(answer.Data) != `{"temp_c":21}` || answer.Header.Get(micro.ErrorHeader) != "" {
			t.Fatalf("answer %q %v", answer.Data, answer.Header)
		}
	})

	t.Run("worker: cancels a call in flight", func(t *testing.T) {
		sub := callTool(t, worker, names, "get_weather", "tool-cancelled", "call_2", `{}`)
		weather.nextStart(t)
		cancelToolCall(t, worker, names, "tool-cancelled", "call_2")
		select {
		case cause := <-weather.ended:
			if !errors.Is(cause, tools.ErrCancelled) {
				t.Fatalf("the call ended by %v, want tools.ErrCancelled", cause)
			}
		case <-time.After(deniedWait):
			t.Fatal("the cancel message did not reach the tool")
		}
		answer := progressThenAnswer(t, sub, 0, func() {})
		if answer.Header.Get(micro.ErrorHeader) == "" {
			t.Fatalf("the cancelled call answered %q %v, want an error reply", answer.Data, answer.Header)
		}
	})

	t.Run("worker: a tool nobody serves has no responders", func(t *testing.T) {
		ctx := testContext(t)
		if _, err := worker.nc.RequestWithContext(ctx, names.ToolSubject("nobody_serves"), []byte(`{}`)); !errors.Is(err, nats.ErrNoResponders) {
			t.Fatalf("call of a tool nobody serves: %v, want nats.ErrNoResponders", err)
		}
	})

	// nats micro ls / info / stats, run with the tools user's credentials.
	t.Run("tools: nats micro discovery", func(t *testing.T) {
		x := connectAs(t, s, "tools", "toolspw1")
		ctx := testContext(t)
		for _, verb := range []micro.Verb{micro.PingVerb, micro.InfoVerb, micro.StatsVerb} {
			for _, name := range []string{"", "get_weather"} {
				subject, err := micro.ControlSubject(verb, name, "")
				if err != nil {
					t.Fatal(err)
				}
				m, err := x.nc.RequestWithContext(ctx, subject, nil)
				if err != nil {
					t.Fatalf("%s: %v (refusals %v)", subject, err, x.recorded())
				}
				var info struct {
					Name string `json:"name"`
					ID   string `json:"id"`
				}
				if err := json.Unmarshal(m.Data, &info); err != nil || info.Name != "get_weather" || info.ID != weather.svc.Micro().Info().ID {
					t.Fatalf("%s answered %s (%v)", subject, m.Data, err)
				}
			}
		}
		x.clean(t)
	})

	t.Run("tools and worker: nothing they did was refused", func(t *testing.T) {
		toolsUser.clean(t)
		worker.clean(t)
	})

	t.Run("tools may not", func(t *testing.T) {
		x := connectAs(t, s, "tools", "toolspw1")
		t.Run("read events, runs, state, answers, cancels or other inboxes", func(t *testing.T) {
			for _, subject := range []string{names.EventSubject("*"), names.RunSubject("*"), "$KV.>", names.InputSubject("*"), names.InputRecordsWildcard(),
				names.CancelSubject("*"), names.CancelRecordsWildcard(), names.NoticeWildcard(), names.WatchSubject("*"), "foundryq.live.*", "_INBOX.worker.>", "_INBOX.>", ">"} {
				x.subDenied(t, subject)
			}
		})
		// Calls come to a tool in micro's queue group: a tools user cannot
		// copy every call (its arguments) of every tool.
		t.Run("hear other tools' calls outside the queue group", func(t *testing.T) {
			x.subDenied(t, names.ToolSubject("get_weather"))
			x.subDenied(t, "foundryq.tools.>")
			x.queueSubDenied(t, names.ToolSubject("get_weather"), "spy")
		})
		t.Run("submit, cancel, answer, publish events or touch streams", func(t *testing.T) {
			x.denied(t, names.RunSubject("forged"), func(ctx context.Context) error {
				_, err := x.js.Publish(ctx, names.RunSubject("forged"), []byte(`{"run_id":"forged","model":"m","input":"hi"}`))
				return err
			})
			for _, subject := range []string{names.CancelSubject("forged"), names.InputSubject("forged"), names.EventSubject("forged"), names.NoticeSubject("forged"),
				"$JS.API.STREAM.INFO." + names.RunsStream(), "$JS.API.DIRECT.GET." + names.EventsStream() + "." + names.EventSubject("forged")} {
				x.denied(t, subject, func(ctx context.Context) error {
					_, err := x.request(ctx, subject, map[string]any{})
					return err
				})
			}
		})
		t.Run("call a tool or cancel a call", func(t *testing.T) {
			for _, subject := range []string{names.ToolSubject("get_weather"), names.ToolCancelSubject("tool-run")} {
				x.denied(t, subject, func(ctx context.Context) error {
					_, err := x.nc.RequestWithContext(ctx, subject, []byte(`{}`))
					return err
				})
			}
			weather.idle(t, "tools")
		})
	})

	for _, role := range []struct{ user, password string }{{"client", "clientpw1"}, {"gateway", "gatewaypw1"}, {"worker", "workerpw1"}} {
		t.Run(role.user+" may not serve a tool or hear its calls", func(t *testing.T) {
			x := connectAs(t, s, role.user, role.password)
			x.subDenied(t, "foundryq.tools.>")
			x.subDenied(t, names.ToolSubject("get_weather"))
			x.subDenied(t, names.ToolCancelWildcard())
			x.queueSubDenied(t, names.ToolSubject("get_weather"), "q")
			x.subDenied(t, "$SRV.>")
		})
	}
	for _, role := range []struct{ user, password string }{{"client", "clientpw1"}, {"gateway", "gatewaypw1"}} {
		t.Run(role.user+" may not call a tool or cancel a call", func(t *testing.T) {
			x := connectAs(t, s, role.user, role.password)
			for _, subject := range []string{names.ToolSubject("get_weather"), names.ToolCancelSubject("tool-run")} {
				x.denied(t, subject, func(ctx context.Context) error {
					_, err := x.nc.RequestWithContext(ctx, subject, []byte(`{}`))
					return err
				})
			}
			weather.idle(t, role.user)
		})
	}
}

func submit(t *testing.T, c *events.Client, id string, metadata map[string]string) {
	t.Helper()
	if _, err := c.Submit(testContext(t), events.RunRequest{RunID: id, Model: "m", Input: json.RawMessage(`"hi"`), Metadata: metadata}); err != nil {
		t.Fatalf("submit %s: %v", id, err)
	}
}
