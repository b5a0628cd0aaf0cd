package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/gateway"
)

// Stop in the middle: the cancel reaches Foundry, the stream ends with
// run.cancelled carrying Foundry's status and usage, and the emulator
// generated nothing after the cancel.
func TestCancelRun(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	g := e.gateway(gateway.Config{})
	cr := g.create(t, runRequest(map[string]string{"emu_tokens": "100000", "emu_token_ms": "10"}))
	path := "/v1/runs/" + cr.RunID
	s := g.stream(t, path+"/events")
	deltas := 0
	for deltas < 3 {
		ev, _, err := s.nextEvent(t)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == events.TypeTextDelta {
			deltas++
		}
	}
	r := g.do(t, "POST", path+"/cancel", map[string]string{"reason": "user pressed stop"})
	var reply events.CancelReply
	r.decode(t, &reply)
	if r.status != http.StatusOK || reply.Result != events.CancelCancelling || reply.RunID != cr.RunID {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	rest := s.readAll(t)
	end := rest[len(rest)-1]
	if end.Type != events.TypeRunCancelled || end.Reason != events.ReasonRequested || end.UpstreamStatus != "cancelled" || end.Usage == nil || end.Usage.OutputTokens == 0 {
		t.Fatalf("end: %+v", end)
	}
	if st := e.emu.Stats(); st.TokensAfterCancel != 0 || st.ResponsesCancelled != 1 {
		t.Fatalf("emulator: %d tokens after the cancel, %d responses cancelled", st.TokensAfterCancel, st.ResponsesCancelled)
	}
	// Again: already finished.
	r = g.do(t, "POST", path+"/cancel", nil)
	r.decode(t, &reply)
	if r.status != http.StatusOK || reply.Result != events.CancelAlreadyFinished || reply.Terminal != events.TypeRunCancelled {
		t.Fatalf("second cancel: %d %s", r.status, r.body)
	}

	t.Run("refusals", func(t *testing.T) {
		r := g.do(t, "POST", "/v1/runs/no-such-run/cancel", nil)
		if ae := r.apiError(t); r.status != http.StatusNotFound || ae.RunID != "no-such-run" {
			t.Fatalf("unknown run: %d %+v", r.status, ae)
		}
		r = g.do(t, "POST", path+"/cancel", map[string]string{"reason": strings.Repeat("x", events.MaxCancelReasonLen+1)})
		if ae := r.apiError(t); r.status != http.StatusBadRequest || ae.Field != "reason" {
			t.Fatalf("long reason: %d %+v", r.status, ae)
		}
		r = g.do(t, "POST", path+"/cancel", `{"why":"x"}`)
		if ae := r.apiError(t); r.status != http.StatusBadRequest || ae.Field != "why" {
			t.Fatalf("unknown field: %d %+v", r.status, ae)
		}
		r = g.do(t, "POST", path+"/cancel", "stop", "Content-Type", "text/plain")
		if ae := r.apiError(t); r.status != http.StatusUnsupportedMediaType {
			t.Fatalf("text body: %d %+v", r.status, ae)
		}
	})
}

// A cancel of a run no worker has taken yet ends it before it reaches
// Foundry.
func TestCancelQueuedRun(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	g := e.gateway(gateway.Config{CancelTimeout: 2 * time.Second})
	cr := g.create(t, runRequest(nil))
	r := g.do(t, "POST", "/v1/runs/"+cr.RunID+"/cancel", nil)
	var reply events.CancelReply
	r.decode(t, &reply)
	if r.status != http.StatusOK || reply.Result != events.CancelCancelling {
		t.Fatalf("cancel with no worker: %d %s", r.status, r.body)
	}
	e.startWorker(consumerConfig())
	evs := g.stream(t, "/v1/runs/"+cr.RunID+"/events").readAll(t)
	if end := evs[len(evs)-1]; end.Type != events.TypeRunCancelled || end.UpstreamStatus != "" {
		t.Fatalf("end %+v", end)
	}
	if n := e.emu.Stats().ResponsesCreated; n != 0 {
		t.Fatalf("%d responses created for a run cancelled in the queue", n)
	}
}
