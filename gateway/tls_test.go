package gateway_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/gateway"
)

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns
// their paths and a pool that trusts the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "foundryq gateway test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, pool
}

// Over TLS (HTTP/2): create, follow and cancel; plain HTTP is not served.
func TestTLS(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	certFile, keyFile, pool := selfSigned(t)
	nc, err := e.ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	token := "tls-token"
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	g := startGateway(t, gateway.Config{
		TLSCertFile: certFile, TLSKeyFile: keyFile,
		Tenants: []gateway.Tenant{{Name: "t", Conn: nc, TokenSHA256: []string{gateway.HashToken(token)}}},
	}, &http.Client{Transport: tr})
	if !strings.HasPrefix(g.url, "https://") {
		t.Fatalf("url %s", g.url)
	}
	auth := []string{"Authorization", "Bearer " + token}
	cr := g.create(t, runRequest(map[string]string{"emu_tokens": "100000", "emu_token_ms": "10"}), auth...)
	s := g.stream(t, "/v1/runs/"+cr.RunID+"/events", auth...)
	if s.resp.ProtoMajor != 2 {
		t.Errorf("event stream over HTTP/%d, want HTTP/2", s.resp.ProtoMajor)
	}
	if ev, _, err := s.nextEvent(t); err != nil || ev.Type != events.TypeRunStarted {
		t.Fatalf("first event %+v %v", ev, err)
	}
	if r := g.do(t, "POST", "/v1/runs/"+cr.RunID+"/cancel", nil, auth...); r.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	if evs := s.readAll(t); evs[len(evs)-1].Type != events.TypeRunCancelled {
		t.Fatalf("end %+v", evs[len(evs)-1])
	}
	plain := &http.Client{Timeout: 10 * time.Second}
	defer plain.CloseIdleConnections()
	resp, err := plain.Get("http://" + strings.TrimPrefix(g.url, "https://") + "/v1/runs")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest { // Go's TLS server answers a plain request with 400
			t.Fatalf("plain HTTP to the TLS port: %d", resp.StatusCode)
		}
	}
	// A client that does not trust the certificate fails the handshake.
	untrusting := &http.Client{Timeout: 10 * time.Second}
	defer untrusting.CloseIdleConnections()
	if resp, err := untrusting.Get(g.url + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatal("an untrusted certificate was accepted")
	}
}

func TestTLSBadFiles(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	nc, err := e.ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	g, err := gateway.New(gateway.Config{Addr: "127.0.0.1:0", NoAuth: true, TLSCertFile: "/nonexistent/cert.pem", TLSKeyFile: "/nonexistent/key.pem",
		Tenants: []gateway.Tenant{{Name: "dev", Conn: nc}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "TLS certificate") {
		t.Fatalf("Run with missing certificate files: %v", err)
	}
}
