package foundrytest

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// The frames of the ways a response ends (issue 20), as reported from the
// real service.

// stream creates a streamed background response with md and returns its
// events.
func stream(t *testing.T, md map[string]string, mod ...func(map[string]any)) []wireEvent {
	t.Helper()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	body := createBody("frames", true, true, md)
	for _, m := range mod {
		m(body)
	}
	resp := do(t, ctx, c, http.MethodPost, srv.BaseURL()+"responses", body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	evs, err := readAll(t, resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	checkSeq(t, evs, 0)
	return evs
}

// errorFields decodes an error event's code, message and param.
func errorFields(t *testing.T, ev wireEvent) (code, message string, param any) {
	t.Helper()
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Param   any    `json:"param"`
	}
	if err := json.Unmarshal(ev.Raw, &e); err != nil {
		t.Fatal(err)
	}
	return e.Code, e.Message, e.Param
}

// Row 2: deltas, then response.failed with "error": null, then an error
// event content_policy_violation.
func TestContentFilterStreamFrames(t *testing.T) {
	t.Parallel()
	evs := stream(t, map[string]string{"emu_tokens": "6", "emu_content_filter": "stream"})
	n := len(evs)
	if deltas(evs) == "" || n < 2 || evs[n-2].Type != evFailed || evs[n-1].Type != evError {
		t.Fatalf("types %v", types(evs))
	}
	if strings.Count(deltas(evs), " ") >= 6 {
		t.Errorf("the filter did not stop the text: %q", deltas(evs))
	}
	failed := evs[n-2].Response
	if failed.Status != statusFailed || failed.Error != nil || !strings.Contains(string(evs[n-2].Raw), `"error":null`) {
		t.Errorf("response.failed = %s", evs[n-2].Raw)
	}
	if code, msg, param := errorFields(t, evs[n-1]); code != contentPolicyCode || msg != filteredMessage || param != nil {
		t.Errorf("error event = %s", evs[n-1].Raw)
	}
}

// Row 4: an error event insufficient_quota with sequence number 0, then
// response.failed carrying the error and the response id.
func TestErrorFirstFrames(t *testing.T) {
	t.Parallel()
	evs := stream(t, map[string]string{"emu_error_first": "1"})
	if !reflect.DeepEqual(types(evs), []string{evError, evFailed}) {
		t.Fatalf("types %v", types(evs))
	}
	if code, msg, _ := errorFields(t, evs[0]); code != quotaCode || msg != quotaMessage {
		t.Errorf("error event = %s", evs[0].Raw)
	}
	if r := evs[1].Response; r.ID == "" || r.Status != statusFailed || r.Error == nil || r.Error.Code != quotaCode {
		t.Errorf("response.failed = %s", evs[1].Raw)
	}
}

// Row 3: a refusal part, refusal deltas, refusal.done with the whole text,
// the item done with the refusal, response.completed.
func TestRefusalFrames(t *testing.T) {
	t.Parallel()
	evs := stream(t, map[string]string{"emu_refusal": "1"})
	var refusal strings.Builder
	var done string
	for _, ev := range evs {
		switch ev.Type {
		case evTextDelta, evTextDone:
			t.Fatalf("text event in a refusal: %s", ev.Raw)
		case evRefusalDelta:
			if ev.ItemID == "" {
				t.Errorf("refusal delta without item_id: %s", ev.Raw)
			}
			refusal.WriteString(ev.Delta)
		case evRefusalDone:
			var d refusalDoneEvent
			_ = json.Unmarshal(ev.Raw, &d)
			done = d.Refusal
		case evPartAdded:
			if !strings.Contains(string(ev.Raw), `"part":{"type":"refusal","refusal":""}`) {
				t.Errorf("part added = %s", ev.Raw)
			}
		}
	}
	last := evs[len(evs)-1]
	if refusal.String() != refusalText || done != refusalText || last.Type != evCompleted {
		t.Fatalf("deltas %q done %q last %s", refusal.String(), done, last.Type)
	}
	want := `"content":[{"type":"refusal","refusal":"` + refusalText + `"}]`
	if !strings.Contains(string(last.Raw), want) {
		t.Errorf("completed response lacks %s: %s", want, last.Raw)
	}
}

// Row 7: response.mcp_list_tools.failed and an mcp_list_tools item with
// the error, then response.failed.
func TestListToolsFailedFrames(t *testing.T) {
	t.Parallel()
	evs := stream(t, map[string]string{"emu_list_tools_fail": "1"}, func(b map[string]any) {
		b["tools"] = []any{map[string]any{"type": "mcp", "server_label": "docs", "server_url": "https://mcp.test", "require_approval": "never"}}
	})
	got := types(evs)
	want := []string{evCreated, evQueued, evInProgress, evItemAdded, evListInProgress, evListFailed, evItemDone, evFailed}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("types %v, want %v", got, want)
	}
	var done struct {
		Item mcpListToolsItem `json:"item"`
	}
	_ = json.Unmarshal(evs[6].Raw, &done)
	if done.Item.Error == nil || *done.Item.Error != "Error retrieving tool list from MCP server: 'docs'. Http status code: 424 (Failed Dependency)" {
		t.Errorf("item = %s", evs[6].Raw)
	}
}

// Row 9: keepalives between text deltas.
func TestKeepalivesMidStreamFrames(t *testing.T) {
	t.Parallel()
	evs := stream(t, map[string]string{"emu_tokens": "5", "emu_keepalive_every": "2"})
	var order []string
	for _, ev := range evs {
		if ev.Type == evTextDelta || ev.Type == evKeepalive {
			order = append(order, ev.Type)
		}
	}
	want := []string{evTextDelta, evTextDelta, evKeepalive, evTextDelta, evTextDelta, evKeepalive, evTextDelta}
	if !reflect.DeepEqual(order, want) {
		t.Fatalf("order %v", order)
	}
}

// Row 10: deltas carry obfuscation unless stream_options turns it off.
func TestObfuscationFrames(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		options any
		want    bool
	}{
		{"default", nil, true},
		{"on", map[string]any{"include_obfuscation": true}, true},
		{"off", map[string]any{"include_obfuscation": false}, false},
	} {
		evs := stream(t, map[string]string{"emu_tokens": "3"}, func(b map[string]any) {
			if tt.options != nil {
				b["stream_options"] = tt.options
			}
		})
		for _, ev := range evs {
			if ev.Type == evTextDelta && strings.Contains(string(ev.Raw), `"obfuscation":"`) != tt.want {
				t.Errorf("%s: %s", tt.name, ev.Raw)
			}
		}
	}
	srv, c := setup(t, Config{})
	body := createBody("bad-options", true, true, nil)
	body["stream_options"] = map[string]any{"include_obfuscation": "no"}
	if e := apiErr(t, do(t, testCtx(t), c, http.MethodPost, srv.BaseURL()+"responses", body), 400); e.Param == nil ||
		*e.Param != "stream_options.include_obfuscation" {
		t.Errorf("error = %+v", e)
	}
}

// Row 5: a 400 content_filter with Azure's innererror, and request ids on
// every answer.
func TestContentFilterPromptAndRequestIDs(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	resp := do(t, ctx, c, http.MethodPost, srv.BaseURL()+"responses", createBody("cf", true, true, map[string]string{"emu_content_filter": "prompt"}))
	var body struct {
		Error struct {
			Code       string     `json:"code"`
			Param      string     `json:"param"`
			Status     int        `json:"status"`
			InnerError innerError `json:"innererror"`
		} `json:"error"`
	}
	readJSON(t, resp, http.StatusBadRequest, &body)
	e := body.Error
	if e.Code != "content_filter" || e.Param != "prompt" || e.Status != 400 || e.InnerError.Code != "ResponsibleAIPolicyViolation" ||
		!e.InnerError.ContentFilterResult["violence"].Filtered || e.InnerError.ContentFilterResult["violence"].Severity != "medium" {
		t.Errorf("error = %+v", e)
	}
	seen := map[string]bool{}
	for _, r := range []*http.Response{
		resp,
		do(t, ctx, c, http.MethodGet, srv.BaseURL()+"responses/resp_none", nil),
		do(t, ctx, c, http.MethodGet, srv.BaseURL()+"nothing", nil),
		testkitGet(t, srv.BaseURL()+"responses/resp_none"), // no key: 401
	} {
		r.Body.Close()
		id, apim := r.Header.Get("X-Request-Id"), r.Header.Get("Apim-Request-Id")
		if len(id) != 36 || len(apim) != 36 || seen[id] || id == apim {
			t.Errorf("%s: x-request-id %q apim-request-id %q", r.Request.URL.Path, id, apim)
		}
		seen[id] = true
	}
}

// testkitGet sends a GET without credentials.
func testkitGet(t *testing.T, url string) *http.Response {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET %s without a key: %d", url, res.StatusCode)
	}
	return res
}

// Directive values outside their choices are refused, naming the key.
func TestEndingDirectivesValidated(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	for key, v := range map[string]string{KeyContentFilter: "maybe", KeyShouldRetry: "no", KeyRefusal: "2", KeyKeepaliveEvery: "-1"} {
		resp := do(t, testCtx(t), c, http.MethodPost, srv.BaseURL()+"responses", createBody("bad-"+key, true, true, map[string]string{key: v}))
		if e := apiErr(t, resp, 400); e.Param == nil || *e.Param != "metadata."+key {
			t.Errorf("%s=%s: %+v", key, v, e)
		}
	}
}
