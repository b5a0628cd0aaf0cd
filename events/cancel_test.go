package events_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foundryq/foundryq/events"
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

func TestCancelNoResponders(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)

	t.Run("unknown run", func(t *testing.T) {
		reply, err := e.client.Cancel(ctx, "nobody", "")
		if err != nil || reply.Result != events.CancelNotFound || reply.RunID != "nobody" {
			t.Fatalf("reply %+v, err %v; want not_found", reply, err)
		}
		if _, _, err := e.store.Get(ctx, "nobody"); !errors.Is(err, events.ErrStateNotFound) {
			t.Errorf("a state was written for an unknown run: %v", err)
		}
	})

	t.Run("queued run", func(t *testing.T) {
		if _, err := e.client.Submit(ctx, validRequest("q1")); err != nil {
			t.Fatal(err)
		}
		reply, err := e.client.Cancel(ctx, "q1", "changed my mind")
		if err != nil || reply.Result != events.CancelCancelling {
			t.Fatalf("reply %+v, err %v; want cancelling", reply, err)
		}
		st, _, err := e.store.Get(ctx, "q1")
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != events.StatusQueued || st.Cancel == nil || st.Cancel.Reason != events.ReasonRequested || st.Cancel.Note != "changed my mind" || st.Cancel.At.IsZero() {
			t.Fatalf("state %+v, want queued with the cancel recorded", st)
		}
		// Idempotent: a second cancel keeps the first record.
		reply, err = e.client.Cancel(ctx, "q1", "again")
		if err != nil || reply.Result != events.CancelCancelling {
			t.Fatalf("second cancel: %+v %v", reply, err)
		}
		st2, _, _ := e.store.Get(ctx, "q1")
		if st2.Cancel.Note != "changed my mind" {
			t.Errorf("second cancel overwrote the record: %+v", st2.Cancel)
		}
	})

	t.Run("running state keeps its fields", func(t *testing.T) {
		started := time.Now().UTC().Truncate(time.Millisecond)
		if _, err := e.store.Create(ctx, events.RunState{RunID: "r1", Status: events.StatusRunning, ResponseID: "resp_1", Owner: "w1", Attempt: 2, StartedAt: &started}); err != nil {
			t.Fatal(err)
		}
		reply, err := e.client.Cancel(ctx, "r1", "")
		if err != nil || reply.Result != events.CancelCancelling {
			t.Fatalf("reply %+v, err %v", reply, err)
		}
		st, _, _ := e.store.Get(ctx, "r1")
		if st.Status != events.StatusRunning || st.ResponseID != "resp_1" || st.Owner != "w1" || st.Attempt != 2 ||
			st.StartedAt == nil || !st.StartedAt.Equal(started) || st.Cancel == nil || st.Cancel.Reason != events.ReasonRequested {
			t.Fatalf("state %+v", st)
		}
	})

	t.Run("finished run", func(t *testing.T) {
		if _, err := e.store.Create(ctx, events.RunState{RunID: "f1", Status: events.StatusCompleted, Terminal: events.TypeRunCompleted, UpstreamStatus: "completed"}); err != nil {
			t.Fatal(err)
		}
		reply, err := e.client.Cancel(ctx, "f1", "")
		if err != nil || reply.Result != events.CancelAlreadyFinished || reply.Terminal != events.TypeRunCompleted {
			t.Fatalf("reply %+v, err %v; want already_finished", reply, err)
		}
		st, _, _ := e.store.Get(ctx, "f1")
		if st.Cancel != nil {
			t.Errorf("cancel recorded on a finished run: %+v", st)
		}
	})

	t.Run("bad run id", func(t *testing.T) {
		if _, err := e.client.Cancel(ctx, "a.b", ""); !errors.Is(err, events.ErrBadRunID) {
			t.Fatalf("err = %v", err)
		}
	})
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
