package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/gateway"
	"github.com/foundryq/foundryq/internal/testkit"
)

func TestCreateRun(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	g := e.gateway(gateway.Config{})

	t.Run("run_id made when absent, then retry and conflict", func(t *testing.T) {
		req := runRequest(nil)
		r := g.do(t, "POST", "/v1/runs", req)
		if r.status != http.StatusCreated {
			t.Fatalf("POST: %d %s", r.status, r.body)
		}
		var cr gateway.CreateResponse
		r.decode(t, &cr)
		if !strings.HasPrefix(cr.RunID, "run_") || !events.ValidRunID(cr.RunID) || cr.Status != events.StatusQueued || cr.Existing {
			t.Fatalf("create: %+v", cr)
		}
		if loc := r.header.Get("Location"); loc != "/v1/runs/"+cr.RunID {
			t.Fatalf("Location %q", loc)
		}
		evs := e.watchAll(cr.RunID)
		if evs[len(evs)-1].Type != events.TypeRunCompleted {
			t.Fatalf("run ended %s", evs[len(evs)-1].Type)
		}

		// The same request under the same id: the existing run, 200.
		req["run_id"] = cr.RunID
		r = g.do(t, "POST", "/v1/runs", req)
		var again gateway.CreateResponse
		r.decode(t, &again)
		if r.status != http.StatusOK || !again.Existing || again.Status != events.StatusCompleted || again.RunID != cr.RunID {
			t.Fatalf("retry: %d %+v", r.status, again)
		}
		// A different request under it: 409.
		req["input"] = "something else"
		r = g.do(t, "POST", "/v1/runs", req)
		ae := r.apiError(t)
		if r.status != http.StatusConflict || ae.Code != gateway.CodeRunIDUsed || ae.RunID != cr.RunID || ae.RunStatus != "completed" {
			t.Fatalf("different request: %d %+v", r.status, ae)
		}
	})

	t.Run("validation errors name the field", func(t *testing.T) {
		cases := []struct {
			name, body, field string
		}{
			{"malformed", `{"model":`, "body"},
			{"not an object", `[1]`, "body"},
			{"unknown field", `{"model":"m","input":"x","color":"red"}`, "color"},
			{"reserved metadata", `{"model":"m","input":"x","metadata":{"run_id":"y"}}`, "metadata.run_id"},
			{"no input", `{"model":"m"}`, "input"},
			{"model and agent", `{"model":"m","agent":{"name":"a"},"input":"x"}`, "model"},
			{"bad run id", `{"run_id":"a b","model":"m","input":"x"}`, "run_id"},
			{"key twice", `{"model":"m","model":"n","input":"x"}`, "model"},
			{"trailing data", `{"model":"m","input":"x"} {}`, "body"},
			{"callback_url not a string", `{"model":"m","input":"x","callback_url":1}`, "callback_url"},
			{"callback_url without callbacks", `{"model":"m","input":"x","callback_url":"https://example.com/cb"}`, "callback_url"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				r := g.do(t, "POST", "/v1/runs", c.body)
				ae := r.apiError(t)
				if r.status != http.StatusBadRequest || ae.Code != gateway.CodeInvalidRequest || ae.Field != c.field || ae.Reason == "" {
					t.Fatalf("%d %+v, want 400 invalid_request on %s", r.status, ae, c.field)
				}
			})
		}
	})

	t.Run("refusals", func(t *testing.T) {
		r := g.do(t, "POST", "/v1/runs", "model=m", "Content-Type", "application/x-www-form-urlencoded")
		if ae := r.apiError(t); r.status != http.StatusUnsupportedMediaType || ae.Code != gateway.CodeUnsupportedMedia {
			t.Fatalf("form body: %d %+v", r.status, ae)
		}
		big := `{"model":"m","input":"` + strings.Repeat("x", gateway.DefaultMaxBodyBytes) + `"}`
		r = g.do(t, "POST", "/v1/runs", big)
		if ae := r.apiError(t); r.status != http.StatusRequestEntityTooLarge || ae.Code != gateway.CodeTooLarge {
			t.Fatalf("large body: %d %+v", r.status, ae)
		}
		r = g.do(t, "PUT", "/v1/runs", "{}")
		if ae := r.apiError(t); r.status != http.StatusMethodNotAllowed || ae.Code != gateway.CodeMethodNotAllowed || r.header.Get("Allow") != "GET, POST" {
			t.Fatalf("PUT /v1/runs: %d %+v allow %q", r.status, ae, r.header.Get("Allow"))
		}
		r = g.do(t, "DELETE", "/v1/runs/r1", nil)
		if ae := r.apiError(t); r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") != "GET" {
			t.Fatalf("DELETE /v1/runs/r1: %d %+v", r.status, ae)
		}
		r = g.do(t, "GET", "/v1/runs/r1/cancel", nil)
		if ae := r.apiError(t); r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") != "POST" {
			t.Fatalf("GET cancel: %d %+v", r.status, ae)
		}
		r = g.do(t, "GET", "/v1/nothing", nil)
		if ae := r.apiError(t); r.status != http.StatusNotFound || ae.Code != gateway.CodeNotFound {
			t.Fatalf("GET /v1/nothing: %d %+v", r.status, ae)
		}
		r = g.do(t, "GET", "/v1/runs/no-such-run", nil)
		if ae := r.apiError(t); r.status != http.StatusNotFound || ae.RunID != "no-such-run" {
			t.Fatalf("unknown run: %d %+v", r.status, ae)
		}
		r = g.do(t, "GET", "/v1/runs/bad%20id", nil)
		if ae := r.apiError(t); r.status != http.StatusBadRequest || ae.Field != "run_id" {
			t.Fatalf("bad run id: %d %+v", r.status, ae)
		}
	})
}

// With no worker a run stays queued: GET says so, a second submit of its
// id is 409 run_queued, and the listing (state records only) omits it.
func TestQueuedRun(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	g := e.gateway(gateway.Config{})
	req := runRequest(nil)
	req["run_id"] = "waiting"
	g.create(t, req)
	r := g.do(t, "GET", "/v1/runs/waiting", nil)
	var st events.RunState
	r.decode(t, &st)
	if r.status != http.StatusOK || st.Status != events.StatusQueued || st.RunID != "waiting" || st.CreatedAt.IsZero() ||
		strings.Contains(string(r.body), `"queue"`) {
		t.Fatalf("GET queued run (no worker to tell where it waits): %d %s", r.status, r.body)
	}
	r = g.do(t, "POST", "/v1/runs", req)
	if ae := r.apiError(t); r.status != http.StatusConflict || ae.Code != gateway.CodeRunQueued {
		t.Fatalf("resubmit of a queued id: %d %+v", r.status, ae)
	}
	// Once a worker takes it, it runs to its end.
	e.startWorker(consumerConfig())
	evs := e.watchAll("waiting")
	if evs[len(evs)-1].Type != events.TypeRunCompleted {
		t.Fatalf("ended %s", evs[len(evs)-1].Type)
	}
	r = g.do(t, "GET", "/v1/runs/waiting", nil)
	r.decode(t, &st)
	if st.Status != events.StatusCompleted || st.End == nil || st.Digest == "" {
		t.Fatalf("GET finished run: %s", r.body)
	}
}

// A queued run's GET says where it waits, as a worker tells it: behind
// the runs submitted before it in its lane.
func TestQueuedRunSaysWhereItWaits(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	e.startWorker(consumer.Config{Concurrency: 1})
	g := e.gateway(gateway.Config{})
	unblock := g.block(t)
	g.createIDs(t, "first", "second")
	var run gateway.Run
	testkit.Eventually(t, 30*time.Second, "the second run's place in its lane", func() bool {
		r := g.do(t, "GET", "/v1/runs/second", nil)
		run = gateway.Run{}
		r.decode(t, &run)
		return run.Queue != nil && run.Queue.Where == events.WhereLane
	})
	if run.Status != events.StatusQueued || run.Queue.Position != 2 || run.Queue.LaneWaiting != 2 || run.Queue.SubmittedAt == nil {
		t.Fatalf("GET of the second queued run: %+v, queue %+v", run.RunState, *run.Queue)
	}
	unblock()
}

// block starts a long run and waits until it runs: on a worker of
// concurrency 1, the runs created next wait in the queue. unblock cancels
// it.
func (g *gw) block(t *testing.T) (unblock func()) {
	t.Helper()
	id := g.create(t, runRequest(map[string]string{foundrytest.KeyTokens: "5000", foundrytest.KeyTokenMS: "20"})).RunID
	testkit.Eventually(t, 30*time.Second, "the blocking run to start", func() bool {
		var st events.RunState
		g.do(t, "GET", "/v1/runs/"+id, nil).decode(t, &st)
		return st.Status == events.StatusRunning
	})
	return func() {
		t.Helper()
		if r := g.do(t, "POST", "/v1/runs/"+id+"/cancel", nil); r.status != http.StatusOK {
			t.Fatalf("cancel the blocking run: %d %s", r.status, r.body)
		}
	}
}

// createIDs creates a short run for each run id of ids.
func (g *gw) createIDs(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		req := runRequest(map[string]string{foundrytest.KeyTokens: "3"})
		req["run_id"] = id
		g.create(t, req)
	}
}

func TestListRuns(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	g := e.gateway(gateway.Config{})
	start := time.Now()
	var ids []string
	for range 3 {
		ids = append(ids, g.create(t, runRequest(nil)).RunID)
	}
	for _, id := range ids {
		e.watchAll(id)
	}
	list := func(q string) gateway.RunList {
		t.Helper()
		r := g.do(t, "GET", "/v1/runs"+q, nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET /v1/runs%s: %d %s", q, r.status, r.body)
		}
		var l gateway.RunList
		r.decode(t, &l)
		return l
	}
	testkit.Eventually(t, 20*time.Second, "three completed runs listed", func() bool { return len(list("?status=completed").Runs) == 3 })
	if l := list("?status=completed,failed&limit=2"); len(l.Runs) != 2 || l.Runs[0].UpdatedAt.Before(l.Runs[1].UpdatedAt) {
		t.Fatalf("limit 2, newest first: %+v", l.Runs)
	}
	if l := list("?status=running"); len(l.Runs) != 0 {
		t.Fatalf("running: %+v", l.Runs)
	}
	// A run whose cancel is recorded while its owner stops it upstream.
	kv, err := mustJS(t, e.nc).KeyValue(context.Background(), events.Names{}.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if _, err := kv.Create(context.Background(), "stopping1", []byte(mustJSON(t, events.RunState{RunID: "stopping1", Status: events.StatusCancelling,
		Owner: "w9", Cancel: &events.CancelRecord{Reason: events.ReasonRequested, At: now}, CreatedAt: now, UpdatedAt: now}))); err != nil {
		t.Fatal(err)
	}
	if l := list("?status=cancelling"); len(l.Runs) != 1 || l.Runs[0].RunID != "stopping1" || l.Runs[0].Status != events.StatusCancelling {
		t.Fatalf("cancelling: %+v", l.Runs)
	}
	if l := list("?status=running,cancelling"); len(l.Runs) != 1 {
		t.Fatalf("running or cancelling: %+v", l.Runs)
	}
	if l := list("?since=" + start.Add(-time.Second).UTC().Format(time.RFC3339)); len(l.Runs) != 4 {
		t.Fatalf("since before the runs: %d runs", len(l.Runs))
	}
	if l := list("?since=" + time.Now().Add(time.Hour).UTC().Format(time.RFC3339)); len(l.Runs) != 0 {
		t.Fatalf("since the future: %d runs", len(l.Runs))
	}
	if l := list("?since=1h"); len(l.Runs) != 4 {
		t.Fatalf("since=1h: %d runs", len(l.Runs))
	}
	for _, c := range []struct{ q, field string }{
		{"?limit=0", "limit"}, {"?limit=x", "limit"}, {"?limit=1001", "limit"},
		{"?status=done", "status"}, {"?since=yesterday", "since"},
	} {
		r := g.do(t, "GET", "/v1/runs"+c.q, nil)
		if ae := r.apiError(t); r.status != http.StatusBadRequest || ae.Code != gateway.CodeBadParameter || ae.Field != c.field {
			t.Errorf("%s: %d %+v", c.q, r.status, ae)
		}
	}
	if ae := g.do(t, "GET", "/v1/runs?status=done", nil).apiError(t); !strings.Contains(ae.Message, "cancelling") {
		t.Errorf("unknown status: %q does not list the statuses", ae.Message)
	}
}

// A caller's W3C traceparent goes on with the run request the gateway
// submits (a worker's run span continues it).
func TestCreateRunContinuesTheCallersTrace(t *testing.T) {
	t.Parallel()
	e := setup(t, 0) // no worker: the request stays in the stream
	g := e.gateway(gateway.Config{})
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	cr := g.create(t, runRequest(nil), "traceparent", parent)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := mustJS(t, e.nc).Stream(ctx, events.Names{}.RunsStream())
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, events.Names{}.RunSubject(cr.RunID))
	if err != nil {
		t.Fatal(err)
	}
	// No tracer provider is set up here: the submit span is a no-op that
	// carries the caller's span context on unchanged.
	if got := msg.Header.Get("traceparent"); got != parent {
		t.Fatalf("run request traceparent %q, want the caller's %q", got, parent)
	}
}

// A run created through the gateway is scheduled under the fairness key
// its body names, or else under its tenant's name; the worker records
// the key and the priority.
func TestCreateRunFairnessKey(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	g := tokenGateway(t, e, gateway.Config{})
	auth := []string{"Authorization", "Bearer token-a"}
	for _, c := range []struct {
		id, key, prio string
		wantKey       string
		wantPrio      events.Priority
	}{
		{"fair-tenant", "", "", "acme", events.PriorityNormal},
		{"fair-own", "team-x", "high", "team-x", events.PriorityHigh},
	} {
		req := runRequest(nil)
		req["run_id"] = c.id
		if c.key != "" {
			req["fairness_key"], req["priority"] = c.key, c.prio
		}
		if r := g.do(t, "POST", "/v1/runs", req, auth...); r.status != http.StatusCreated {
			t.Fatalf("%s: POST %d %s", c.id, r.status, r.body)
		}
		var st events.RunState
		testkit.Eventually(t, 30*time.Second, c.id+" to complete", func() bool {
			r := g.do(t, "GET", "/v1/runs/"+c.id, nil, auth...)
			r.decode(t, &st)
			return st.Status == events.StatusCompleted
		})
		if st.FairnessKey != c.wantKey || st.Priority != c.wantPrio {
			t.Errorf("%s: recorded key %q priority %q, want %q %q", c.id, st.FairnessKey, st.Priority, c.wantKey, c.wantPrio)
		}
	}
	r := g.do(t, "POST", "/v1/runs", `{"model":"m","input":"x","priority":"urgent"}`, auth...)
	if ae := r.apiError(t); r.status != http.StatusBadRequest || ae.Field != "priority" {
		t.Fatalf("priority urgent: %d %+v", r.status, ae)
	}
}
