package events_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
)

func TestSubmit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)

	req := validRequest(events.NewRunID())
	req.Metadata = map[string]string{"team": "a"}
	res, err := e.client.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.RunID != req.RunID || res.Stream != "FOUNDRYQ_RUNS" || res.Sequence != 1 {
		t.Fatalf("result %+v", res)
	}
	msg, err := e.res.Runs.GetLastMsgForSubject(ctx, e.names.RunSubject(req.RunID))
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header.Get(jetstream.MsgIDHeader) != req.RunID {
		t.Errorf("Nats-Msg-Id = %q", msg.Header.Get(jetstream.MsgIDHeader))
	}
	got, err := events.DecodeRunMsg(msg.Subject, msg.Data, e.names)
	if err != nil || got.RunID != req.RunID || got.Metadata["team"] != "a" {
		t.Fatalf("stored request %+v, %v", got, err)
	}

	// Second submit of the queued id (same Msg-Id, inside the dedupe window).
	if _, err := e.client.Submit(ctx, req); !errors.Is(err, events.ErrAlreadyQueued) {
		t.Fatalf("second submit: %v, want ErrAlreadyQueued", err)
	}
	// A publish with another Msg-Id is refused by the stream (10077).
	m := nats.NewMsg(e.names.RunSubject(req.RunID))
	m.Data, _ = json.Marshal(req)
	if _, err := e.js.PublishMsg(ctx, m, jetstream.WithMsgID("other")); err == nil {
		t.Fatal("stream accepted a second message for a queued run id")
	}
	info, _ := e.res.Runs.Info(ctx)
	if info.State.Msgs != 1 {
		t.Fatalf("runs stream holds %d messages, want 1", info.State.Msgs)
	}

	// Taken by a worker (acked) but not yet recorded: still in the dedupe
	// window, so the resubmit is dropped and reported as queued.
	job, err := e.res.Consumer.Next(jetstream.FetchContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if err := job.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Submit(ctx, req); !errors.Is(err, events.ErrAlreadyQueued) {
		t.Fatalf("resubmit after take: %v, want ErrAlreadyQueued", err)
	}
}

// A run id runs once, for one request: once a worker has recorded the run,
// the same request again is a retry that returns the existing run, and a
// different request is refused with the run's status, whatever the dedupe
// window says.
func TestSubmitUsedRunID(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	req := validRequest("used1")
	req.Metadata = map[string]string{"k": "v"}
	if _, err := e.store.Create(ctx, events.RunState{RunID: "used1", Status: events.StatusCompleted, Digest: req.Digest()}); err != nil {
		t.Fatal(err)
	}
	res, err := e.client.Submit(ctx, req)
	if err != nil || !res.Existing || res.Status != events.StatusCompleted || res.RunID != "used1" {
		t.Fatalf("retry of the same request: %+v, %v; want the existing completed run", res, err)
	}

	other := req
	other.Input = json.RawMessage(`"something else"`)
	_, err = e.client.Submit(ctx, other)
	var used *events.RunIDUsedError
	if !errors.Is(err, events.ErrRunIDUsed) || !errors.As(err, &used) || used.Status != events.StatusCompleted {
		t.Fatalf("different request under a used id: %v, want a *RunIDUsedError with status completed", err)
	}

	// A record without a digest (written before digests) cannot prove a
	// retry: refused.
	if _, err := e.store.Create(ctx, events.RunState{RunID: "old1", Status: events.StatusFailed}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Submit(ctx, validRequest("old1")); !errors.Is(err, events.ErrRunIDUsed) {
		t.Fatalf("submit over a record without digest: %v, want ErrRunIDUsed", err)
	}
	info, _ := e.res.Runs.Info(ctx)
	if info.State.Msgs != 0 {
		t.Fatalf("runs stream holds %d messages: a refused or retried submit was published", info.State.Msgs)
	}
}

// The digest depends on the request's content, not on how its JSON was
// spaced: what a worker decodes has the digest the client computed.
func TestDigestSurvivesTheWire(t *testing.T) {
	t.Parallel()
	reqs := []events.RunRequest{
		validRequest("d1"),
		{RunID: "d2", Model: "m", Input: json.RawMessage(` [ {"role" : "user", "content":"hi"} ] `),
			Tools:    []json.RawMessage{json.RawMessage(`{ "type":"mcp", "server_label":"x" , "require_approval":"never"}`)},
			Options:  map[string]json.RawMessage{"temperature": json.RawMessage(` 0.5 `), "top_p": json.RawMessage(`1`)},
			Metadata: map[string]string{"b": "2", "a": "1"}, TimeoutSeconds: 30},
	}
	for _, r := range reqs {
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := events.DecodeRunRequest(data)
		if err != nil {
			t.Fatal(err)
		}
		if got.Digest() != r.Digest() {
			t.Errorf("%s: digest after the wire %s, before %s", r.RunID, got.Digest(), r.Digest())
		}
	}
	a, b := reqs[0], reqs[0]
	b.Input = json.RawMessage(`"other"`)
	if a.Digest() == b.Digest() {
		t.Error("different inputs share a digest")
	}
}

func TestSubmitAlreadyQueuedAfterDedupeWindow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	req := validRequest("w1")
	// Another producer queued the run with a different Msg-Id, so only the
	// per-subject limit (10077) can refuse our submit.
	m := nats.NewMsg(e.names.RunSubject("w1"))
	m.Data, _ = json.Marshal(req)
	if _, err := e.js.PublishMsg(ctx, m, jetstream.WithMsgID("producer-x")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Submit(ctx, req); !errors.Is(err, events.ErrAlreadyQueued) {
		t.Fatalf("err = %v, want ErrAlreadyQueued", err)
	}
}

func TestSubmitInvalidPublishesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	bad := []events.RunRequest{
		{RunID: "x1", Input: []byte(`"hi"`)},
		{RunID: "x.1", Model: "m", Input: []byte(`"hi"`)},
		{RunID: "x2", Model: "m"},
		{RunID: "x3", Model: "m", Input: []byte(`"hi"`), Metadata: map[string]string{"run_id": "x"}},
		{RunID: "x4", Model: "m", Input: []byte(`"hi"`), Options: map[string]json.RawMessage{"store": []byte("false")}},
	}
	for _, r := range bad {
		_, err := e.client.Submit(ctx, r)
		var ve *events.ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%+v: err = %v, want a *ValidationError", r, err)
		}
	}
	info, err := e.res.Runs.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 || info.State.LastSeq != 0 {
		t.Fatalf("runs stream state %+v after invalid submits", info.State)
	}
}

func TestNewClientConfig(t *testing.T) {
	t.Parallel()
	if _, err := events.NewClient(nil, events.ClientConfig{}); err == nil {
		t.Error("nil conn accepted")
	}
	e := setup(t)
	if _, err := events.NewClient(e.nc, events.ClientConfig{Prefix: "a..b"}); err == nil {
		t.Error("bad prefix accepted")
	}
	if _, err := events.NewClient(e.nc, events.ClientConfig{HeartbeatInterval: -1}); err == nil {
		t.Error("negative HeartbeatInterval accepted")
	}
}

func TestClientState(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	if _, _, err := e.client.State(ctx, "none"); !errors.Is(err, events.ErrStateNotFound) {
		t.Fatalf("err = %v", err)
	}
	if _, err := e.store.Create(ctx, events.RunState{RunID: "s", Status: events.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	st, rev, err := e.client.State(ctx, "s")
	if err != nil || rev == 0 || st.Status != events.StatusRunning {
		t.Fatalf("%+v %d %v", st, rev, err)
	}
}

// A runs stream at its max_bytes refuses a publish with the code of a run
// id still queued (10077); Submit must say the stream is full, not that
// the run is queued (nothing was).
func TestSubmitRunsStreamFull(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	capStream(t, ctx, e.js, e.res.Runs, 4<<10)
	big := func(id string) events.RunRequest {
		req := validRequest(id)
		req.Input = json.RawMessage(`"` + strings.Repeat("x", 1000) + `"`)
		return req
	}
	for i := 0; ; i++ {
		if i > 100 {
			t.Fatal("the runs stream never filled up")
		}
		if _, err := e.client.Submit(ctx, big("fill"+strconv.Itoa(i))); err != nil {
			break
		}
	}
	_, err := e.client.Submit(ctx, big("after-full"))
	if err == nil || errors.Is(err, events.ErrAlreadyQueued) || !strings.Contains(err.Error(), "maximum bytes exceeded") {
		t.Fatalf("submit to a full runs stream: %v; want the stream's refusal, not ErrAlreadyQueued", err)
	}
}

// The client-writable streams are bounded by default (messages; bytes by
// the account's max_file, or RunsMaxBytes when set: see
// TestSubmitRunsStreamFull), and a runs stream at its message limit
// refuses the next request with the stream's words while every queued
// one stays.
func TestClientWritableStreamsBounded(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]jetstream.StreamConfig{
		"runs":    events.RunsStreamConfig(events.Names{}, events.ProvisionConfig{}),
		"cancels": events.CancelsStreamConfig(events.Names{}, events.ProvisionConfig{}),
		"inputs":  events.InputsStreamConfig(events.Names{}, events.ProvisionConfig{}),
	} {
		if cfg.MaxMsgs <= 0 || cfg.Discard != jetstream.DiscardNew {
			t.Errorf("%s stream: max_msgs %d discard %v, want a limit with discard new", name, cfg.MaxMsgs, cfg.Discard)
		}
	}
	for name, cfg := range map[string]events.ProvisionConfig{
		"RunsMaxMsgs -2":    {RunsMaxMsgs: -2},
		"InputsMaxMsgs -2":  {InputsMaxMsgs: -2},
		"InputsMaxBytes -2": {InputsMaxBytes: -2},
	} {
		if err := cfg.WithDefaults().Validate(); !errors.Is(err, events.ErrInvalidProvisionConfig) {
			t.Errorf("%s: %v, want ErrInvalidProvisionConfig", name, err)
		}
	}

	_, nc := natsembed.RunTest(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	res, err := consumer.Provision(ctx, js, events.Names{}, consumer.ProvisionConfig{RunsMaxMsgs: 3})
	if err != nil {
		t.Fatal(err)
	}
	c, err := events.NewClient(nc, events.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := c.Submit(ctx, validRequest("lim"+strconv.Itoa(i))); err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	_, err = c.Submit(ctx, validRequest("lim-over"))
	if !errors.Is(err, events.ErrQueueFull) || !strings.Contains(err.Error(), "maximum messages exceeded") {
		t.Fatalf("submit past the limit: %v; want the stream's refusal", err)
	}
	info, err := res.Runs.Info(ctx)
	if err != nil || info.State.Msgs != 3 {
		t.Fatalf("runs stream after the refusal: %+v, %v; want the 3 queued requests kept", info.State, err)
	}
}
