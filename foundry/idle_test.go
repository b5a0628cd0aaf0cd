package foundry_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/testkit"
)

func idleAfter(d time.Duration) func(*foundry.Config) {
	return func(c *foundry.Config) { c.StreamIdleTimeout = d }
}

// TestStreamIdleOnSilentResponse: a response whose streams go silent
// (emu_silent_after) ends the create stream and a resumed one with
// ErrStreamIdle once nothing arrived for StreamIdleTimeout; the bodies are
// closed (the emulator sees its streams go).
func TestStreamIdleOnSilentResponse(t *testing.T) {
	t.Parallel()
	const idle = 300 * time.Millisecond
	srv, c := setup(t, foundrytest.Config{}, idleAfter(idle))
	ctx := ctxT(t)
	s, err := c.Create(ctx, req("idle-silent", map[string]string{"emu_tokens": "50", "emu_silent_after": "3"}))
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	var last time.Time
	for s.Next() {
		text.WriteString(s.Event().Delta)
		last = time.Now()
	}
	silent := time.Since(last)
	err = s.Err()
	if !errors.Is(err, foundry.ErrStreamIdle) || errors.Is(err, foundry.ErrStreamTruncated) {
		t.Fatalf("Err = %v, want ErrStreamIdle", err)
	}
	if silent < idle || silent > 10*time.Second {
		t.Fatalf("ended %s after the last event, want about %s", silent, idle)
	}
	if !strings.Contains(err.Error(), "nothing received for") || !strings.Contains(err.Error(), s.ResponseID()) {
		t.Fatalf("message %q", err)
	}
	id := s.ResponseID()
	rec, _ := srv.Record(id)
	if text.String() != rec.Text || rec.Tokens != 3 {
		t.Fatalf("text %q, record %+v", text.String(), rec)
	}
	testkit.Eventually(t, 20*time.Second, "the emulator to see the stream go", func() bool { return srv.Stats().OpenStreams == 0 })

	// A resumed stream of the silent response ends the same way.
	seq, _ := s.LastSeq()
	r, err := c.Resume(ctx, id, seq)
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		t.Fatalf("event %s after the silence", r.Event().Type)
	}
	if !errors.Is(r.Err(), foundry.ErrStreamIdle) {
		t.Fatalf("resume Err = %v", r.Err())
	}
	got, err := c.Get(ctx, id)
	if err != nil || got.Status != foundry.StatusInProgress {
		t.Fatalf("GET: %+v, %v", got, err)
	}
}

// TestStreamIdleKeepalivesKeepItAlive: a response queued for several idle
// timeouts, with keepalives more often than that, is not idle; the
// lifecycle events carry its status.
func TestStreamIdleKeepalivesKeepItAlive(t *testing.T) {
	t.Parallel()
	_, c := setup(t, foundrytest.Config{}, idleAfter(time.Second))
	s, err := c.Create(ctxT(t), req("idle-keepalive", map[string]string{"emu_queued_ms": "2500", "emu_keepalive_ms": "50", "emu_tokens": "3"}))
	if err != nil {
		t.Fatal(err)
	}
	statuses := map[string]string{}
	keepalives := 0
	for s.Next() {
		ev := s.Event()
		switch ev.Type {
		case foundry.EventKeepalive:
			keepalives++
		case foundry.EventCreated, foundry.EventQueued, foundry.EventInProgress, foundry.EventCompleted:
			statuses[ev.Type] = ev.Response.Status
		}
	}
	if s.Err() != nil || !s.Terminal() {
		t.Fatalf("Err = %v, terminal %v", s.Err(), s.Terminal())
	}
	want := map[string]string{foundry.EventCreated: foundry.StatusQueued, foundry.EventQueued: foundry.StatusQueued,
		foundry.EventInProgress: foundry.StatusInProgress, foundry.EventCompleted: foundry.StatusCompleted}
	if fmt.Sprint(statuses) != fmt.Sprint(want) || keepalives < 2 {
		t.Fatalf("statuses %v (want %v), %d keepalives", statuses, want, keepalives)
	}
}

// TestStreamIdleDisabled: with a negative StreamIdleTimeout a silence of
// any length is waited out.
func TestStreamIdleDisabled(t *testing.T) {
	t.Parallel()
	_, c := setup(t, foundrytest.Config{}, idleAfter(-1))
	s, err := c.Create(ctxT(t), req("idle-off", map[string]string{"emu_tokens": "4", "emu_silent_after": "2", "emu_silent_ms": "1200"}))
	if err != nil {
		t.Fatal(err)
	}
	text, _, last := read(t, s)
	if s.Err() != nil || last == nil || last.Status != foundry.StatusCompleted || last.OutputText != text {
		t.Fatalf("Err %v, last %+v", s.Err(), last)
	}
}

// sseServer serves, on any path, the SSE headers and frames, then nothing
// until the client goes; gone is closed when it does.
func sseServer(t *testing.T, frames string) (url string, gone chan struct{}) {
	t.Helper()
	gone = make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(frames))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(gone)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/openai/v1/", gone
}

// TestStreamIdleHeadersThenNothing: a server that sends the headers and
// then nothing ends the stream with ErrStreamIdle and sees the connection
// closed.
func TestStreamIdleHeadersThenNothing(t *testing.T) {
	t.Parallel()
	url, gone := sseServer(t, "")
	c, err := foundry.New(foundry.Config{BaseURL: url, APIKey: "k", StreamIdleTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s, err := c.Resume(ctxT(t), "resp_quiet", -1)
	if err != nil {
		t.Fatal(err)
	}
	if s.Next() {
		t.Fatalf("event %s", s.Event().Type)
	}
	if took := time.Since(start); !errors.Is(s.Err(), foundry.ErrStreamIdle) || took < 200*time.Millisecond {
		t.Fatalf("after %s: %v", took, s.Err())
	}
	select {
	case <-gone:
	case <-time.After(15 * time.Second):
		t.Fatal("the server never saw the connection close")
	}
}

// TestStreamIdleNotWhileConsumerBusy: time the consumer spends between two
// calls of Next is not silence: the frames that arrived meanwhile are
// read, and only then does the idle timeout run.
func TestStreamIdleNotWhileConsumerBusy(t *testing.T) {
	t.Parallel()
	const idle = 100 * time.Millisecond
	var frames strings.Builder
	for i := range 3 {
		fmt.Fprintf(&frames, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":%d,\"delta\":\"w%d \"}\n\n", i, i)
	}
	url, _ := sseServer(t, frames.String())
	c, err := foundry.New(foundry.Config{BaseURL: url, APIKey: "k", StreamIdleTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Resume(ctxT(t), "resp_busy", -1)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Next() {
		t.Fatal(s.Err())
	}
	time.Sleep(4 * idle) // a consumer busy elsewhere (the behaviour under test, not synchronisation)
	var text strings.Builder
	text.WriteString(s.Event().Delta)
	for s.Next() {
		text.WriteString(s.Event().Delta)
	}
	if text.String() != "w0 w1 w2 " || !errors.Is(s.Err(), foundry.ErrStreamIdle) {
		t.Fatalf("text %q, Err %v", text.String(), s.Err())
	}
}

func TestStreamIdleTimeoutConfig(t *testing.T) {
	t.Parallel()
	base := foundry.Config{BaseURL: "http://127.0.0.1:1/openai/v1/", APIKey: "k"}
	for _, d := range []time.Duration{-1, 0, time.Millisecond, time.Hour} {
		cfg := base
		cfg.StreamIdleTimeout = d
		if _, err := foundry.New(cfg); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
	cfg := base
	cfg.StreamIdleTimeout = 90 // a missing unit
	if _, err := foundry.New(cfg); !errors.Is(err, foundry.ErrInvalidConfig) || !strings.Contains(err.Error(), "StreamIdleTimeout") {
		t.Fatalf("90ns: %v", err)
	}
}
