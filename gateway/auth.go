package gateway

import (
	"context"
	"net/http"
	"strings"
)

type tenantKey struct{}

// withTenant returns ctx carrying t.
func withTenant(ctx context.Context, t *tenant) context.Context {
	return context.WithValue(ctx, tenantKey{}, t)
}

// tenantOf returns the tenant a request was authenticated as.
func tenantOf(r *http.Request) *tenant {
	t, _ := r.Context().Value(tenantKey{}).(*tenant)
	return t
}

// authenticate resolves the request's tenant from its bearer token, or
// refuses it with 401. A token is looked up by its SHA-256: the gateway
// keeps no token, only digests. The event stream endpoint also takes the
// token as the access_token query parameter, because a browser's
// EventSource cannot send headers; the gateway never logs query strings.
func (g *Gateway) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.cfg.NoAuth {
			next.ServeHTTP(w, r.WithContext(withTenant(r.Context(), g.tenants[0])))
			return
		}
		token, ok := bearer(r)
		if !ok {
			writeError(w, apiErr(http.StatusUnauthorized, CodeUnauthorized,
				"a bearer token is required: Authorization: Bearer <token>"))
			return
		}
		t := g.byDigest[tokenDigest(token)]
		if t == nil {
			writeError(w, apiErr(http.StatusUnauthorized, CodeUnauthorized, "unknown bearer token"))
			return
		}
		next.ServeHTTP(w, r.WithContext(withTenant(r.Context(), t)))
	})
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
