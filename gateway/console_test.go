package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/foundryq/foundryq/gateway"
)

func TestConsoleFiles(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	g := e.gateway(gateway.Config{})
	for _, c := range []struct{ path, ctype, contains string }{
		{"/", "text/html", `<script src="app.js"`},
		{"/app.js", "javascript", "new EventSource("},
		{"/style.css", "text/css", "#run-text"},
	} {
		r := g.do(t, "GET", c.path, nil)
		if r.status != http.StatusOK || !strings.Contains(r.header.Get("Content-Type"), c.ctype) || !strings.Contains(string(r.body), c.contains) {
			t.Errorf("GET %s: %d %s", c.path, r.status, r.header.Get("Content-Type"))
		}
		if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: CSP %q", c.path, csp)
		}
	}
	// The status cancelling (a cancel recorded, its outcome to follow) has
	// a badge of its own and the reply's words.
	for _, c := range []struct{ path, contains string }{
		{"/style.css", ".status.cancelling"},
		{"/app.js", `setStatus("cancelling")`},
		{"/app.js", "recorded, not yet confirmed"},
		{"/app.js", "reply.unrecorded"},
		// A refusal shows as text marked as one (TestConsoleShowsRefusalInBrowser).
		{"/app.js", `addEventListener("refusal.delta"`},
		{"/style.css", ".refusal::before"},
	} {
		if r := g.do(t, "GET", c.path, nil); !strings.Contains(string(r.body), c.contains) {
			t.Errorf("GET %s lacks %q", c.path, c.contains)
		}
	}
	if r := g.do(t, "GET", "/nope.html", nil); r.status != http.StatusNotFound || r.apiError(t).Code != gateway.CodeNotFound {
		t.Errorf("unknown page: %d", r.status)
	}
	if r := g.do(t, "POST", "/", "{}"); r.status != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d", r.status)
	}
	if r := g.do(t, "GET", "/healthz", nil); r.status != http.StatusOK {
		t.Errorf("healthz: %d %s", r.status, r.body)
	}
}
