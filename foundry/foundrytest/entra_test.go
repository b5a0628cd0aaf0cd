package foundrytest

import (
	"crypto/rsa"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestEntraTokens: with EntraKeys only a valid token for the endpoint form's
// audience passes; failures get the gateway's 401 body.
func TestEntraTokens(t *testing.T) {
	t.Parallel()
	auth := NewAuthority(AuthorityConfig{})
	t.Cleanup(auth.Close)
	other := NewAuthority(AuthorityConfig{})
	t.Cleanup(other.Close)
	srv, c := setup(t, Config{EntraKeys: []*rsa.PublicKey{auth.PublicKey()}, DefaultTokens: 1})
	ctx := testCtx(t)
	get := func(base, token string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"responses/resp_none", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		n, _ := res.Body.Read(buf)
		b.Write(buf[:n])
		return res.StatusCode, b.String()
	}
	resource, project := srv.BaseURL(), srv.ProjectBaseURL("p1")
	for _, tt := range []struct {
		name, base, token string
		status            int
		aud               string
	}{
		{"resource token on resource", resource, auth.Mint(AudienceCognitiveServices, time.Hour), 404, ""},
		{"trailing slash", resource, auth.Mint(AudienceCognitiveServices+"/", time.Hour), 404, ""},
		{"project token on project", project, auth.Mint(AudienceAIFoundry, time.Hour), 404, ""},
		// microsoft/agent-framework samples: scope https://ai.azure.com/.default against /openai/v1.
		{"ai.azure.com token on resource", resource, auth.Mint(AudienceAIFoundry, time.Hour), 404, ""},
		{"other audience on resource", resource, auth.Mint("https://storage.azure.com", time.Hour), 401, AudienceCognitiveServices},
		{"resource token on project", project, auth.Mint(AudienceCognitiveServices, time.Hour), 401, AudienceAIFoundry},
		{"expired", resource, auth.Mint(AudienceCognitiveServices, -time.Second), 401, AudienceCognitiveServices},
		{"other signer", resource, other.Mint(AudienceCognitiveServices, time.Hour), 401, AudienceCognitiveServices},
		{"garbage", resource, "a.b.c", 401, AudienceCognitiveServices},
		{"none (the key check answers)", resource, "", 401, ""},
		{"huge", resource, strings.Repeat("x", maxTokenBytes+1), 401, AudienceCognitiveServices},
	} {
		status, body := get(tt.base, tt.token)
		if status != tt.status {
			t.Errorf("%s: status %d: %s", tt.name, status, body)
			continue
		}
		if tt.aud != "" && (!strings.Contains(body, `"statusCode":401`) || !strings.Contains(body, "audience is incorrect ("+tt.aud+")")) {
			t.Errorf("%s: body %s", tt.name, body)
		}
	}
	// With the key set it is accepted too; without one only tokens are.
	if status, _ := get(resource, testKey); status != 404 {
		t.Errorf("key as bearer: %d", status)
	}
	only := NewServer(Config{EntraKeys: []*rsa.PublicKey{auth.PublicKey()}})
	t.Cleanup(only.Close)
	if status, body := get(only.BaseURL(), testKey); status != 401 || !strings.Contains(body, `"statusCode":401`) {
		t.Errorf("key on an Entra-only emulator: %d %s", status, body)
	}
	if status, body := get(only.BaseURL(), ""); status != 401 || !strings.Contains(body, "audience is incorrect") {
		t.Errorf("no token on an Entra-only emulator: %d %s", status, body)
	}
}

func TestProjectRoutes(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{DefaultTokens: 2})
	ctx := testCtx(t)
	evs, err := createStream(t, srv, c, createBody("proj", true, true, nil))
	if err != nil {
		t.Fatal(err)
	}
	id := evs[0].Response.ID
	var r wireResponse
	readJSON(t, do(t, ctx, c, "GET", srv.ProjectBaseURL("p1")+"responses/"+id, nil), http.StatusOK, &r)
	if r.ID != id {
		t.Fatalf("project GET: %+v", r)
	}
	apiErr(t, do(t, ctx, c, "PUT", srv.ProjectBaseURL("p1")+"responses/"+id, nil), http.StatusMethodNotAllowed)
	apiErr(t, do(t, ctx, c, "GET", srv.URL()+"/api/projects//openai/v1/responses/"+id, nil), http.StatusNotFound)
	apiErr(t, do(t, ctx, c, "GET", srv.URL()+"/api/projects/p1/other", nil), http.StatusNotFound)
}

func TestThrottleEndpointValidation(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	for _, q := range []string{"", "?for=x", "?for=-1s", "?for=2h", "?for=1s&retry_after=0s", "?for=1s&retry_after=soon"} {
		apiErr(t, do(t, ctx, c, "POST", srv.URL()+"/_emulator/throttle"+q, nil), http.StatusBadRequest)
	}
	var st throttleState
	readJSON(t, do(t, ctx, c, "GET", srv.URL()+"/_emulator/throttle", nil), http.StatusOK, &st)
	if st.Throttled {
		t.Fatalf("throttled by a refused request: %+v", st)
	}
	// 429 bodies and headers as Azure sends them.
	srv.Throttle(time.Minute, 1500*time.Millisecond)
	resp := do(t, ctx, c, "POST", srv.BaseURL()+"responses", createBody("t", true, true, nil))
	if resp.Header.Get("Retry-After") != "2" || resp.Header.Get("Retry-After-Ms") != "1500" {
		t.Errorf("headers %v", resp.Header)
	}
	if e := apiErr(t, resp, http.StatusTooManyRequests); !strings.Contains(e.Message, "retry after 2 seconds") {
		t.Errorf("429: %+v", e)
	}
}
