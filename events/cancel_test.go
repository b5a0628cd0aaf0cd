package events_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
)

func TestDecodeCancelRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		body   string
		reason string
		is     error
	}{
		{"empty body", ``, "", nil},
		{"empty object", `{}`, "", nil},
		{"reason", `{"reason":"user pressed stop"}`, "user pressed stop", nil},
		{"unknown field", `{"reason":"x","force":true}`, "", events.ErrUnknownField},
		{"reason not string", `{"reason":1}`, "", events.ErrBadCancelReason},
		{"reason too long", `{"reason":"` + strings.Repeat("x", 513) + `"}`, "", events.ErrBadCancelReason},
		{"malformed", `{"reason":`, "", events.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := events.DecodeCancelRequest([]byte(tt.body))
			if !errors.Is(err, tt.is) || (tt.is == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.is)
			}
			if err == nil && r.Reason != tt.reason {
				t.Errorf("reason = %q, want %q", r.Reason, tt.reason)
			}
		})
	}
}

func TestDecodeCancelReply(t *testing.T) {
	t.Parallel()
	r, err := events.DecodeCancelReply([]byte(`{"run_id":"r1","result":"already_finished","terminal":"run.completed"}`))
	if err != nil || r.Result != events.CancelAlreadyFinished || r.Terminal != events.TypeRunCompleted {
		t.Fatalf("%+v %v", r, err)
	}
	if _, err := events.DecodeCancelReply([]byte(`{"run_id":"r1","result":"maybe"}`)); err == nil {
		t.Error("unknown result accepted")
	}
	if _, err := events.DecodeCancelReply([]byte(`nope`)); err == nil {
		t.Error("malformed reply accepted")
	}
}

func FuzzDecodeCancelRequest(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"reason":"x"}`, `{"reason":1}`, `{"x":1}`, `null`, `{"reason":"\u00e9\ud800"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := events.DecodeCancelRequest(data)
		if err != nil {
			var ve *events.ValidationError
			if !errors.As(err, &ve) || ve.Field == "" {
				t.Fatalf("error is not a *ValidationError naming a field: %#v", err)
			}
			return
		}
		enc, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := events.DecodeCancelRequest(enc)
		if err != nil || r2 != r {
			t.Fatalf("round trip: %+v -> %s -> %+v, %v", r, enc, r2, err)
		}
	})
}

// With no worker running, Cancel stores the cancel in the cancels stream
// (the next worker to take the run applies it), answers from the state
// bucket, and never writes run state.
func TestCancelNoResponders(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)

	record := func(t *testing.T, runID string) (events.CancelRequest, bool) {
		t.Helper()
		m, err := e.res.Cancels.GetLastMsgForSubject(ctx, e.names.CancelRecordSubject(runID))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return events.CancelRequest{}, false
		}
		if err != nil {
			t.Fatal(err)
		}
		req, err := events.DecodeCancelRequest(m.Data)
		if err != nil {
			t.Fatalf("stored cancel record: %v", err)
		}
		return req, true
	}

	t.Run("queued run", func(t *testing.T) {
		if _, err := e.client.Submit(ctx, validRequest("q1")); err != nil {
			t.Fatal(err)
		}
		reply, err := e.client.Cancel(ctx, "q1", "changed my mind")
		if err != nil || reply.Result != events.CancelCancelling {
			t.Fatalf("reply %+v, err %v; want cancelling", reply, err)
		}
		if req, ok := record(t, "q1"); !ok || req.Reason != "changed my mind" {
			t.Fatalf("cancel record %+v (stored %v), want the reason", req, ok)
		}
		if _, _, err := e.store.Get(ctx, "q1"); !errors.Is(err, events.ErrStateNotFound) {
			t.Fatalf("the client wrote run state: %v", err)
		}
		// Idempotent: a second cancel keeps the first record.
		reply, err = e.client.Cancel(ctx, "q1", "again")
		if err != nil || reply.Result != events.CancelCancelling {
			t.Fatalf("second cancel: %+v %v", reply, err)
		}
		if req, _ := record(t, "q1"); req.Reason != "changed my mind" {
			t.Errorf("second cancel replaced the record: %+v", req)
		}
	})

	t.Run("running state is left alone", func(t *testing.T) {
		started := time.Now().UTC().Truncate(time.Millisecond)
		want := events.RunState{RunID: "r1", Status: events.StatusRunning, ResponseID: "resp_1", Owner: "w1", Attempt: 2, StartedAt: &started}
		if _, err := e.store.Create(ctx, want); err != nil {
			t.Fatal(err)
		}
		_, rev, _ := e.store.Get(ctx, "r1")
		reply, err := e.client.Cancel(ctx, "r1", "")
		if err != nil || reply.Result != events.CancelCancelling {
			t.Fatalf("reply %+v, err %v", reply, err)
		}
		if _, rev2, _ := e.store.Get(ctx, "r1"); rev2 != rev {
			t.Fatalf("state revision %d -> %d: the client wrote run state", rev, rev2)
		}
		if _, ok := record(t, "r1"); !ok {
			t.Fatal("no cancel record stored")
		}
	})

	t.Run("finished run", func(t *testing.T) {
		if _, err := e.store.Create(ctx, events.RunState{RunID: "f1", Status: events.StatusCompleted, Terminal: events.TypeRunCompleted, UpstreamStatus: "completed"}); err != nil {
			t.Fatal(err)
		}
		reply, err := e.client.Cancel(ctx, "f1", "")
		if err != nil || reply.Result != events.CancelAlreadyFinished || reply.Terminal != events.TypeRunCompleted || reply.UpstreamStatus != "completed" {
			t.Fatalf("reply %+v, err %v; want already_finished", reply, err)
		}
	})

	t.Run("bad run id or reason", func(t *testing.T) {
		if _, err := e.client.Cancel(ctx, "a.b", ""); !errors.Is(err, events.ErrBadRunID) {
			t.Fatalf("err = %v", err)
		}
		if _, err := e.client.Cancel(ctx, "long", strings.Repeat("x", events.MaxCancelReasonLen+1)); !errors.Is(err, events.ErrBadCancelReason) {
			t.Fatalf("err = %v", err)
		}
		if _, ok := record(t, "long"); ok {
			t.Fatal("an invalid cancel was stored")
		}
	})
}

// Without a cancels stream (no worker ever provisioned), Cancel fails with
// an error that says so instead of pretending the cancel is on record.
func TestCancelWithoutStream(t *testing.T) {
	t.Parallel()
	_, nc := natsembed.RunTest(t)
	c, err := events.NewClient(nc, events.ClientConfig{CancelTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Cancel(testCtx(t), "r1", "")
	if err == nil || !strings.Contains(err.Error(), "FOUNDRYQ_CANCELS") {
		t.Fatalf("err = %v, want an error naming the cancels stream", err)
	}
}

func TestCancelWithResponder(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)

	var mu sync.Mutex
	var got []events.CancelRequest
	sub, err := e.nc.QueueSubscribe(e.names.CancelWildcard(), e.names.WorkerQueueGroup(), func(m *nats.Msg) {
		req, err := events.DecodeCancelRequest(m.Data)
		if err != nil {
			t.Errorf("worker got a bad cancel request: %v", err)
		}
		mu.Lock()
		got = append(got, req)
		mu.Unlock()
		id, _ := e.names.RunIDFromSubject(m.Subject)
		reply := events.CancelReply{RunID: id, Result: events.CancelCancelling, UpstreamStatus: "cancelled"}
		if id == "broken" {
			reply = events.CancelReply{RunID: id, Error: "state bucket unavailable"}
		}
		data, _ := json.Marshal(reply)
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	reply, err := e.client.Cancel(ctx, "live1", "stop")
	if err != nil {
		t.Fatal(err)
	}
	if reply != (events.CancelReply{RunID: "live1", Result: events.CancelCancelling, UpstreamStatus: "cancelled"}) {
		t.Fatalf("reply = %+v", reply)
	}
	mu.Lock()
	if len(got) != 1 || got[0].Reason != "stop" {
		t.Errorf("responder got %+v", got)
	}
	mu.Unlock()

	reply, err = e.client.Cancel(ctx, "broken", "")
	if !errors.Is(err, events.ErrCancelFailed) || reply.Error == "" {
		t.Fatalf("reply %+v, err %v; want ErrCancelFailed", reply, err)
	}
}

// FinishedReply answers a cancel of a run that has ended: the run's own
// cancel (the same client id) is cancelling with the outcome, another one
// already_finished, and a run cancelled before it started cancelled.
func TestFinishedReply(t *testing.T) {
	t.Parallel()
	cancelled := events.RunState{RunID: "r", Status: events.StatusCancelled, Terminal: events.TypeRunCancelled,
		ResponseID: "resp", UpstreamStatus: "cancelled", Cancel: &events.CancelRecord{Reason: events.ReasonRequested, ID: "c1"}}
	for _, tt := range []struct {
		name string
		st   events.RunState
		id   string
		want events.CancelResult
	}{
		{"this cancel ended it", cancelled, "c1", events.CancelCancelling},
		{"another cancel ended it", cancelled, "c2", events.CancelAlreadyFinished},
		{"a client without an id", cancelled, "", events.CancelAlreadyFinished},
		{"cancelled before it started", events.RunState{RunID: "r", Status: events.StatusCancelled, Terminal: events.TypeRunCancelled}, "c1", events.CancelCancelled},
		{"completed", events.RunState{RunID: "r", Status: events.StatusCompleted, Terminal: events.TypeRunCompleted, ResponseID: "resp"}, "c1", events.CancelAlreadyFinished},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := events.FinishedReply(tt.st, tt.id)
			if r.Result != tt.want || r.Terminal != tt.st.Terminal || r.RunID != "r" {
				t.Fatalf("%+v, want result %s with terminal %s", r, tt.want, tt.st.Terminal)
			}
		})
	}
}
