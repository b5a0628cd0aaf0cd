package foundrytest

import (
	"net/http"
	"testing"
)

// TestRecordsTimes checks the timing records a benchmark reads: one time
// per token, in order, whose text ends add up to the text, and the tool
// call's start and finish; and that /_emulator/records filters by prefix.
func TestRecordsTimes(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{RecordTimes: true})
	ctx := testCtx(t)
	for _, run := range []string{"rec-a", "rec-b", "other"} {
		resp := do(t, ctx, c, "POST", srv.BaseURL()+"responses", createBody(run, false, true, map[string]string{KeyTokens: "7", KeyToolMS: "5"}))
		if _, err := readAll(t, resp.Body); err != nil {
			t.Fatal(err)
		}
	}
	var recs []ResponseRecord
	readJSON(t, do(t, ctx, c, "GET", srv.URL()+"/_emulator/records?run_prefix=rec-", nil), http.StatusOK, &recs)
	if len(recs) != 2 || recs[0].RunID != "rec-a" || recs[1].RunID != "rec-b" {
		t.Fatalf("records: %+v", recs)
	}
	for _, r := range recs {
		if len(r.TokenTimes) != 7 || len(r.TokenEnds) != 7 || r.TokenEnds[6] != len(r.Text) {
			t.Fatalf("%s: %d times, ends %v, text %q", r.RunID, len(r.TokenTimes), r.TokenEnds, r.Text)
		}
		for i := 1; i < 7; i++ {
			if r.TokenTimes[i] < r.TokenTimes[i-1] || r.TokenEnds[i] <= r.TokenEnds[i-1] {
				t.Fatalf("%s: not in order: %v %v", r.RunID, r.TokenTimes, r.TokenEnds)
			}
		}
		if len(r.ToolCalls) != 1 || r.ToolCalls[0].FinishedAt.Sub(r.ToolCalls[0].StartedAt) < 5e6 ||
			r.ToolCalls[0].FinishedAt.UnixNano() > r.TokenTimes[0] {
			t.Fatalf("%s: tool calls %+v, first token at %d", r.RunID, r.ToolCalls, r.TokenTimes[0])
		}
	}
	// Without RecordTimes nothing is kept.
	plain, c2 := setup(t, Config{})
	resp := do(t, ctx, c2, "POST", plain.BaseURL()+"responses", createBody("rec-plain", false, true, map[string]string{KeyTokens: "3"}))
	if _, err := readAll(t, resp.Body); err != nil {
		t.Fatal(err)
	}
	if rs := plain.Handler().RecordsByPrefix("rec-"); len(rs) != 1 || rs[0].TokenTimes != nil || rs[0].ToolCalls != nil {
		t.Fatalf("without RecordTimes: %+v", rs)
	}
}
