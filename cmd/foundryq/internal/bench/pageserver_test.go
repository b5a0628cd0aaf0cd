package bench

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// newPageServer serves page at its root and returns its URL.
func newPageServer(t *testing.T, page string) string {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(page)) }))
	t.Cleanup(hs.Close)
	return hs.URL
}
