package bench

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
)

// TestMakeCerts: the emulator's certificate and key pair up, verify for
// 127.0.0.1 against the CA (the file and the pool), and for no other name.
func TestMakeCerts(t *testing.T) {
	c, err := makeCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(c.Cert, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(c.CA)
	if err != nil {
		t.Fatal(err)
	}
	fromFile := x509.NewCertPool()
	if !fromFile.AppendCertsFromPEM(pem) {
		t.Fatal("no certificate in the CA file")
	}
	for _, roots := range []*x509.CertPool{c.Roots, fromFile} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "example.com"}); err == nil {
			t.Fatal("verified for example.com")
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: x509.NewCertPool(), DNSName: "127.0.0.1"}); err == nil {
		t.Fatal("verified without the CA")
	}
	if st, err := os.Stat(c.Key); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v", st.Mode(), err)
	}
}
