package foundrytest

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/foundryq/foundryq/internal/tlstest"
)

// listenTLS starts an emulator over HTTPS with a certificate for 127.0.0.1
// signed by a CA of the test, and returns it with the CA's pool.
func listenTLS(t *testing.T) (*Server, *x509.CertPool) {
	t.Helper()
	certs := tlstest.New(t)
	cert, err := tls.LoadX509KeyPair(certs.ServerCert, certs.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ListenTLS("127.0.0.1:0", Config{APIKey: testKey}, cert)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	pem, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("no CA certificate")
	}
	return srv, pool
}

// client is an HTTP client over a transport of its own; with roots it
// trusts them over TLS.
func client(t *testing.T, roots *x509.CertPool) *http.Client {
	t.Helper()
	tr := &http.Transport{ForceAttemptHTTP2: true}
	if roots != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// TestListenTLS: over HTTPS the emulator negotiates HTTP/2 by ALPN with a
// client that trusts its certificate, streams a response over it, and
// says so (the record's proto, Stats); ListenPlain serves the same
// emulator over plain HTTP/1.1.
func TestListenTLS(t *testing.T) {
	t.Parallel()
	srv, roots := listenTLS(t)
	if !strings.HasPrefix(srv.BaseURL(), "https://127.0.0.1:") {
		t.Fatalf("BaseURL %s", srv.BaseURL())
	}
	ctx := testCtx(t)
	hc := client(t, roots)
	resp := do(t, ctx, hc, "POST", srv.BaseURL()+"responses", createBody("tls-1", true, true, map[string]string{"emu_tokens": "7"}))
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("status %d over %s, want 200 over HTTP/2", resp.StatusCode, resp.Proto)
	}
	evs, err := readAll(t, resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if last := evs[len(evs)-1].Type; last != "response.completed" || len(strings.Fields(deltas(evs))) != 7 {
		t.Fatalf("stream ended with %s after text %q", last, deltas(evs))
	}
	id := evs[0].Response.ID
	if rec := record(t, srv, id); rec.Proto != "HTTP/2.0" {
		t.Fatalf("record proto %q, want HTTP/2.0", rec.Proto)
	}
	if r := getResponse(t, ctx, hc, srv, id); r.Status != "completed" {
		t.Fatalf("status %s", r.Status)
	}

	plain, err := srv.ListenPlain("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(plain, "http://127.0.0.1:") {
		t.Fatalf("plain URL %s", plain)
	}
	resp = do(t, ctx, client(t, nil), "POST", plain+"/openai/v1/responses", createBody("plain-1", true, true, map[string]string{"emu_tokens": "3"}))
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 1 {
		t.Fatalf("plain: status %d over %s, want 200 over HTTP/1.1", resp.StatusCode, resp.Proto)
	}
	evs, err = readAll(t, resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if rec := record(t, srv, evs[0].Response.ID); rec.Proto != "HTTP/1.1" || rec.Status != "completed" {
		t.Fatalf("plain record: proto %q, status %s", rec.Proto, rec.Status)
	}
	if st := srv.Stats(); st.RequestsHTTP2 != 2 || st.RequestsHTTP1 != 1 || st.ResponsesCreated != 2 {
		t.Fatalf("stats: %d HTTP/2, %d HTTP/1 requests, %d created; want 2, 1, 2", st.RequestsHTTP2, st.RequestsHTTP1, st.ResponsesCreated)
	}

	// A client that does not trust the CA is refused.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL()+"/_emulator/stats", nil)
	if err != nil {
		t.Fatal(err)
	}
	var verr *tls.CertificateVerificationError
	if _, err := client(t, x509.NewCertPool()).Do(req); !errors.As(err, &verr) {
		t.Fatalf("untrusting client: %v, want a certificate verification error", err)
	}

	srv.Close()
	if _, err := srv.ListenPlain("127.0.0.1:0"); err == nil {
		t.Fatal("ListenPlain after Close succeeded")
	}
}
