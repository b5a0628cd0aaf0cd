package foundrytest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/internal/testkit"
)

func TestAuth(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{APIKey: "sekret"})
	ctx := testCtx(t)
	body := `{"model":"m","input":"x"}`
	for _, tc := range []struct {
		name   string
		header map[string]string
		status int
	}{
		{"no key", nil, http.StatusUnauthorized},
		{"wrong api-key", map[string]string{"api-key": "nope"}, http.StatusUnauthorized},
		{"wrong bearer", map[string]string{"Authorization": "Bearer nope"}, http.StatusUnauthorized},
		{"basic", map[string]string{"Authorization": "Basic sekret"}, http.StatusUnauthorized},
		{"api-key", map[string]string{"api-key": "sekret"}, http.StatusOK},
		{"bearer", map[string]string{"Authorization": "Bearer sekret"}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, target := range []struct{ method, path string }{
				{"POST", "responses"}, {"GET", "responses/resp_x"}, {"POST", "responses/resp_x/cancel"},
				{"DELETE", "responses/resp_x"}, {"GET", "nothing/here"},
			} {
				req, _ := http.NewRequestWithContext(ctx, target.method, srv.BaseURL()+target.path, strings.NewReader(body))
				for k, v := range tc.header {
					req.Header.Set(k, v)
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				if tc.status == http.StatusUnauthorized {
					e := apiErr(t, resp, http.StatusUnauthorized)
					if e.Code == nil || *e.Code != "401" {
						t.Fatalf("%s %s: %+v", target.method, target.path, e)
					}
					continue
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusUnauthorized {
					t.Fatalf("%s %s: refused a good key", target.method, target.path)
				}
			}
		})
	}
	// Stats need no key.
	resp, err := c.Get(srv.URL() + "/_emulator/stats")
	if err != nil {
		t.Fatal(err)
	}
	readJSON(t, resp, http.StatusOK, nil)
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/openai/v1/responses", http.StatusMethodNotAllowed},
		{"PUT", "/openai/v1/responses/resp_1", http.StatusMethodNotAllowed},
		{"GET", "/openai/v1/responses/resp_1/cancel", http.StatusMethodNotAllowed},
		{"GET", "/openai/v1/chat/completions", http.StatusNotFound},
		{"GET", "/", http.StatusNotFound},
		{"POST", "/openai/v1/responses/resp_1/cancel/x", http.StatusNotFound},
	} {
		apiErr(t, do(t, ctx, c, tc.method, srv.URL()+tc.path, nil), tc.status)
	}
}

func TestCreateValidationOverHTTP(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{MaxBodyBytes: 1024})
	ctx := testCtx(t)
	for _, tc := range []struct {
		name, body string
		status     int
		param      string
	}{
		{"not json", `{"model":`, 400, ""},
		{"array", `[]`, 400, ""},
		{"wrong type", `{"model":"m","background":"yes"}`, 400, "background"},
		{"background without store", `{"model":"m","background":true,"store":false}`, 400, "background"},
		{"too large", `{"model":"m","input":"` + strings.Repeat("x", 2000) + `"}`, 413, ""},
		{"bad scenario", `{"model":"m","metadata":{"emu_tokens":"lots"}}`, 400, "metadata.emu_tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := apiErr(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses", tc.body), tc.status)
			if got := ""; e.Param != nil {
				got = *e.Param
				if got != tc.param {
					t.Fatalf("param %q, want %q (%s)", got, tc.param, e.Message)
				}
			} else if tc.param != "" {
				t.Fatalf("param null, want %q", tc.param)
			}
		})
	}
	if st := srv.Stats(); st.CreatesRejected != 6 || st.ResponsesCreated != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestStatsEndpoint(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	evs, err := createStream(t, srv, c, createBody("stats", true, true, map[string]string{KeyTokens: "3"}))
	if err != nil {
		t.Fatal(err)
	}
	// The generation ends a moment after the client read the final event.
	testkit.Eventually(t, 15*time.Second, "the generation to end", func() bool { return srv.Stats().ActiveGenerations == 0 })
	var st Stats
	readJSON(t, do(t, ctx, c, "GET", srv.URL()+"/_emulator/stats", nil), http.StatusOK, &st)
	if st.ResponsesCreated != 1 || st.ResponsesByRun["stats"] != 1 || st.TokensGenerated != 3 ||
		st.Statuses[evs[0].Response.ID] != statusCompleted || st.ActiveGenerations != 0 {
		t.Fatalf("stats: %+v", st)
	}
	var raw map[string]json.RawMessage
	readJSON(t, do(t, ctx, c, "GET", srv.URL()+"/_emulator/stats", nil), http.StatusOK, &raw)
	for _, k := range []string{"responses_created", "responses_by_run", "cancels_received", "tokens_after_cancel",
		"tokens_after_disconnect", "tool_calls_completed_after_cancel", "tool_calls_completed_after_disconnect",
		"tool_calls_aborted", "active_generations", "statuses"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("stats JSON lacks %q", k)
		}
	}
}

func TestHandlerClose(t *testing.T) {
	t.Parallel()
	h := NewHandler(Config{})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/openai/v1/responses",
		strings.NewReader(`{"model":"m","background":true,"metadata":{"emu_tokens":"1000000","emu_token_ms":"1000"}}`))
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	if h.Stats().ActiveGenerations != 1 {
		t.Fatal("no active generation")
	}
	h.Close() // stops the generation at once and waits for it
	if n := h.Stats().ActiveGenerations; n != 0 {
		t.Fatalf("%d generations after Close", n)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/_emulator/stats", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("after Close: %d", rec.Code)
	}
	h.Close()
}

func TestNewHandlerPanicsOnBadConfig(t *testing.T) {
	t.Parallel()
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(error).Error(), "ResumeWindow") {
			t.Fatalf("recovered %v", r)
		}
	}()
	NewHandler(Config{ResumeWindow: -1})
}

func TestServerURLs(t *testing.T) {
	t.Parallel()
	srv := NewServer(Config{})
	if !strings.HasPrefix(srv.URL(), "http://127.0.0.1:") || srv.BaseURL() != srv.URL()+"/openai/v1/" || srv.Handler() == nil {
		t.Fatalf("URL %q BaseURL %q", srv.URL(), srv.BaseURL())
	}
	srv.Close()
	srv.Close()
}

func TestServerCloseWithOpenStreams(t *testing.T) {
	t.Parallel()
	srv := NewServer(Config{})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	ctx := testCtx(t)
	var bodies []*http.Response
	for _, bg := range []bool{true, false} {
		body := createBody("closing", bg, true, map[string]string{KeyTokens: "100000", KeyTokenMS: "5", KeyToolMS: "1"})
		resp := do(t, ctx, c, "POST", srv.BaseURL()+"responses", body)
		if _, err := newSSEReader(resp.Body).next(); err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, resp)
	}
	srv.Close() // must end the generations and the streams, and wait for them
	for _, resp := range bodies {
		_, _ = readAll(t, resp.Body)
	}
	if st := srv.Stats(); st.ActiveGenerations != 0 || st.OpenStreams != 0 {
		t.Fatalf("after Close: %+v", st)
	}
}
