package foundrytest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
)

// Identity of the Authority's one confidential client.
const (
	AuthorityTenant       = "foundrytest"
	AuthorityClientID     = "00000000-0000-0000-0000-0000000f0001"
	AuthorityClientSecret = "foundrytest-secret"
)

// AuthorityConfig configures an Authority.
type AuthorityConfig struct {
	// TokenLifetime is the lifetime of the tokens minted (their exp and
	// expires_in). Default 1h.
	TokenLifetime time.Duration
	// Clock gives the iat, nbf and exp of minted tokens. Default time.Now.
	// Use the emulator's clock, so that both agree on expiry.
	Clock func() time.Time
}

// Authority is a local Entra ID token endpoint on a TLS httptest server,
// for the Entra ID path end to end: azidentity asks it for tokens through
// its own options (authority host, transport trusting the server's
// certificate, instance discovery off), and an emulator with
// Config.EntraKeys = []*rsa.PublicKey{a.PublicKey()} verifies them. It
// serves the OpenID configuration of tenant AuthorityTenant and the v2.0
// token endpoint for the client_credentials grant of AuthorityClientID with
// AuthorityClientSecret; the token's aud is the scope without "/.default".
type Authority struct {
	cfg    AuthorityConfig
	srv    *httptest.Server
	key    *rsa.PrivateKey
	issued atomic.Int64
	failed atomic.Bool

	mu     sync.Mutex
	scopes []string
}

// NewAuthority starts an Authority; Close stops it. It panics if it cannot
// make a key, like httptest.NewServer when it cannot listen.
func NewAuthority(cfg AuthorityConfig) *Authority {
	if cfg.TokenLifetime <= 0 {
		cfg.TokenLifetime = time.Hour
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic("foundrytest: authority key: " + err.Error())
	}
	a := &Authority{cfg: cfg, key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{tenant}/v2.0/.well-known/openid-configuration", a.handleDiscovery)
	mux.HandleFunc("POST /{tenant}/oauth2/v2.0/token", a.handleToken)
	a.srv = httptest.NewTLSServer(mux)
	return a
}

// URL is the authority host, e.g. "https://127.0.0.1:40123" (azcore's
// cloud.Configuration.ActiveDirectoryAuthorityHost).
func (a *Authority) URL() string { return a.srv.URL }

// Client is an HTTP client that trusts the Authority's certificate (use its
// transport as azcore.ClientOptions.Transport).
func (a *Authority) Client() *http.Client { return a.srv.Client() }

// PublicKey is the key that verifies the tokens (Config.EntraKeys).
func (a *Authority) PublicKey() *rsa.PublicKey { return &a.key.PublicKey }

// TokensIssued counts the tokens minted by the token endpoint.
func (a *Authority) TokensIssued() int64 { return a.issued.Load() }

// Scopes returns the resource scopes (".../.default") tokens were asked for,
// in order.
func (a *Authority) Scopes() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.scopes...)
}

// FailTokens makes the token endpoint refuse every request (as for a wrong
// client secret) while fail is true.
func (a *Authority) FailTokens(fail bool) { a.failed.Store(fail) }

// Close stops the server.
func (a *Authority) Close() { a.srv.Close() }

// Credential is an azidentity.ClientSecretCredential for the Authority's
// client, set up through azidentity's own options.
func (a *Authority) Credential() (azcore.TokenCredential, error) {
	return azidentity.NewClientSecretCredential(AuthorityTenant, AuthorityClientID, AuthorityClientSecret,
		&azidentity.ClientSecretCredentialOptions{
			ClientOptions: azcore.ClientOptions{
				Cloud:     cloud.Configuration{ActiveDirectoryAuthorityHost: a.URL() + "/"},
				Transport: a.Client(),
			},
			DisableInstanceDiscovery: true,
		})
}

// Mint returns a token for audience aud that expires lifetime after now (a
// negative lifetime gives an expired token), e.g. to test refusals.
func (a *Authority) Mint(aud string, lifetime time.Duration) string {
	now := a.cfg.Clock()
	head := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`))
	claims, _ := json.Marshal(map[string]any{
		"aud": aud, "iss": a.URL() + "/" + AuthorityTenant + "/v2.0", "tid": AuthorityTenant,
		"appid": AuthorityClientID, "iat": now.Unix(), "nbf": now.Add(-time.Minute).Unix(),
		"exp": now.Add(lifetime).Unix(),
	})
	signing := head + "." + base64.RawURLEncoding.EncodeToString(claims)
	digest := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, a.key, crypto.SHA256, digest[:])
	if err != nil {
		panic("foundrytest: sign token: " + err.Error())
	}
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func (a *Authority) handleDiscovery(w http.ResponseWriter, req *http.Request) {
	base := a.URL() + "/" + req.PathValue("tenant")
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                base + "/v2.0",
		"authorization_endpoint":                base + "/oauth2/v2.0/authorize",
		"token_endpoint":                        base + "/oauth2/v2.0/token",
		"token_endpoint_auth_methods_supported": []string{"client_secret_post"},
	})
}

// oauthError answers an OAuth error as Entra ID does.
func oauthError(w http.ResponseWriter, status int, code, desc string) {
	writeJSON(w, status, map[string]any{"error": code, "error_description": desc, "error_codes": []int{7000215}})
}

func (a *Authority) handleToken(w http.ResponseWriter, req *http.Request) {
	req.Body = http.MaxBytesReader(w, req.Body, 64<<10)
	if err := req.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "AADSTS900144: The request body must be a form.")
		return
	}
	f := req.PostForm
	switch {
	case f.Get("grant_type") != "client_credentials":
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "AADSTS70003: The grant type is not supported.")
		return
	case a.failed.Load() || f.Get("client_id") != AuthorityClientID || f.Get("client_secret") != AuthorityClientSecret:
		oauthError(w, http.StatusUnauthorized, "invalid_client", "AADSTS7000215: Invalid client secret provided.")
		return
	}
	scope := f.Get("scope")
	var aud string
	for _, s := range strings.Fields(scope) {
		if r, ok := strings.CutSuffix(s, "/.default"); ok {
			aud = r
		}
	}
	if aud == "" {
		oauthError(w, http.StatusBadRequest, "invalid_scope", fmt.Sprintf("AADSTS1002012: The provided value for scope %q is not valid.", scope))
		return
	}
	a.mu.Lock()
	a.scopes = append(a.scopes, aud+"/.default") // MSAL adds openid, profile, offline_access
	a.mu.Unlock()
	a.issued.Add(1)
	secs := int64(a.cfg.TokenLifetime / time.Second)
	if secs < 1 {
		secs = 1
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"token_type": "Bearer", "expires_in": secs, "ext_expires_in": secs,
		"access_token": a.Mint(aud, a.cfg.TokenLifetime),
	})
}
