package gateway

import (
	"context"
	"net/http"
	"strings"
	"time"
)

type tenantKey struct{}

type limitKey struct{}

// withTenant returns ctx carrying t and the key of the request's limits.
func withTenant(ctx context.Context, t *tenant, limit string) context.Context {
	return context.WithValue(context.WithValue(ctx, tenantKey{}, t), limitKey{}, limit)
}

// limitKeyOf returns the key of the request's limits (see limits).
func limitKeyOf(r *http.Request) string {
	k, _ := r.Context().Value(limitKey{}).(string)
	return k
}

// tenantOf returns the tenant a request was authenticated as.
func tenantOf(r *http.Request) *tenant {
	t, _ := r.Context().Value(tenantKey{}).(*tenant)
	return t
}

// authenticate resolves the request's tenant from its bearer token, or
// refuses it with 401, and takes the request from the token's rate
// (429 beyond it). A token is looked up by its SHA-256: the gateway
// keeps no token, only digests. The event stream endpoint also takes the
// token as the access_token query parameter, because a browser's
// EventSource cannot send headers; the gateway never logs query strings.
func (g *Gateway) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.cfg.NoAuth {
			g.limited(next, w, r, g.tenants[0], clientKey(r))
			return
		}
		token, ok := bearer(r)
		if !ok {
			writeError(w, apiErr(http.StatusUnauthorized, CodeUnauthorized,
				"a bearer token is required: Authorization: Bearer <token>"))
			return
		}
		digest := tokenDigest(token)
		t := g.byDigest[digest]
		if t == nil {
			writeError(w, apiErr(http.StatusUnauthorized, CodeUnauthorized, "unknown bearer token"))
			return
		}
		g.limited(next, w, r, t, "token:"+digest)
	})
}

// limited serves the request as tenant t if key's rate allows it.
func (g *Gateway) limited(next http.Handler, w http.ResponseWriter, r *http.Request, t *tenant, key string) {
	if wait, ok := g.limits.allow(key, time.Now()); !ok {
		tooMany(w, wait, "too many requests with this token (at most %g a second)", g.cfg.RateLimit)
		return
	}
	next.ServeHTTP(w, r.WithContext(withTenant(r.Context(), t, key)))
}

// bearer returns the request's token: the Authorization header, or on GET
// requests of an event stream the access_token query parameter.
func bearer(r *http.Request) (string, bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, token, ok := strings.Cut(h, " ")
		token = strings.TrimSpace(token)
		return token, ok && strings.EqualFold(scheme, "Bearer") && token != ""
	}
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/events") {
		if token := r.URL.Query().Get("access_token"); token != "" {
			return token, true
		}
	}
	return "", false
}
