package foundrytest

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/foundryq/foundryq/internal/testkit"
)

// TestQueuedStaysQueuedUntilCancel: emu_queued_ms keeps a background
// response queued after response.queued: keepalives only, GET says queued,
// and a cancel ends it (status cancelled, the stream ends cleanly).
func TestQueuedStaysQueuedUntilCancel(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	resp := do(t, ctx, c, "POST", srv.BaseURL()+"responses",
		createBody("queued-stuck", true, true, map[string]string{KeyQueuedMS: "3600000", KeyKeepaliveMS: "5"}))
	defer resp.Body.Close()
	s := newSSEReader(resp.Body)
	var evs []wireEvent
	for len(evs) < 5 {
		ev, err := s.next()
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	want := []string{evCreated, evQueued, evKeepalive, evKeepalive, evKeepalive}
	for i, typ := range want {
		if evs[i].Type != typ {
			t.Fatalf("events %v, want %v", types(evs), want)
		}
	}
	checkSeq(t, evs, 0)
	id := evs[0].Response.ID
	if evs[0].Response.Status != statusQueued || evs[1].Response.Status != statusQueued {
		t.Fatalf("created/queued status %q/%q", evs[0].Response.Status, evs[1].Response.Status)
	}
	if got := getResponse(t, ctx, c, srv, id); got.Status != statusQueued || len(got.Output) != 0 {
		t.Fatalf("GET while queued: %+v", got)
	}
	if got := cancelResp(t, srv, c, id, http.StatusOK); got.Status != statusCancelled {
		t.Fatalf("cancel while queued: %+v", got)
	}
	rest, err := s.rest()
	if err != nil {
		t.Fatalf("stream after cancel: %v", err)
	}
	for _, ev := range rest {
		if ev.Type != evKeepalive {
			t.Fatalf("after the cancel: %v", types(rest))
		}
	}
	if got := getResponse(t, ctx, c, srv, id); got.Status != statusCancelled {
		t.Fatalf("GET after cancel: %+v", got)
	}
	testkit.Eventually(t, 15*time.Second, "the generation to stop", func() bool { return srv.Stats().ActiveGenerations == 0 })
	if rec := record(t, srv, id); rec.Tokens != 0 || rec.CancelledAt.IsZero() {
		t.Fatalf("record: %+v", rec)
	}
}

// TestQueuedThenProceeds: after emu_queued_ms the response goes on as usual.
func TestQueuedThenProceeds(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	start := time.Now()
	evs, err := readAll(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses",
		createBody("queued-then", true, true, map[string]string{KeyQueuedMS: "120", KeyKeepaliveMS: "20", KeyTokens: "3"})).Body)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 120*time.Millisecond {
		t.Fatalf("done after %s, before emu_queued_ms", took)
	}
	checkSeq(t, evs, 0)
	ts := types(evs)
	if ts[0] != evCreated || ts[1] != evQueued || ts[len(ts)-1] != evCompleted {
		t.Fatalf("events %v", ts)
	}
	i := 2
	for ; ts[i] == evKeepalive; i++ {
	}
	if i == 2 || ts[i] != evInProgress {
		t.Fatalf("want keepalives then in_progress after queued: %v", ts)
	}
	if last := evs[len(evs)-1].Response; last.Status != statusCompleted || deltas(evs) != last.text() || last.Usage.OutputTokens != 3 {
		t.Fatalf("final %+v, deltas %q", last, deltas(evs))
	}
}

// TestQueuedForegroundIgnored: only background responses are queued, so
// emu_queued_ms does nothing to a foreground one.
func TestQueuedForegroundIgnored(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	evs, err := readAll(t, do(t, testCtx(t), c, "POST", srv.BaseURL()+"responses",
		createBody("queued-fg", false, true, map[string]string{KeyQueuedMS: "3600000", KeyTokens: "2"})).Body)
	if err != nil || evs[len(evs)-1].Type != evCompleted {
		t.Fatalf("%v, %v", types(evs), err)
	}
}

// TestSilentAfterUntilCancel: emu_silent_after=N makes the create stream
// and a resumed stream go silent after N tokens (no frame at all, the
// connections stay open); GET says in_progress with the text so far; a
// cancel ends the response and both streams, with nothing sent between
// the N-th token and the end.
func TestSilentAfterUntilCancel(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	n := 0
	s, resp, evs := openUntil(t, srv, c, createBody("silent", true, true, map[string]string{KeyTokens: "50", KeySilentAfter: "3", KeyKeepaliveMS: "1"}),
		func(ev wireEvent) bool {
			if ev.Type == evTextDelta {
				n++
			}
			return n == 3
		})
	defer resp.Body.Close()
	id := evs[0].Response.ID
	testkit.Eventually(t, 15*time.Second, "the third token", func() bool { return record(t, srv, id).Tokens == 3 })
	got := getResponse(t, ctx, c, srv, id)
	if got.Status != statusInProgress || got.text() != deltas(evs) {
		t.Fatalf("GET while silent: status %q text %q, stream %q", got.Status, got.text(), deltas(evs))
	}
	// A stream resumed from the start replays up to the silence, then is
	// silent too.
	res := do(t, ctx, c, "GET", srv.BaseURL()+"responses/"+id+"?stream=true", nil)
	defer res.Body.Close()
	rs := newSSEReader(res.Body)
	for range evs {
		if _, err := rs.next(); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 15*time.Second, "the resumed stream to attach", func() bool { return record(t, srv, id).StreamsAttached == 2 })
	if rec := record(t, srv, id); rec.Tokens != 3 || rec.Events != len(evs) {
		t.Fatalf("generation went on while silent: %+v (stream had %d events)", rec, len(evs))
	}
	if c := cancelResp(t, srv, c, id, http.StatusOK); c.Status != statusCancelled || c.Usage.OutputTokens != 3 {
		t.Fatalf("cancel: %+v", c)
	}
	for name, r := range map[string]*sseReader{"create": s, "resume": rs} {
		rest, err := r.rest()
		if err != nil || len(rest) != 0 {
			t.Fatalf("%s stream after the silence: %v, %v; want a clean end and no frame", name, types(rest), err)
		}
	}
}

// TestSilentForThenGoesOn: with emu_silent_ms the silence ends and the
// open stream carries on to the end.
func TestSilentForThenGoesOn(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{RecordTimes: true})
	evs, err := readAll(t, do(t, testCtx(t), c, "POST", srv.BaseURL()+"responses",
		createBody("silent-for", true, true, map[string]string{KeyTokens: "5", KeySilentAfter: "2", KeySilentMS: "100"})).Body)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.Type != evCompleted || last.Response.Usage.OutputTokens != 5 || deltas(evs) != last.Response.text() {
		t.Fatalf("events %v", types(evs))
	}
	for _, ev := range evs {
		if ev.Type == evKeepalive {
			t.Fatalf("keepalive in a silence: %v", types(evs))
		}
	}
	rec := record(t, srv, last.Response.ID)
	if gap := time.Duration(rec.TokenTimes[2] - rec.TokenTimes[1]); gap < 100*time.Millisecond {
		t.Fatalf("tokens 2 and 3 %s apart, want the 100ms silence", gap)
	}
}

// TestSilentAfterBeyondText: a silence after the last token never comes.
func TestSilentAfterBeyondText(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	evs, err := readAll(t, do(t, testCtx(t), c, "POST", srv.BaseURL()+"responses",
		createBody("silent-beyond", true, true, map[string]string{KeyTokens: "2", KeySilentAfter: "2"})).Body)
	if err != nil || evs[len(evs)-1].Type != evCompleted {
		t.Fatalf("%v, %v", types(evs), err)
	}
}

// TestResumeSendsHeadersAtOnce: a resume with nothing new to send (a
// silent response, resumed after its last event) gets its 200 and headers
// at once, as a create does, not with its first event.
func TestResumeSendsHeadersAtOnce(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	n := 0
	_, resp, evs := openUntil(t, srv, c, createBody("silent-resume", true, true, map[string]string{KeyTokens: "50", KeySilentAfter: "1"}),
		func(ev wireEvent) bool {
			if ev.Type == evTextDelta {
				n++
			}
			return n == 1
		})
	defer resp.Body.Close()
	id := evs[0].Response.ID
	res := do(t, ctx, c, "GET", srv.BaseURL()+"responses/"+id+"?stream=true&starting_after="+strconv.Itoa(len(evs)-1), nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("resume: %d", res.StatusCode)
	}
	cancelResp(t, srv, c, id, http.StatusOK)
	if rest, err := readAll(t, res.Body); err != nil || len(rest) != 0 {
		t.Fatalf("resumed stream: %v, %v", types(rest), err)
	}
}
