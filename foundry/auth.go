package foundry

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/openai/openai-go/v3/option"
	"go.opentelemetry.io/otel/propagation"

	"github.com/foundryq/foundryq/internal/tracing"
)

// tokenRefreshMargin is how long before expiry a cached token is renewed.
const tokenRefreshMargin = 5 * time.Minute

// tokenSource caches an Entra ID access token for one scope and renews it shortly
// before it expires (or at the credential's RefreshOn hint). Renewals are
// serialised; a failed early renewal keeps using the still-valid token.
type tokenSource struct {
	cred  azcore.TokenCredential
	scope string
	now   func() time.Time

	mu  sync.Mutex
	tok azcore.AccessToken
	got time.Time // when tok was obtained
}

func newTokenSource(cred azcore.TokenCredential, scope string) *tokenSource {
	return &tokenSource{cred: cred, scope: scope, now: time.Now}
}

// token returns a valid bearer token, asking the credential only when needed.
func (ts *tokenSource) token(ctx context.Context) (string, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	now := ts.now()
	if ts.tok.Token != "" && !ts.needsRefresh(now) {
		return ts.tok.Token, nil
	}
	tok, err := ts.cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{ts.scope}})
	if err != nil {
		if ts.tok.Token != "" && now.Before(ts.tok.ExpiresOn) {
			return ts.tok.Token, nil // early renewal failed; the old token still works
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("foundry: get Entra ID token for scope %s: %w", ts.scope, context.Cause(ctx))
		}
		return "", fmt.Errorf("%w: get Entra ID token for scope %s: %w", ErrAuth, ts.scope, err)
	}
	if tok.Token == "" {
		return "", fmt.Errorf("%w: get Entra ID token for scope %s: credential returned an empty token", ErrAuth, ts.scope)
	}
	ts.tok, ts.got = tok, now
	return tok.Token, nil
}

// needsRefresh reports whether the cached token is due for renewal: at its
// RefreshOn hint, or tokenRefreshMargin before it expires, or half way
// through its life when it lives less than twice the margin (otherwise a
// short-lived token would be fetched anew for every request).
func (ts *tokenSource) needsRefresh(now time.Time) bool {
	if !ts.tok.RefreshOn.IsZero() && !now.Before(ts.tok.RefreshOn) {
		return true
	}
	margin := tokenRefreshMargin
	if life := ts.tok.ExpiresOn.Sub(ts.got); life < 2*tokenRefreshMargin {
		margin = life / 2
	}
	return !now.Before(ts.tok.ExpiresOn.Add(-margin))
}

// ambientHeaders are headers openai-go may add from OPENAI_* environment variables
// (OPENAI_API_KEY, OPENAI_ADMIN_KEY, OPENAI_ORG_ID, OPENAI_PROJECT_ID,
// OPENAI_CUSTOM_HEADERS). The auth middleware removes them before sending.
var ambientHeaders = []string{"Authorization", "Api-Key", "OpenAI-Organization", "OpenAI-Project"}

// traceMiddleware sends the W3C trace context of the request's context
// (traceparent, tracestate, baggage) with the request, when it carries a
// span: Foundry's side of a call joins the caller's trace.
func traceMiddleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	tracing.Propagator.Inject(req.Context(), propagation.HeaderCarrier(req.Header))
	return next(req)
}

// authMiddleware is the last word on credentials: it strips anything the SDK or
// the environment added and sets either the api-key header or an Entra ID bearer token.
func (c *Client) authMiddleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	for _, h := range ambientHeaders {
		req.Header.Del(h)
	}
	if c.cfg.APIKey != "" {
		req.Header.Set("api-key", c.cfg.APIKey)
	} else {
		tok, err := c.tokens.token(req.Context())
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return next(req)
}
