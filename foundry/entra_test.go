package foundry_test

import (
	"context"
	"crypto/rsa"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/testkit"
)

// authRecorder is an HTTP transport that records the bearer token of every request.
type authRecorder struct {
	mu     sync.Mutex
	tokens []string
}

func (a *authRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	a.mu.Lock()
	a.tokens = append(a.tokens, strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer "))
	a.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func (a *authRecorder) last() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tokens[len(a.tokens)-1]
}

// entraSetup starts a token authority and an emulator that accepts only its
// tokens (no API key).
func entraSetup(t *testing.T, lifetime time.Duration) (*foundrytest.Authority, *foundrytest.Server) {
	t.Helper()
	auth := foundrytest.NewAuthority(foundrytest.AuthorityConfig{TokenLifetime: lifetime})
	t.Cleanup(auth.Close)
	srv := foundrytest.NewServer(foundrytest.Config{EntraKeys: []*rsa.PublicKey{auth.PublicKey()}, DefaultTokens: 3})
	t.Cleanup(srv.Close)
	return auth, srv
}

func entraClient(t *testing.T, auth *foundrytest.Authority, base string, mod ...func(*foundry.Config)) (*foundry.Client, *authRecorder) {
	t.Helper()
	cred, err := auth.Credential()
	if err != nil {
		t.Fatal(err)
	}
	rec := &authRecorder{}
	cfg := foundry.Config{BaseURL: base, Credential: cred, HTTPClient: &http.Client{Transport: rec}}
	for _, m := range mod {
		m(&cfg)
	}
	c, err := foundry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c, rec
}

// Item 11: Entra ID end to end through azidentity: the token's audience must
// match the endpoint form, for both forms the client picks the right scope.
func TestEntraEndToEnd(t *testing.T) {
	t.Parallel()
	auth, srv := entraSetup(t, time.Hour)
	ctx := ctxT(t)
	for _, tt := range []struct {
		base, scope string
	}{
		{srv.BaseURL(), foundry.ScopeCognitiveServices},
		{srv.ProjectBaseURL("proj"), foundry.ScopeAIFoundry},
	} {
		c, _ := entraClient(t, auth, tt.base)
		if c.Scope() != tt.scope {
			t.Fatalf("%s: scope %s", tt.base, c.Scope())
		}
		s, err := c.Create(ctx, req("entra", nil))
		if err != nil {
			t.Fatalf("%s: %v", tt.base, err)
		}
		_, text, last := drainAll(s)
		if s.Err() != nil || text == "" || last.Status != foundry.StatusCompleted {
			t.Fatalf("%s: %v %+v", tt.base, s.Err(), last)
		}
		if _, err := c.Get(ctx, s.ResponseID()); err != nil {
			t.Fatalf("%s: get: %v", tt.base, err)
		}
	}
	if scopes := auth.Scopes(); len(scopes) != 2 || scopes[0] != foundry.ScopeCognitiveServices || scopes[1] != foundry.ScopeAIFoundry {
		t.Errorf("scopes asked for = %v", scopes)
	}

	// The resource endpoint also accepts the ai.azure.com audience
	// (microsoft/agent-framework samples use that scope against /openai/v1).
	foundryScope, _ := entraClient(t, auth, srv.BaseURL(), func(cfg *foundry.Config) { cfg.Scope = foundry.ScopeAIFoundry })
	s, err := foundryScope.Create(ctx, req("entra-ai-scope", nil))
	if err != nil {
		t.Fatalf("ai.azure.com scope on the resource endpoint: %v", err)
	}
	_ = s.Close()

	// A token for another audience is refused, as an auth error that says
	// why.
	wrong, _ := entraClient(t, auth, srv.BaseURL(), func(cfg *foundry.Config) { cfg.Scope = "https://storage.azure.com/.default" })
	_, err = wrong.Create(ctx, req("entra-wrong", nil))
	if !errors.Is(err, foundry.ErrAuth) || !errors.Is(err, foundry.ErrUnauthorized) ||
		!strings.Contains(err.Error(), "audience is incorrect (https://cognitiveservices.azure.com)") {
		t.Errorf("wrong audience: %v", err)
	}
	if n := len(srv.CreateRequests("entra-wrong")); n != 0 {
		t.Errorf("a create with a wrong token reached the API: %d", n)
	}
}

// A token that expires during a long run is renewed: resume, get and cancel
// after its expiry still work.
func TestEntraTokenExpiresDuringRun(t *testing.T) {
	t.Parallel()
	auth, srv := entraSetup(t, 2*time.Second)
	ctx := ctxT(t)
	c, rec := entraClient(t, auth, srv.BaseURL())
	s, err := c.Create(ctx, req("entra-long", map[string]string{"emu_tokens": "100000", "emu_token_ms": "5"}))
	if err != nil {
		t.Fatal(err)
	}
	first := rec.last()
	for i := 0; i < 5 && s.Next(); i++ {
	}
	seq, _ := s.LastSeq()
	id := s.ResponseID()
	s.Close()

	// Wait until the emulator refuses the token the create used.
	probe := func() int {
		r, _ := http.NewRequestWithContext(ctx, "GET", srv.BaseURL()+"responses/"+id, nil)
		r.Header.Set("Authorization", "Bearer "+first)
		res, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	testkit.Eventually(t, 20*time.Second, "the first token to expire", func() bool { return probe() == http.StatusUnauthorized })

	r, err := c.Resume(ctx, id, seq)
	if err != nil {
		t.Fatalf("resume after expiry: %v", err)
	}
	if !r.Next() {
		t.Fatalf("resume after expiry: %v", r.Err())
	}
	r.Close()
	if got, err := c.Get(ctx, id); err != nil || got.Status != foundry.StatusInProgress {
		t.Fatalf("get after expiry: %+v, %v", got, err)
	}
	if got, err := c.Cancel(ctx, id); err != nil || got.Status != foundry.StatusCancelled {
		t.Fatalf("cancel after expiry: %+v, %v", got, err)
	}
	if rec.last() == first || auth.TokensIssued() < 2 {
		t.Errorf("no new token: issued %d", auth.TokensIssued())
	}
}

// A credential that cannot get a token is an auth error, reported at once.
func TestEntraTokenFailure(t *testing.T) {
	t.Parallel()
	auth, srv := entraSetup(t, time.Hour)
	auth.FailTokens(true)
	c, _ := entraClient(t, auth, srv.BaseURL())
	ctx, cancel := context.WithTimeout(ctxT(t), 15*time.Second)
	defer cancel()
	_, err := c.Create(ctx, req("entra-fail", nil))
	if !errors.Is(err, foundry.ErrAuth) || ctx.Err() != nil || !strings.Contains(err.Error(), "AADSTS7000215") {
		t.Fatalf("err = %v", err)
	}
	_, err = c.Get(ctx, "resp_x")
	if !errors.Is(err, foundry.ErrAuth) || errors.Is(err, foundry.ErrNotFound) {
		t.Fatalf("get: %v", err)
	}
	if n := len(srv.CreateRequests("entra-fail")); n != 0 {
		t.Errorf("requests reached the API without a token: %d", n)
	}
}
