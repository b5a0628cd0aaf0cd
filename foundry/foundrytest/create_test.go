package foundrytest

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/internal/testkit"
)

// createStream posts body and returns the SSE events and the error that
// ended the stream.
func createStream(t *testing.T, srv *Server, c *http.Client, body any) ([]wireEvent, error) {
	t.Helper()
	resp := do(t, testCtx(t), c, "POST", srv.BaseURL()+"responses", body)
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("create: status %d: %s", resp.StatusCode, data)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("Content-Type %q", ct)
	}
	return readAll(t, resp.Body)
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestCreateBackgroundStreamWithTool(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	body := createBody("bg-tool", true, true, map[string]string{KeyTokens: "5", KeyToolMS: "10"})
	body["tools"] = []any{
		map[string]any{"type": "web_search"},
		map[string]any{"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example/", "require_approval": "never",
			"allowed_tools": []string{"search_docs"}},
		map[string]any{"type": "function", "name": "f"},
	}
	body["some_future_field"] = map[string]any{"x": 1}
	evs, err := createStream(t, srv, c, body)
	if err != nil {
		t.Fatalf("stream ended with %v", err)
	}
	want := []string{evCreated, evQueued, evInProgress,
		evItemAdded, evListInProgress, evListCompleted, evItemDone,
		evItemAdded, evMCPInProgress, evMCPArgsDelta, evMCPArgsDone, evMCPCompleted, evItemDone,
		evItemAdded, evPartAdded}
	want = append(want, repeat(evTextDelta, 5)...)
	want = append(want, evTextDone, evPartDone, evItemDone, evCompleted)
	if got := types(evs); !slices.Equal(got, want) {
		t.Fatalf("events:\n got %v\nwant %v", got, want)
	}
	checkSeq(t, evs, 0)
	for i, status := range []string{statusQueued, statusQueued, statusInProgress} {
		if evs[i].Response == nil || evs[i].Response.Status != status {
			t.Fatalf("%s: response status %+v, want %s", evs[i].Type, evs[i].Response, status)
		}
	}
	id := evs[0].Response.ID
	if !strings.HasPrefix(id, "resp_") || !evs[0].Response.Background {
		t.Fatalf("created: %+v", evs[0].Response)
	}

	list := evs[6].Item
	if list == nil || list.Type != "mcp_list_tools" || list.ServerLabel != "docs" || evs[4].ItemID != list.ID ||
		!strings.Contains(string(evs[6].Raw), `"tools":[{"name":"search_docs"`) || !strings.Contains(string(evs[3].Raw), `"tools":[]`) {
		t.Fatalf("mcp_list_tools: added %s done %s", evs[3].Raw, evs[6].Raw)
	}
	evs = append(evs[:3:3], evs[7:]...) // the rest as before mcp_list_tools existed
	tool := evs[8].Item
	if tool == nil || tool.Type != "mcp_call" || tool.Name != "search_docs" || tool.ServerLabel != "docs" ||
		tool.Status != statusCompleted || tool.Output == nil || tool.Error != nil || !json.Valid([]byte(tool.Arguments)) {
		t.Fatalf("mcp_call item: %+v", tool)
	}
	if evs[4].ItemID != tool.ID || evs[6].Arguments != tool.Arguments || evs[5].Delta != tool.Arguments {
		t.Fatalf("mcp events do not match the item: %s %s %s", evs[4].Raw, evs[5].Raw, evs[6].Raw)
	}
	text := deltas(evs)
	if strings.Count(text, " ") != 4 || text[0] < 'A' || text[0] > 'Z' {
		t.Fatalf("text %q: want 5 space-separated words", text)
	}
	if evs[len(evs)-4].Text != text {
		t.Fatalf("output_text.done %q != deltas %q", evs[len(evs)-4].Text, text)
	}
	final := evs[len(evs)-1].Response
	if final.Status != statusCompleted || final.text() != text {
		t.Fatalf("completed: status %s text %q", final.Status, final.text())
	}
	checkUsage(t, final.Usage, 5)

	stored := getResponse(t, testCtx(t), c, srv, id)
	if stored.Status != statusCompleted || stored.text() != text || !stored.Background || stored.Model != "gpt-test" ||
		stored.Metadata["run_id"] != "bg-tool" || len(stored.Output) != 3 || stored.Object != "response" {
		t.Fatalf("stored: %+v", stored)
	}
	checkUsage(t, stored.Usage, 5)

	st := srv.Stats()
	if st.ResponsesByRun["bg-tool"] != 1 || st.Statuses[id] != statusCompleted || st.ToolCallsCompleted < 1 {
		t.Fatalf("stats: %+v", st)
	}
	reqs := srv.CreateRequests("bg-tool")
	if len(reqs) != 1 || !strings.Contains(string(reqs[0]), "some_future_field") {
		t.Fatalf("create requests: %s", reqs)
	}
	if recs := srv.Records("bg-tool"); len(recs) != 1 || recs[0].ID != id || recs[0].Tokens != 5 || recs[0].Text != text {
		t.Fatalf("records: %+v", recs)
	}
}

func TestCreateForegroundStream(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{DefaultTokens: 3})
	evs, err := createStream(t, srv, c, createBody("fg", false, true, nil))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{evCreated, evInProgress, evItemAdded, evPartAdded, evTextDelta, evTextDelta, evTextDelta,
		evTextDone, evPartDone, evItemDone, evCompleted}
	if got := types(evs); !slices.Equal(got, want) {
		t.Fatalf("events:\n got %v\nwant %v", got, want)
	}
	checkSeq(t, evs, 0)
	if evs[0].Response.Status != statusInProgress || evs[0].Response.Background {
		t.Fatalf("created: %+v", evs[0].Response)
	}
	checkUsage(t, evs[len(evs)-1].Response.Usage, 3)
}

func TestCreateWithoutStream(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)

	t.Run("background returns queued at once", func(t *testing.T) {
		t.Parallel()
		var r wireResponse
		readJSON(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses",
			createBody("poll", true, false, map[string]string{KeyTokens: "4", KeyTokenMS: "5"})), http.StatusOK, &r)
		if r.Status != statusQueued || !r.Background || r.Usage != nil {
			t.Fatalf("create: %+v", r)
		}
		testkit.Eventually(t, 15*time.Second, "completion", func() bool { return getResponse(t, ctx, c, srv, r.ID).Status == statusCompleted })
		final := getResponse(t, ctx, c, srv, r.ID)
		checkUsage(t, final.Usage, 4)
		if n := strings.Count(final.text(), " "); n != 3 {
			t.Fatalf("text %q", final.text())
		}
	})
	t.Run("foreground returns the final object", func(t *testing.T) {
		t.Parallel()
		var r wireResponse
		readJSON(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses",
			createBody("sync", false, false, map[string]string{KeyTokens: "7"})), http.StatusOK, &r)
		if r.Status != statusCompleted || r.Background {
			t.Fatalf("create: %+v", r)
		}
		checkUsage(t, r.Usage, 7)
	})
	t.Run("store false is not retrievable", func(t *testing.T) {
		t.Parallel()
		body := createBody("nostore", false, false, nil)
		body["store"] = false
		var r wireResponse
		readJSON(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses", body), http.StatusOK, &r)
		apiErr(t, do(t, ctx, c, "GET", srv.BaseURL()+"responses/"+r.ID, nil), http.StatusNotFound)
		if _, ok := srv.Response(r.ID); !ok {
			t.Fatal("the emulator's own view should still have it")
		}
	})
}

func TestCreateMaxOutputTokens(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	body := createBody("maxout", true, true, map[string]string{KeyTokens: "40"})
	body["max_output_tokens"] = 16
	evs, err := createStream(t, srv, c, body)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.Type != evIncomplete || last.Response.Status != statusIncomplete ||
		last.Response.IncompleteDetails == nil || last.Response.IncompleteDetails.Reason != "max_output_tokens" {
		t.Fatalf("last event: %s", last.Raw)
	}
	if n := strings.Count(deltas(evs), " ") + 1; n != 16 {
		t.Fatalf("%d tokens, want 16", n)
	}
	if item := evs[len(evs)-2].Item; item == nil || item.Status != statusIncomplete {
		t.Fatalf("message item: %s", evs[len(evs)-2].Raw)
	}
	checkUsage(t, last.Response.Usage, 16)
}

func TestCreateFailAfter(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	evs, err := createStream(t, srv, c, createBody("fail", true, true, map[string]string{KeyFailAfter: "6"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 7 {
		t.Fatalf("%d events, want 6 then response.failed: %v", len(evs), types(evs))
	}
	checkSeq(t, evs, 0)
	last := evs[6]
	if last.Type != evFailed || last.Response.Status != statusFailed || last.Response.Error == nil ||
		last.Response.Error.Code != "server_error" || last.Response.Error.Message == "" {
		t.Fatalf("last: %s", last.Raw)
	}
	checkUsage(t, last.Response.Usage, 1)
	if got := getResponse(t, testCtx(t), c, srv, evs[0].Response.ID); got.Status != statusFailed || got.text() != deltas(evs) {
		t.Fatalf("stored %+v", got)
	}
}

func TestCreateDropAfterBackgroundGoesOn(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	evs, err := createStream(t, srv, c, createBody("drop", true, true, map[string]string{KeyTokens: "30", KeyTokenMS: "5", KeyDropAfter: "8"}))
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("stream ended with %v, want an unexpected EOF (cut connection)", err)
	}
	if len(evs) != 8 {
		t.Fatalf("%d events before the cut, want 8", len(evs))
	}
	id := evs[0].Response.ID
	testkit.Eventually(t, 15*time.Second, "completion without a client", func() bool { return record(t, srv, id).Status == statusCompleted })
	rec := record(t, srv, id)
	if rec.Tokens != 30 || rec.TokensAfterDisconnect == 0 || rec.DisconnectedAt.IsZero() {
		t.Fatalf("record: %+v", rec)
	}

	resp := do(t, ctx, c, "GET", srv.BaseURL()+"responses/"+id+"?stream=true&starting_after=7", nil)
	rest, err := readAll(t, resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	checkSeq(t, rest, 8)
	all := append(evs, rest...)
	if deltas(all) != rec.Text || rest[len(rest)-1].Type != evCompleted {
		t.Fatalf("replayed text %q != %q", deltas(all), rec.Text)
	}
}

func TestCreateStatus(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	for _, tc := range []struct {
		status int
		typ    string
	}{
		{http.StatusTooManyRequests, "requests"},
		{http.StatusInternalServerError, "server_error"},
		{http.StatusServiceUnavailable, "server_error"},
		{http.StatusBadRequest, "invalid_request_error"},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			run := "status-" + http.StatusText(tc.status)
			// A bad value is refused (400) but still recorded as received.
			apiErr(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses",
				createBody(run, true, true, map[string]string{KeyCreateStatus: "200"})), http.StatusBadRequest)
			resp := do(t, ctx, c, "POST", srv.BaseURL()+"responses",
				createBody(run, true, true, map[string]string{KeyCreateStatus: strconv.Itoa(tc.status)}))
			retry := resp.Header.Get("Retry-After")
			e := apiErr(t, resp, tc.status)
			if e.Type != tc.typ {
				t.Fatalf("type %q, want %q", e.Type, tc.typ)
			}
			if (tc.status == http.StatusTooManyRequests) != (retry == "1") {
				t.Fatalf("Retry-After %q", retry)
			}
			if n := len(srv.CreateRequests(run)); n != 2 {
				t.Fatalf("%d create requests recorded, want 2", n)
			}
			if n := srv.Stats().ResponsesByRun[run]; n != 0 {
				t.Fatalf("%d responses created, want none", n)
			}
		})
	}
}

// TestCreateStatusTimes: with emu_create_status_times=N only the first N
// creates of a run id get the status (a transient error); the next one is
// served.
func TestCreateStatusTimes(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	md := map[string]string{KeyCreateStatus: "503", KeyCreateStatusTimes: "2", KeyTokens: "3"}
	for range 2 {
		apiErr(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses", createBody("times", true, false, md)), http.StatusServiceUnavailable)
	}
	var obj wireResponse
	readJSON(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses", createBody("times", true, false, md)), http.StatusOK, &obj)
	if n := srv.Stats().ResponsesByRun["times"]; n != 1 {
		t.Fatalf("%d responses created, want 1", n)
	}
	// Without emu_create_status it is refused.
	apiErr(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses",
		createBody("times-bad", true, false, map[string]string{KeyCreateStatusTimes: "1"})), http.StatusBadRequest)
}

// TestCreatedDelaySendsHeadersThenKeepalives: under load the service sends
// the 200 and the SSE headers at once, then keepalive events, then
// response.created minutes later (BerriAI/litellm#39617). A cancel by id
// (the response exists) still ends it, and response.created comes with
// status cancelled.
func TestCreatedDelaySendsHeadersThenKeepalives(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	resp := do(t, ctx, c, "POST", srv.BaseURL()+"responses",
		createBody("late", true, true, map[string]string{KeyCreatedMS: "600000", KeyKeepaliveMS: "5"}))
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("headers: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := newSSEReader(resp.Body)
	for i := 0; i < 3; i++ {
		ev, err := s.next()
		if err != nil || ev.Type != evKeepalive || ev.SequenceNumber == nil || *ev.SequenceNumber != i || ev.Response != nil {
			t.Fatalf("event %d = %+v, %v; want keepalive %d", i, ev, err, i)
		}
	}
	rec := srv.Records("late")[0]
	if rec.Status != statusQueued {
		t.Fatalf("record before created: %+v", rec)
	}
	if got := cancelResp(t, srv, c, rec.ID, http.StatusOK); got.Status != statusCancelled {
		t.Fatalf("cancel: %+v", got)
	}
	rest, err := s.rest()
	if err != nil {
		t.Fatal(err)
	}
	last := rest[len(rest)-1]
	if last.Type != evCreated || last.Response.ID != rec.ID || last.Response.Status != statusCancelled {
		t.Fatalf("stream after cancel: %v", types(rest))
	}
	for _, ev := range rest[:len(rest)-1] {
		if ev.Type != evKeepalive {
			t.Fatalf("stream after cancel: %v", types(rest))
		}
	}
	checkSeq(t, rest, 3)
}

// TestCreatedDelayBackgroundJSON: a background create without stream answers
// with response.created's object, not with the first keepalive.
func TestCreatedDelayBackgroundJSON(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	var r wireResponse
	readJSON(t, do(t, testCtx(t), c, "POST", srv.BaseURL()+"responses",
		createBody("late-json", true, false, map[string]string{KeyCreatedMS: "40", KeyKeepaliveMS: "5"})), http.StatusOK, &r)
	if r.ID == "" || r.Status != statusQueued {
		t.Fatalf("create: %+v", r)
	}
	if rec := record(t, srv, r.ID); rec.Events < 2 {
		t.Fatalf("no keepalive before response.created: %+v", rec)
	}
}

func TestAgentReference(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	body := createBody("agent", false, false, nil)
	delete(body, "model")
	body["agent_reference"] = map[string]any{"type": "agent_reference", "name": "helper", "version": "2"}
	var r wireResponse
	readJSON(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses", body), http.StatusOK, &r)
	var ref map[string]string
	if err := json.Unmarshal(r.AgentReference, &ref); err != nil || ref["name"] != "helper" || ref["version"] != "2" || r.Model != "" {
		t.Fatalf("agent_reference echo %s model %q", r.AgentReference, r.Model)
	}

	body["model"] = "gpt-test"
	e := apiErr(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses", body), http.StatusBadRequest)
	if !strings.Contains(e.Message, "exactly one") {
		t.Fatalf("both: %+v", e)
	}
	delete(body, "model")
	delete(body, "agent_reference")
	e = apiErr(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses", body), http.StatusBadRequest)
	if e.Message != "Missing required parameter: 'model'." {
		t.Fatalf("neither: %+v", e)
	}
}

func TestDeterministicText(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	text := func(run, input string) string {
		body := createBody(run, false, false, map[string]string{KeyTokens: "12"})
		body["input"] = input
		var r wireResponse
		readJSON(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses", body), http.StatusOK, &r)
		return r.text()
	}
	a, b := text("det", "hello"), text("det", "hello")
	if a != b || a == "" {
		t.Fatalf("same request, different text: %q vs %q", a, b)
	}
	if d := text("det", "goodbye"); d == a {
		t.Fatalf("different input, same text %q", d)
	}
}

func TestBackgroundRunsWithoutClient(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	resp := do(t, ctx, c, "POST", srv.BaseURL()+"responses",
		createBody("gone", true, true, map[string]string{KeyTokens: "400", KeyTokenMS: "1", KeyToolMS: "800"}))
	s := newSSEReader(resp.Body)
	ev, err := s.next()
	if err != nil {
		t.Fatal(err)
	}
	id := ev.Response.ID
	resp.Body.Close() // the client goes away during the tool call
	testkit.Eventually(t, 15*time.Second, "the disconnect to be seen", func() bool { return !record(t, srv, id).DisconnectedAt.IsZero() })
	testkit.Eventually(t, 15*time.Second, "completion", func() bool { return record(t, srv, id).Status == statusCompleted })
	rec := record(t, srv, id)
	if rec.Tokens != 400 || rec.TokensAfterDisconnect != 400 {
		t.Fatalf("record: %+v", rec)
	}
	if st := srv.Stats(); st.TokensAfterDisconnect < 400 || st.ToolCallsCompletedAfterDisconnect < 1 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestForegroundDisconnect(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})

	t.Run("during the tool call", func(t *testing.T) {
		t.Parallel()
		resp := do(t, testCtx(t), c, "POST", srv.BaseURL()+"responses",
			createBody("fg-tool", false, true, map[string]string{KeyToolMS: "1500", KeyTokens: "50"}))
		s := newSSEReader(resp.Body)
		var id string
		for {
			ev, err := s.next()
			if err != nil {
				t.Fatal(err)
			}
			if ev.Type == evCreated {
				id = ev.Response.ID
			}
			if ev.Type == evMCPArgsDone {
				break
			}
		}
		resp.Body.Close()
		testkit.Eventually(t, 15*time.Second, "the disconnect to be seen", func() bool { return !record(t, srv, id).DisconnectedAt.IsZero() })
		testkit.Eventually(t, 15*time.Second, "the generation to end", func() bool { return record(t, srv, id).Status == statusCancelled })
		rec := record(t, srv, id)
		if rec.Tokens != 0 {
			t.Fatalf("the write after the tool call should have failed: %+v", rec)
		}
		var stored wireResponse
		raw, _ := srv.Response(id)
		_ = json.Unmarshal(raw, &stored)
		if len(stored.Output) != 1 || stored.Output[0].Status != statusCompleted || stored.Output[0].Output == nil {
			t.Fatalf("the tool call should have run to completion: %s", raw)
		}
	})
	t.Run("during text", func(t *testing.T) {
		t.Parallel()
		resp := do(t, testCtx(t), c, "POST", srv.BaseURL()+"responses",
			createBody("fg-text", false, true, map[string]string{KeyTokenMS: "5", KeyTokens: "5000"}))
		s := newSSEReader(resp.Body)
		var id string
		for n := 0; n < 3; {
			ev, err := s.next()
			if err != nil {
				t.Fatal(err)
			}
			if ev.Type == evCreated {
				id = ev.Response.ID
			}
			if ev.Type == evTextDelta {
				n++
			}
		}
		resp.Body.Close()
		testkit.Eventually(t, 15*time.Second, "the generation to end", func() bool { return record(t, srv, id).Status == statusCancelled })
		rec := record(t, srv, id)
		if rec.TokensAfterDisconnect != 1 || rec.Tokens >= 5000 {
			t.Fatalf("want exactly the token whose write failed: %+v", rec)
		}
		if got := strings.Count(rec.Text, " ") + 1; got != rec.Tokens-1 {
			t.Fatalf("text has %d tokens, generated %d", got, rec.Tokens)
		}
	})
}

func TestToolFailureThenText(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	evs, err := createStream(t, srv, c, createBody("toolfail", true, true, map[string]string{KeyToolFail: "1", KeyTokens: "4"}))
	if err != nil {
		t.Fatal(err)
	}
	if evs[7].Type != evMCPFailed {
		t.Fatalf("event 7 is %s, want %s: %v", evs[7].Type, evMCPFailed, types(evs))
	}
	item := evs[8].Item
	if item == nil || item.Status != statusFailed || item.Error == nil || item.Error.Message == "" || item.Output != nil {
		t.Fatalf("failed mcp_call item: %s", evs[8].Raw)
	}
	last := evs[len(evs)-1]
	if last.Type != evCompleted || strings.Count(last.Response.text(), " ") != 3 {
		t.Fatalf("generation should go on after a failed tool call: %s", last.Raw)
	}
}

func TestCreateDropAfterForegroundEndsIt(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	evs, err := createStream(t, srv, c, createBody("drop-fg", false, true, map[string]string{KeyTokens: "100000", KeyTokenMS: "2", KeyDropAfter: "6"}))
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(evs) != 6 {
		t.Fatalf("%d events, then %v; want 6 then a cut", len(evs), err)
	}
	id := evs[0].Response.ID
	testkit.Eventually(t, 15*time.Second, "the generation to end at its next write", func() bool { return record(t, srv, id).Status == statusCancelled })
	if rec := record(t, srv, id); rec.Tokens >= 100000 || rec.TokensAfterDisconnect != 1 {
		t.Fatalf("record: %+v", rec)
	}
}
