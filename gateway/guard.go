package gateway

import (
	"net/http"
	"strings"
	"time"
)

// guard is what every request passes before its route: the Host check,
// CORS, the cross-origin check of unsafe methods, and the deadline on
// reading its body.
func (g *Gateway) guard(next http.Handler) http.Handler {
	return g.bodyDeadline(g.hostCheck(g.cors(g.originCheck(next))))
}

// hostCheck refuses a request whose Host the gateway does not answer
// (Config.AllowedHosts): a page whose name an attacker points at the
// gateway's address (DNS rebinding) sends its own host name.
func (g *Gateway) hostCheck(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && !g.cfg.hostAllowed(r.Host) {
			writeError(w, apiErr(http.StatusForbidden, CodeForbidden, "this gateway does not answer for that host name (see its allowed hosts)"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// originCheck refuses a request with an unsafe method (POST, DELETE, ...)
// that a browser sends from another origin than the gateway's and than
// Config.CORSOrigins: by Sec-Fetch-Site, or by comparing Origin with Host
// (http.CrossOriginProtection). Browsers send some cross-origin POSTs
// without a preflight (text/plain, forms): CORS alone would let them
// through. Requests without either header (curl, services) pass.
func (g *Gateway) originCheck(next http.Handler) http.Handler {
	for _, o := range g.cfg.CORSOrigins {
		if o == "*" {
			return next // any origin may call the API: the operator's choice
		}
	}
	p := http.NewCrossOriginProtection()
	for _, o := range g.cfg.CORSOrigins {
		_ = p.AddTrustedOrigin(strings.TrimSuffix(o, "/")) // checked by validate
	}
	p.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, apiErr(http.StatusForbidden, CodeForbidden, "%s from another origin is refused (see the gateway's CORS origins)", r.Method))
	}))
	return p.Handler(next)
}

// bodyDeadline bounds reading a request's body (Config.ReadTimeout) with
// a read deadline set once its headers are in; readJSONBody lifts it once
// the body is read. A request without a body gets none: an event stream
// is bounded by its write deadlines, and http.Server.ReadTimeout would
// end it (the server reads the connection in the background while a
// handler runs). A body nobody reads is drained by the server under the
// same deadline.
func (g *Gateway) bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(g.cfg.ReadTimeout))
		}
		next.ServeHTTP(w, r)
	})
}
