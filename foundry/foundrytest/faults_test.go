package foundrytest

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/foundryq/foundryq/internal/testkit"
)

// streamTokens opens a long background stream for runID with md and reads
// until n tokens; it returns the response id. The stream stays open until
// the test ends.
func streamTokens(t *testing.T, srv *Server, c *http.Client, runID string, n int, md map[string]string) string {
	t.Helper()
	meta := map[string]string{KeyTokens: "1000000", KeyTokenMS: "2"}
	for k, v := range md {
		meta[k] = v
	}
	seen := 0
	_, resp, evs := openUntil(t, srv, c, createBody(runID, true, true, meta), func(ev wireEvent) bool {
		if ev.Type == evTextDelta {
			seen++
		}
		return seen == n
	})
	t.Cleanup(func() { resp.Body.Close() })
	return evs[0].Response.ID
}

// cancelCall sends one cancel and returns the status (0 if the call
// failed on the client side, e.g. its context ended) and the error object.
func cancelCall(ctx context.Context, c *http.Client, srv *Server, id string) (int, errorObject) {
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.BaseURL()+"responses/"+id+"/cancel", nil)
	req.Header.Set("api-key", testKey)
	resp, err := c.Do(req)
	if err != nil {
		return 0, errorObject{}
	}
	defer resp.Body.Close()
	var body errorBody
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Error
}

// faultsCall sends a request to /_emulator/faults and decodes its state.
func faultsCall(t *testing.T, ctx context.Context, c *http.Client, method, url string) faultState {
	t.Helper()
	var st faultState
	readJSON(t, do(t, ctx, c, method, url, nil), http.StatusOK, &st)
	return st
}

// TestCancelFailWindow: within emu_cancel_fail_ms of the first cancel call,
// every cancel answers 500 server_error and cancels nothing; after it,
// cancel works.
func TestCancelFailWindow(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{}
	srv, c := setup(t, Config{Clock: clock.Now})
	ctx := testCtx(t)
	id := streamTokens(t, srv, c, "cancel-fail", 2, map[string]string{KeyCancelFailMS: "60000"})
	for i := 0; i < 2; i++ {
		e := apiErr(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses/"+id+"/cancel", nil), http.StatusInternalServerError)
		if e.Type != "server_error" {
			t.Fatalf("500 body: %+v", e)
		}
	}
	// The generation goes on.
	before := record(t, srv, id).Tokens
	testkit.Eventually(t, 15*time.Second, "more tokens after the failed cancels", func() bool { return record(t, srv, id).Tokens > before })
	if got := getResponse(t, ctx, c, srv, id); got.Status != statusInProgress {
		t.Fatalf("status after failed cancels: %q", got.Status)
	}
	clock.Advance(61 * time.Second)
	if got := cancelResp(t, srv, c, id, http.StatusOK); got.Status != statusCancelled {
		t.Fatalf("cancel after the window: %+v", got)
	}
	rec := record(t, srv, id)
	if rec.CancelCalls != 3 || rec.CancelCallsFaulted != 2 || rec.CancelCallsMaxInFlight != 1 || rec.FirstCancelCallAt.IsZero() ||
		rec.CancelledAt.Sub(rec.FirstCancelCallAt) < 60*time.Second || srv.Stats().ResponsesCancelled != 1 {
		t.Fatalf("record %+v", rec)
	}
	var raw []map[string]json.RawMessage
	readJSON(t, do(t, ctx, c, "GET", srv.URL()+"/_emulator/records?run_prefix=cancel-fail", nil), http.StatusOK, &raw)
	want := map[string]string{"cancel_calls": "3", "cancel_calls_faulted": "2", "cancel_calls_max_in_flight": "1"}
	for k, v := range want {
		if len(raw) != 1 || string(raw[0][k]) != v || raw[0]["first_cancel_call_at"] == nil {
			t.Fatalf("records JSON: %s = %s, want %s (%v)", k, raw[0][k], v, raw)
		}
	}
}

// TestCancelHangWindow: within emu_cancel_hang_ms of the first cancel call,
// cancel calls hang (they are all in flight at once) and cancel nothing;
// a caller that gives up ends its call; after the window, cancel works.
func TestCancelHangWindow(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{}
	srv, c := setup(t, Config{Clock: clock.Now})
	id := streamTokens(t, srv, c, "cancel-hang", 2, map[string]string{KeyCancelHangMS: "600000"})
	callCtx, giveUp := context.WithCancel(testCtx(t))
	var wg sync.WaitGroup
	statuses := make([]int, 3)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i], _ = cancelCall(callCtx, c, srv, id)
		}()
	}
	testkit.Eventually(t, 15*time.Second, "three hanging cancel calls", func() bool { return record(t, srv, id).CancelCallsMaxInFlight == 3 })
	before := record(t, srv, id).Tokens
	testkit.Eventually(t, 15*time.Second, "more tokens while cancels hang", func() bool { return record(t, srv, id).Tokens > before })
	giveUp()
	wg.Wait()
	for _, st := range statuses {
		if st != 0 {
			t.Fatalf("a hanging cancel was answered %d before its caller gave up", st)
		}
	}
	testkit.Eventually(t, 15*time.Second, "the hanging calls to end", func() bool { return record(t, srv, id).CancelCallsFaulted == 3 })
	clock.Advance(601 * time.Second)
	if got := cancelResp(t, srv, c, id, http.StatusOK); got.Status != statusCancelled {
		t.Fatalf("cancel after the window: %+v", got)
	}
	if rec := record(t, srv, id); rec.CancelCalls != 4 || rec.CancelCallsMaxInFlight != 3 {
		t.Fatalf("record %+v", rec)
	}
}

// TestCancelHangAnswers504: a call still hanging when the window ends gets
// the gateway's 504 and cancels nothing.
func TestCancelHangAnswers504(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	id := streamTokens(t, srv, c, "cancel-504", 1, map[string]string{KeyCancelHangMS: "150"})
	start := time.Now()
	e := apiErr(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses/"+id+"/cancel", nil), http.StatusGatewayTimeout)
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Fatalf("answered after %s, before the window ended", took)
	}
	if e.Code == nil || *e.Code != "GatewayTimeout" || e.Type != "server_error" {
		t.Fatalf("504 body %+v", e)
	}
	if got := getResponse(t, ctx, c, srv, id); got.Status != statusInProgress {
		t.Fatalf("status after the 504: %q", got.Status)
	}
	if got := cancelResp(t, srv, c, id, http.StatusOK); got.Status != statusCancelled {
		t.Fatalf("cancel after the window: %+v", got)
	}
	if rec := record(t, srv, id); rec.CancelCalls != 2 || rec.CancelCallsFaulted != 1 {
		t.Fatalf("record %+v", rec)
	}
}

// TestFaultsEndpoint: /_emulator/faults validates like /_emulator/throttle,
// shows the open windows, and its windows apply to every cancel call.
func TestFaultsEndpoint(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	faults := srv.URL() + "/_emulator/faults"
	for _, q := range []string{"?cancel_fail_for=x", "?cancel_fail_for=-1s", "?cancel_hang_for=2h", "?cancel_fail_for=1s&cancel_hang_for=soon", "?cancel_hang_for="} {
		apiErr(t, do(t, ctx, c, "POST", faults+q, nil), http.StatusBadRequest)
	}
	st := faultsCall(t, ctx, c, "GET", faults)
	if st.CancelFail != nil || st.CancelHang != nil {
		t.Fatalf("a fault opened by a refused request: %+v", st)
	}

	id := streamTokens(t, srv, c, "faults", 1, nil)
	st = faultsCall(t, ctx, c, "POST", faults+"?cancel_fail_for=1m")
	if st.CancelFail == nil || st.CancelFail.LeftMS <= 0 || st.CancelFail.LeftMS > 60000 || st.CancelHang != nil {
		t.Fatalf("state %+v", st)
	}
	apiErr(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses/"+id+"/cancel", nil), http.StatusInternalServerError)
	apiErr(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses/resp_unknown/cancel", nil), http.StatusInternalServerError)

	// A hang wins over a failure; closing it answers the hanging call 504.
	st = faultsCall(t, ctx, c, "POST", faults+"?cancel_hang_for=1m")
	if st.CancelFail == nil || st.CancelHang == nil {
		t.Fatalf("state %+v", st)
	}
	got := make(chan int, 1)
	go func() {
		status, _ := cancelCall(ctx, c, srv, id)
		got <- status
	}()
	testkit.Eventually(t, 15*time.Second, "the hanging cancel call", func() bool { return record(t, srv, id).CancelCalls == 2 })
	st = faultsCall(t, ctx, c, "DELETE", faults)
	if st.CancelFail != nil || st.CancelHang != nil {
		t.Fatalf("state after DELETE %+v", st)
	}
	if status := <-got; status != http.StatusGatewayTimeout {
		t.Fatalf("hanging call answered %d", status)
	}
	if got := cancelResp(t, srv, c, id, http.StatusOK); got.Status != statusCancelled {
		t.Fatalf("cancel after the faults: %+v", got)
	}
	apiErr(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses/resp_unknown/cancel", nil), http.StatusNotFound)

	// The Go methods, and a 0 closes a window.
	srv.FailCancels(time.Minute)
	srv.HangCancels(time.Minute)
	srv.HangCancels(0)
	st = faultsCall(t, ctx, c, "GET", faults)
	if st.CancelFail == nil || st.CancelHang != nil {
		t.Fatalf("state %+v", st)
	}
	st = faultsCall(t, ctx, c, "POST", faults+"?cancel_fail_for=0s")
	if st.CancelFail != nil {
		t.Fatalf("state %+v", st)
	}
}

// TestCloseEndsHangingCancel: Close answers a hanging cancel call instead of
// waiting out its window.
func TestCloseEndsHangingCancel(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	id := streamTokens(t, srv, c, "hang-close", 1, nil)
	srv.HangCancels(time.Hour)
	ctx := testCtx(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		cancelCall(ctx, c, srv, id)
	}()
	testkit.Eventually(t, 15*time.Second, "the hanging cancel call", func() bool { return record(t, srv, id).CancelCalls == 1 })
	srv.Close()
	<-done
}
