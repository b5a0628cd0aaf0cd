package gateway

import (
	"net/http"
	"strings"
)

// Headers a browser may send and read across origins.
const (
	corsAllowHeaders  = "Authorization, Content-Type, Last-Event-ID, traceparent, tracestate"
	corsAllowMethods  = "GET, POST, OPTIONS"
	corsExposeHeaders = "Location"
	corsMaxAge        = "600"
)

// cors answers preflight requests and marks responses for the origins in
// Config.CORSOrigins. A request from another origin is served without
// CORS headers (the browser then withholds the answer); its preflight is
// refused with 403.
func (g *Gateway) cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Add("Vary", "Origin")
		allowed := g.cfg.corsAllowed(origin)
		preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
		if !allowed {
			if preflight {
				writeError(w, apiErr(http.StatusForbidden, CodeForbidden, "origin %s is not allowed (see the gateway's CORS origins)", origin))
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		if preflight {
			h.Add("Vary", "Access-Control-Request-Method, Access-Control-Request-Headers")
			h.Set("Access-Control-Allow-Methods", corsAllowMethods)
			h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
			h.Set("Access-Control-Max-Age", corsMaxAge)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
		next.ServeHTTP(w, r)
	})
}

// isJSON reports whether a Content-Type names JSON.
func isJSON(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(strings.ToLower(mt))
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}
