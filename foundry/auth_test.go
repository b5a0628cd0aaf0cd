package foundry

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

func TestAPIKeyHeader(t *testing.T) {
	t.Parallel()
	f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
		writeJSON(w, 200, respObj("resp_1", "completed", nil))
	})
	if _, err := f.client(t).Get(ctxT(t), "resp_1"); err != nil {
		t.Fatal(err)
	}
	h := f.requests()[0].Header
	if h.Get("api-key") != "test-key" {
		t.Errorf("api-key = %q", h.Get("api-key"))
	}
	if h.Get("Authorization") != "" {
		t.Errorf("Authorization = %q, want none", h.Get("Authorization"))
	}
}

func TestEntraBearerTokenPerHost(t *testing.T) {
	t.Parallel()
	f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
		writeJSON(w, 200, respObj("resp_1", "completed", nil))
	})
	cred := &fakeCred{}
	c := f.client(t, func(cfg *Config) { cfg.APIKey = ""; cfg.Credential = cred })
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Get(ctx, "resp_1"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if cred.count() != 1 {
		t.Errorf("GetToken calls = %d, want 1 (cached)", cred.count())
	}
	if got := cred.scopes[0]; len(got) != 1 || got[0] != ScopeCognitiveServices {
		t.Errorf("scopes = %v, want [%s] for a local/resource host", got, ScopeCognitiveServices)
	}
	for _, r := range f.requests() {
		if r.Header.Get("Authorization") != "Bearer tok-1" {
			t.Errorf("Authorization = %q", r.Header.Get("Authorization"))
		}
		if r.Header.Get("api-key") != "" {
			t.Errorf("api-key sent with Entra ID: %q", r.Header.Get("api-key"))
		}
	}

	// A project endpoint asks for the Foundry scope; the request path keeps the
	// project prefix. The host is not reachable, so route it to the fake.
	proj := newFake(t, "/api/projects/p1/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
		writeJSON(w, 200, respObj("resp_2", "completed", nil))
	})
	cred2 := &fakeCred{}
	c2, err := New(Config{
		BaseURL:    "https://res.services.ai.azure.com/api/projects/p1/openai/v1",
		Credential: cred2,
		HTTPClient: &http.Client{Transport: redirectTransport{to: proj.srv.URL}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Get(ctx, "resp_2"); err != nil {
		t.Fatal(err)
	}
	if got := cred2.scopes[0][0]; got != ScopeAIFoundry {
		t.Errorf("project scope = %q, want %q", got, ScopeAIFoundry)
	}
	if got := proj.requests()[0]; got.Path != "/api/projects/p1/openai/v1/responses/resp_2" || got.Header.Get("Authorization") != "Bearer tok-1" {
		t.Errorf("project request = %s %v", got.Path, got.Header.Get("Authorization"))
	}
}

// redirectTransport sends every request to another host (plain HTTP), keeping the path.
type redirectTransport struct{ to string }

func (rt redirectTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	u := *r.URL
	u.Scheme = "http"
	u.Host = rt.to[len("http://"):]
	r.URL = &u
	r.Host = ""
	return http.DefaultTransport.RoundTrip(r)
}

func TestTokenSourceRefresh(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	cred := &fakeCred{ttl: time.Hour, now: clock}
	ts := newTokenSource(cred, "https://scope/.default")
	ts.now = clock
	ctx := ctxT(t)

	tok, err := ts.token(ctx)
	if err != nil || tok != "tok-1" {
		t.Fatalf("token = %q, %v", tok, err)
	}
	now = now.Add(50 * time.Minute) // 10 min left: still cached
	if tok, _ := ts.token(ctx); tok != "tok-1" {
		t.Errorf("after 50m token = %q, want cached tok-1", tok)
	}
	now = now.Add(6 * time.Minute) // inside the 5 min margin: renewed
	if tok, _ := ts.token(ctx); tok != "tok-2" {
		t.Errorf("near expiry token = %q, want tok-2", tok)
	}

	// An early renewal that fails keeps the old token while it is valid.
	now = now.Add(56 * time.Minute)
	cred.mu.Lock()
	cred.err = errors.New("aad down")
	cred.mu.Unlock()
	if tok, err := ts.token(ctx); err != nil || tok != "tok-2" {
		t.Errorf("failed early renewal = %q, %v; want tok-2, nil", tok, err)
	}
	now = now.Add(10 * time.Minute) // expired
	if _, err := ts.token(ctx); err == nil {
		t.Error("expired token with failing credential: no error")
	}

	// RefreshOn is honoured.
	cred2 := &refreshOnCred{refreshIn: time.Minute, now: clock}
	ts2 := newTokenSource(cred2, "s")
	ts2.now = clock
	ts2.token(ctx)
	now = now.Add(2 * time.Minute)
	ts2.token(ctx)
	if cred2.calls != 2 {
		t.Errorf("RefreshOn ignored: %d calls", cred2.calls)
	}

	// A token that lives less than twice the margin is renewed half way, not
	// on every call.
	cred3 := &fakeCred{ttl: 4 * time.Minute, now: clock}
	ts3 := newTokenSource(cred3, "s")
	ts3.now = clock
	ts3.token(ctx)
	now = now.Add(time.Minute)
	if tok, _ := ts3.token(ctx); tok != "tok-1" || cred3.count() != 1 {
		t.Errorf("short-lived token renewed after a quarter of its life: %q, %d calls", tok, cred3.count())
	}
	now = now.Add(90 * time.Second)
	if tok, _ := ts3.token(ctx); tok != "tok-2" {
		t.Errorf("short-lived token past half its life = %q, want tok-2", tok)
	}
}

type refreshOnCred struct {
	calls     int
	refreshIn time.Duration
	now       func() time.Time
}

func (c *refreshOnCred) GetToken(ctx context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	c.calls++
	return azcore.AccessToken{Token: "t", ExpiresOn: c.now().Add(time.Hour), RefreshOn: c.now().Add(c.refreshIn)}, nil
}

func TestEntraTokenErrorNamesScope(t *testing.T) {
	t.Parallel()
	f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
		t.Error("request sent without a token")
	})
	cred := &fakeCred{err: errors.New("no identity")}
	c := f.client(t, func(cfg *Config) { cfg.APIKey = ""; cfg.Credential = cred; cfg.MaxRetries = -1 })
	_, err := c.Get(ctxT(t), "resp_1")
	if err == nil || !errors.Is(err, cred.err) {
		t.Fatalf("err = %v", err)
	}
	if want := ScopeCognitiveServices; !strings.Contains(err.Error(), want) {
		t.Errorf("err %q does not name the scope", err)
	}
}

// TestEnvironmentDoesNotLeak: openai.NewClient reads OPENAI_* variables; none of
// them may change where requests go or add credentials. Not parallel (Setenv).
func TestEnvironmentDoesNotLeak(t *testing.T) {
	f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
		writeJSON(w, 200, respObj("resp_1", "completed", nil))
	})
	t.Setenv("OPENAI_API_KEY", "sk-leaked")
	t.Setenv("OPENAI_ADMIN_KEY", "sk-admin-leaked")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1/")
	t.Setenv("OPENAI_ORG_ID", "org-leaked")
	t.Setenv("OPENAI_PROJECT_ID", "proj-leaked")
	t.Setenv("OPENAI_CUSTOM_HEADERS", "Authorization: Bearer custom-leaked\nApi-Key: custom-leaked")

	for _, entra := range []bool{false, true} {
		c := f.client(t, func(cfg *Config) {
			if entra {
				cfg.APIKey = ""
				cfg.Credential = &fakeCred{}
			}
		})
		if _, err := c.Get(ctxT(t), "resp_1"); err != nil {
			t.Fatalf("entra=%v: %v (base URL from env?)", entra, err)
		}
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("requests = %d", len(reqs))
	}
	for i, r := range reqs {
		if r.Path != "/openai/v1/responses/resp_1" {
			t.Errorf("path = %q", r.Path)
		}
		for _, h := range []string{"OpenAI-Organization", "OpenAI-Project"} {
			if v := r.Header.Get(h); v != "" {
				t.Errorf("%s = %q leaked", h, v)
			}
		}
		auth, key := r.Header.Get("Authorization"), r.Header.Get("api-key")
		if i == 0 && (auth != "" || key != "test-key") {
			t.Errorf("api key mode: Authorization=%q api-key=%q", auth, key)
		}
		if i == 1 && (auth != "Bearer tok-1" || key != "") {
			t.Errorf("Entra mode: Authorization=%q api-key=%q", auth, key)
		}
	}
}

// TestTokenFailureIsAnAuthError: a credential that cannot give a token is an
// authentication failure (ErrAuth), reported at once, not a connection error
// that the SDK retries with backoff.
func TestTokenFailureIsAnAuthError(t *testing.T) {
	t.Parallel()
	f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
		t.Error("request sent without a token")
	})
	cred := &fakeCred{err: errors.New("AADSTS7000215: Invalid client secret provided")}
	c := f.client(t, func(cfg *Config) { cfg.APIKey = ""; cfg.Credential = cred; cfg.MaxRetries = 5 })
	calls := map[string]func() error{
		"get":    func() error { _, err := c.Get(ctxT(t), "resp_1"); return err },
		"cancel": func() error { _, err := c.Cancel(ctxT(t), "resp_1"); return err },
		"resume": func() error { _, err := c.Resume(ctxT(t), "resp_1", 3); return err },
		"create": func() error {
			_, err := c.Create(ctxT(t), CreateRequest{Model: "m", Input: []byte(`"x"`)})
			return err
		},
	}
	for name, call := range calls {
		before := cred.count()
		err := call()
		if !errors.Is(err, ErrAuth) || !errors.Is(err, cred.err) {
			t.Errorf("%s: err = %v, want ErrAuth wrapping the credential's error", name, err)
		}
		if n := cred.count() - before; n != 1 {
			t.Errorf("%s: the credential was asked %d times: a token failure was retried like a network error", name, n)
		}
		if !strings.Contains(err.Error(), "Entra ID token") {
			t.Errorf("%s: message %q does not say it is about the token", name, err)
		}
	}
}
