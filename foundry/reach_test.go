package foundry_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"

	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/tlstest"
)

// noSuchHost is an HTTP client whose dialer answers every dial as the
// resolver does for a name that does not exist (NXDOMAIN), without asking
// any resolver; dials counts the dials.
func noSuchHost(dials *atomic.Int32, notFound bool) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(_ context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			host, _, _ := net.SplitHostPort(addr)
			return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: host, IsNotFound: notFound, IsTemporary: !notFound}}
		},
	}}
}

// A host whose name does not resolve is ErrHostNotFound, for a create and
// for a get; the create is sent once. A DNS failure that is not "not
// found" (a resolver timeout) is not.
func TestHostNotFound(t *testing.T) {
	t.Parallel()
	var dials atomic.Int32
	c, err := foundry.New(foundry.Config{BaseURL: "https://foundry-typo.invalid/openai/v1/", APIKey: "k", HTTPClient: noSuchHost(&dials, true)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Create(ctxT(t), req("run-dns", nil))
	if !errors.Is(err, foundry.ErrHostNotFound) {
		t.Fatalf("create: %v, want ErrHostNotFound", err)
	}
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || dnsErr.Name != "foundry-typo.invalid" {
		t.Errorf("create: %v does not keep the DNS error", err)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("create dialled %d times, want 1", n)
	}
	if _, err := c.Get(ctxT(t), "resp_1"); !errors.Is(err, foundry.ErrHostNotFound) {
		t.Errorf("get: %v, want ErrHostNotFound", err)
	}

	var tdials atomic.Int32
	tc, err := foundry.New(foundry.Config{BaseURL: "https://foundry.example/openai/v1/", APIKey: "k", HTTPClient: noSuchHost(&tdials, false), MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Create(ctxT(t), req("run-dns-temp", nil)); err == nil || errors.Is(err, foundry.ErrHostNotFound) {
		t.Errorf("temporary DNS failure: %v, want an error that is not ErrHostNotFound", err)
	}
}

// tlsServer serves the emulator over TLS with tlstest's server
// certificate, counting the requests that reach it.
func tlsServer(t *testing.T, certs *tlstest.Certs, hits *atomic.Int32) string {
	t.Helper()
	h := foundrytest.NewHandler(foundrytest.Config{APIKey: emuKey, DefaultTokens: 2})
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		h.ServeHTTP(w, r)
	}))
	cert, err := tls.LoadX509KeyPair(certs.ServerCert, certs.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	hs.StartTLS()
	t.Cleanup(func() { hs.Close(); h.Close() })
	return hs.URL + "/openai/v1/"
}

func trusting(t *testing.T, caFile string) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("no CA in " + caFile)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// A server certificate the client does not trust is ErrTLSVerification:
// nothing reached the server. The same server is fine for a client that
// trusts its CA.
func TestTLSVerification(t *testing.T) {
	t.Parallel()
	certs := tlstest.New(t)
	var hits atomic.Int32
	base := tlsServer(t, certs, &hits)

	bad, err := foundry.New(foundry.Config{BaseURL: base, APIKey: emuKey, HTTPClient: trusting(t, certs.OtherCA)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.Create(ctxT(t), req("run-tls", nil))
	if !errors.Is(err, foundry.ErrTLSVerification) {
		t.Fatalf("create: %v, want ErrTLSVerification", err)
	}
	if _, err := bad.Get(ctxT(t), "resp_1"); !errors.Is(err, foundry.ErrTLSVerification) {
		t.Errorf("get: %v, want ErrTLSVerification", err)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d requests reached the server", n)
	}

	good, err := foundry.New(foundry.Config{BaseURL: base, APIKey: emuKey, HTTPClient: trusting(t, certs.CA)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := good.Create(ctxT(t), req("run-tls-ok", nil))
	if err != nil {
		t.Fatal(err)
	}
	read(t, s)
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
}

// Azure's 404 DeploymentNotFound on a create is ErrDeploymentNotFound; the
// 404 of an unknown response id is not.
func TestDeploymentNotFound(t *testing.T) {
	t.Parallel()
	_, c := setup(t, foundrytest.Config{DefaultTokens: 2})
	_, err := c.Create(ctxT(t), req("run-nodeploy", map[string]string{"emu_create_status": "404"}))
	if !errors.Is(err, foundry.ErrDeploymentNotFound) || !errors.Is(err, foundry.ErrNotFound) {
		t.Errorf("create: %v, want ErrDeploymentNotFound", err)
	}
	_, err = c.Get(ctxT(t), "resp_unknown")
	if !errors.Is(err, foundry.ErrNotFound) || errors.Is(err, foundry.ErrDeploymentNotFound) {
		t.Errorf("get unknown id: %v, want ErrNotFound only", err)
	}
}

// Check: a reachable endpoint that takes the credential passes; a wrong
// key is ErrAuth; a host that does not resolve is ErrHostNotFound, after
// one attempt; an untrusted certificate is ErrTLSVerification.
func TestCheck(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, foundrytest.Config{DefaultTokens: 2})
	if err := c.Check(ctxT(t)); err != nil {
		t.Errorf("check: %v", err)
	}
	bad, _ := foundry.New(foundry.Config{BaseURL: srv.BaseURL(), APIKey: "wrong"})
	if err := bad.Check(ctxT(t)); !errors.Is(err, foundry.ErrAuth) {
		t.Errorf("check with a wrong key: %v, want ErrAuth", err)
	}
	var dials atomic.Int32
	dns, _ := foundry.New(foundry.Config{BaseURL: "https://foundry-typo.invalid/openai/v1/", APIKey: "k", HTTPClient: noSuchHost(&dials, true)})
	if err := dns.Check(ctxT(t)); !errors.Is(err, foundry.ErrHostNotFound) {
		t.Errorf("check of a host that does not resolve: %v, want ErrHostNotFound", err)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("check dialled %d times, want 1", n)
	}
	certs := tlstest.New(t)
	var hits atomic.Int32
	untrusted, _ := foundry.New(foundry.Config{BaseURL: tlsServer(t, certs, &hits), APIKey: emuKey, HTTPClient: trusting(t, certs.OtherCA)})
	if err := untrusted.Check(ctxT(t)); !errors.Is(err, foundry.ErrTLSVerification) {
		t.Errorf("check of an untrusted server: %v, want ErrTLSVerification", err)
	}
}
