package gateway

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// consoleFiles are the web console: plain HTML, CSS and JavaScript, no
// build step. It talks to the API like any other client (fetch for the
// calls, EventSource for the event stream).
//
//go:embed console
var consoleFiles embed.FS

// consoleCSP allows the console's own files and its calls to this origin
// only: no inline script, nothing from elsewhere.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// console serves the console's files at /.
func (g *Gateway) console() http.Handler {
	sub, err := fs.Sub(consoleFiles, "console")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(sub)
	notAllowed := methodNotAllowed("GET")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			notAllowed.ServeHTTP(w, r)
			return
		}
		name := strings.TrimPrefix(path.Clean(r.URL.Path), "/")
		if name == "" {
			name = "index.html"
		}
		if _, err := fs.Stat(sub, name); err != nil {
			writeError(w, apiErr(http.StatusNotFound, CodeNotFound, "no page %s", r.URL.Path))
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", consoleCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
