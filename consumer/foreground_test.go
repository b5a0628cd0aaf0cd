package consumer_test

import (
	"bytes"
	"github.com/prometheus/client_golang/prometheus"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
)

// foregroundTransport drops background from every create, as a service
// that ignores it would: the response runs in the foreground on its
// stream, and (unlike a hosted agent's) GET tells its status.
type foregroundTransport struct{}

func (foregroundTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/responses") && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = bytes.Replace(body, []byte(`"background":true`), []byte(`"background":false`), 1)
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	return http.DefaultTransport.RoundTrip(req)
}

// A cancelled foreground response reports what Foundry says of it once
// its stream is closed (Foundry cannot cancel it: closing the stream is
// what stops it), read back with GET for a few seconds: its final status
// and usage when GET tells them, else unconfirmed with the reason. Never
// unknown, which means a create whose response id never arrived: on main
// before this change both ended upstream_status unknown with the id known.
func TestCancelledForegroundResponseSaysWhatFoundrySays(t *testing.T) {
	t.Parallel()
	t.Run("GET tells the status", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		up, err := foundry.New(foundry.Config{BaseURL: e.emu.BaseURL(), APIKey: "test-key", HTTPClient: &http.Client{Transport: foregroundTransport{}}})
		if err != nil {
			t.Fatal(err)
		}
		e.up = up
		e.startWorker(consumer.Config{WorkerID: "fg"})
		const id = "fg-get-1"
		e.submit(request(id, map[string]string{"emu_tokens": "2000", "emu_token_ms": "20"}))
		if ev := e.waitEvent(id, events.TypeRunStarted, 10*time.Second); ev.Background == nil || *ev.Background {
			t.Fatalf("run.started %+v, want background false", ev)
		}
		e.waitEvent(id, events.TypeTextDelta, 10*time.Second)
		e.cancel(id)
		last := checkWellFormed(t, e.collect(id, 20*time.Second))
		rec := e.emu.Records(id)[0]
		if last.Type != events.TypeRunCancelled || last.UpstreamStatus != "cancelled" || last.ResponseID != rec.ID ||
			last.Usage == nil || last.UsageUnknown || last.Error != nil {
			t.Fatalf("ended %+v, want run.cancelled, upstream cancelled with the response id %s and its usage", last, rec.ID)
		}
		if st := e.state(id); st.UpstreamStatus != "cancelled" {
			t.Fatalf("record upstream status %q, want cancelled", st.UpstreamStatus)
		}
	})
	t.Run("a hosted agent", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		reg := prometheus.NewRegistry()
		e.startWorker(consumer.Config{WorkerID: "hosted", Registerer: reg})
		const id = "fg-hosted-1"
		e.submit(agentRequest(id, "hosted-helper", map[string]string{"emu_tokens": "2000", "emu_token_ms": "20"}))
		e.waitEvent(id, events.TypeTextDelta, 10*time.Second)
		start := time.Now()
		e.cancel(id)
		last := checkWellFormed(t, e.collect(id, 20*time.Second))
		took := time.Since(start)
		// GET says in_progress for ever (Azure/azure-sdk-for-python#46015):
		// nothing confirms the stop.
		rec := e.emu.Records(id)[0]
		if last.Type != events.TypeRunCancelled || last.UpstreamStatus != events.UpstreamUnconfirmed || last.ResponseID != rec.ID ||
			last.Error == nil || last.Error.Code != events.CodeCancelUnconfirmed || !strings.Contains(last.Error.Message, "in_progress") {
			t.Fatalf("ended %+v (error %+v), want run.cancelled, upstream unconfirmed with the response id %s and why", last, last.Error, rec.ID)
		}
		t.Logf("ended %s after the cancel: %s", took.Round(time.Millisecond), last.Error.Message)
		// The read back is bounded: a few seconds, not the cancel bound.
		if took > 10*time.Second {
			t.Fatalf("the run ended %s after the cancel", took)
		}
		if rec.Status != "cancelled" {
			t.Fatalf("emulator: %s, want the closed stream to have stopped it", rec.Status)
		}
		// Every hosted agent's cancel ends so: the alert on unconfirmed
		// cancels (a Foundry fault) must not fire for it.
		if n := counter(t, reg, "foundryq_cancels_unconfirmed_total", ""); n != 0 {
			t.Fatalf("cancels_unconfirmed_total = %v, want 0 for a foreground response", n)
		}
	})
}
