package foundrytest

import (
	"net/http"
	"testing"
	"time"

	"github.com/foundryq/foundryq/internal/testkit"
)

func cancelResp(t *testing.T, srv *Server, c *http.Client, id string, status int) wireResponse {
	t.Helper()
	var r wireResponse
	readJSON(t, do(t, testCtx(t), c, "POST", srv.BaseURL()+"responses/"+id+"/cancel", nil), status, &r)
	return r
}

// openUntil opens a create stream and reads until stop says so; it returns
// the reader and the events read.
func openUntil(t *testing.T, srv *Server, c *http.Client, body any, stop func(wireEvent) bool) (*sseReader, *http.Response, []wireEvent) {
	t.Helper()
	resp := do(t, testCtx(t), c, "POST", srv.BaseURL()+"responses", body)
	s := newSSEReader(resp.Body)
	var evs []wireEvent
	for {
		ev, err := s.next()
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
		if stop(ev) {
			return s, resp, evs
		}
	}
}

func TestCancelDuringText(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	n := 0
	s, resp, evs := openUntil(t, srv, c, createBody("cancel-text", true, true, map[string]string{KeyTokens: "100000", KeyTokenMS: "2"}),
		func(ev wireEvent) bool {
			if ev.Type == evTextDelta {
				n++
			}
			return n == 3
		})
	id := evs[0].Response.ID
	got := cancelResp(t, srv, c, id, http.StatusOK)
	if got.Status != statusCancelled || got.Usage == nil {
		t.Fatalf("cancel: %+v", got)
	}
	checkUsage(t, got.Usage, got.Usage.OutputTokens)

	// The follower sees the events emitted before the cancel, then a clean
	// end with no terminal event.
	defer resp.Body.Close()
	rest, err := s.rest()
	if err != nil {
		t.Fatalf("stream after cancel ended with %v", err)
	}
	all := append(evs, rest...)
	checkSeq(t, all, 0)
	if last := all[len(all)-1]; last.Type != evTextDelta {
		t.Fatalf("last event %s, want a delta (no terminal event after a cancel)", last.Type)
	}
	if deltas(all) != got.text() || got.Usage.OutputTokens != len(all)-5 {
		t.Fatalf("cancel object text %q, usage %d; stream %q (%d events)", got.text(), got.Usage.OutputTokens, deltas(all), len(all))
	}
	if got.Output[0].Status != statusIncomplete {
		t.Fatalf("message item status %q", got.Output[0].Status)
	}

	again := cancelResp(t, srv, c, id, http.StatusOK)
	if again.Status != statusCancelled || again.Usage.OutputTokens != got.Usage.OutputTokens {
		t.Fatalf("second cancel changed the object: %+v", again)
	}
	testkit.Eventually(t, 15*time.Second, "the generation to stop", func() bool { return srv.Stats().ActiveGenerations == 0 })
	rec := record(t, srv, id)
	st := srv.Stats()
	if rec.Tokens != got.Usage.OutputTokens || st.TokensAfterCancel != 0 || st.CancelsReceived != 2 || st.ResponsesCancelled != 1 ||
		st.Statuses[id] != statusCancelled || rec.CancelledAt.IsZero() {
		t.Fatalf("record %+v stats %+v", rec, st)
	}
}

func TestCancelAbortsToolCall(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	s, resp, evs := openUntil(t, srv, c, createBody("cancel-tool", true, true, map[string]string{KeyToolMS: "600000"}),
		func(ev wireEvent) bool { return ev.Type == evMCPArgsDone })
	defer resp.Body.Close()
	got := cancelResp(t, srv, c, evs[0].Response.ID, http.StatusOK)
	if got.Status != statusCancelled || len(got.Output) != 1 || got.Output[0].Status != statusIncomplete || got.Output[0].Output != nil {
		t.Fatalf("cancel: %+v", got)
	}
	if rest, err := s.rest(); err != nil || len(rest) != 0 {
		t.Fatalf("after cancel: %v %v", types(rest), err)
	}
	testkit.Eventually(t, 15*time.Second, "the generation to stop", func() bool { return srv.Stats().ActiveGenerations == 0 })
	if st := srv.Stats(); st.ToolCallsAborted != 1 || st.ToolCallsCompleted != 0 || st.ToolCallsCompletedAfterCancel != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestCancelRules(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)

	done, err := createStream(t, srv, c, createBody("rules", true, true, nil))
	if err != nil {
		t.Fatal(err)
	}
	// A finished response cannot be cancelled (BerriAI/litellm#39617).
	e := apiErr(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses/"+done[0].Response.ID+"/cancel", nil), http.StatusBadRequest)
	if e.Message != "Cannot cancel a completed response." || e.Type != "invalid_request_error" || e.Param == nil || *e.Param != "response_id" {
		t.Fatalf("cancel of a completed response: %+v", e)
	}
	if got := getResponse(t, ctx, c, srv, done[0].Response.ID); got.Status != statusCompleted || got.text() != deltas(done) {
		t.Fatalf("the refused cancel changed the response: %+v", got)
	}

	fg, err := createStream(t, srv, c, createBody("rules", false, true, nil))
	if err != nil {
		t.Fatal(err)
	}
	e = apiErr(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses/"+fg[0].Response.ID+"/cancel", nil), http.StatusBadRequest)
	if e.Message != "Cannot cancel a synchronous response." {
		t.Fatalf("foreground cancel: %+v", e)
	}
	e = apiErr(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses/resp_unknown/cancel", nil), http.StatusNotFound)
	if e.Message != "Response with id 'resp_unknown' not found." {
		t.Fatalf("unknown: %+v", e)
	}
	if st := srv.Stats(); st.CancelsReceived != 3 || st.ResponsesCancelled != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestCompleteDespiteCancel(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	s, resp, evs := openUntil(t, srv, c,
		createBody("stubborn", true, true, map[string]string{KeyCompleteDespiteCancel: "1", KeyToolMS: "500", KeyTokens: "20", KeyTokenMS: "1"}),
		func(ev wireEvent) bool { return ev.Type == evMCPArgsDone })
	id := evs[0].Response.ID
	if got := cancelResp(t, srv, c, id, http.StatusOK); got.Status != statusCancelled {
		t.Fatalf("cancel: %+v", got)
	}
	defer resp.Body.Close()
	rest, err := s.rest()
	if err != nil {
		t.Fatal(err)
	}
	last := rest[len(rest)-1]
	if last.Type != evCompleted || last.Response.Status != statusCompleted {
		t.Fatalf("last %s", last.Raw)
	}
	if got := getResponse(t, testCtx(t), c, srv, id); got.Status != statusCompleted {
		t.Fatalf("stored status %s", got.Status)
	}
	st := srv.Stats()
	if st.TokensAfterCancel != 20 || st.ToolCallsCompletedAfterCancel != 1 || st.ToolCallsAborted != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

// TestCancelFinishedResponses: only an already cancelled response answers
// 200; completed, failed and incomplete ones are refused with 400.
func TestCancelFinishedResponses(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	cases := []struct {
		md     map[string]string
		max    int
		status string
		msg    string
	}{
		{map[string]string{KeyFailAfter: "3"}, 0, statusFailed, "Cannot cancel a failed response."},
		{map[string]string{KeyTokens: "40"}, 16, statusIncomplete, "Cannot cancel a response in terminal state."},
		{nil, 0, statusCompleted, "Cannot cancel a completed response."},
	}
	for _, tc := range cases {
		body := createBody("finished-"+tc.status, true, true, tc.md)
		if tc.max > 0 {
			body["max_output_tokens"] = tc.max
		}
		evs, err := createStream(t, srv, c, body)
		if err != nil {
			t.Fatal(err)
		}
		id := evs[0].Response.ID
		if got := getResponse(t, ctx, c, srv, id); got.Status != tc.status {
			t.Fatalf("%s: status %s", tc.status, got.Status)
		}
		e := apiErr(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses/"+id+"/cancel", nil), http.StatusBadRequest)
		if e.Message != tc.msg || e.Type != "invalid_request_error" {
			t.Errorf("%s: %+v", tc.status, e)
		}
	}

	// Cancelled: the first cancel and every later one answer 200.
	_, resp, evs := openUntil(t, srv, c, createBody("twice", true, true, map[string]string{KeyTokens: "100000", KeyTokenMS: "5"}),
		func(ev wireEvent) bool { return ev.Type == evTextDelta })
	defer resp.Body.Close()
	id := evs[0].Response.ID
	for i := 0; i < 2; i++ {
		if got := cancelResp(t, srv, c, id, http.StatusOK); got.Status != statusCancelled {
			t.Fatalf("cancel %d: %+v", i, got)
		}
	}
}
