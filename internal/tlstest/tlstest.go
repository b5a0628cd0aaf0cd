// Package tlstest makes the certificates of a TLS test: a CA, a server
// certificate for the loopback addresses, client certificates signed by
// the CA, and a client certificate from another CA. Everything is
// generated with crypto/x509 in a temporary directory; nothing is
// checked in.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Certs are PEM files in Dir.
type Certs struct {
	Dir string
	// CA signs ServerCert and ClientCert.
	CA string
	// ServerCert and ServerKey: for 127.0.0.1, ::1 and localhost.
	ServerCert, ServerKey string
	// ClientCert and ClientKey: a client certificate signed by CA.
	ClientCert, ClientKey string
	// OtherCert and OtherKey: a client certificate signed by another CA.
	OtherCert, OtherKey string
	// OtherCA signed OtherCert; a client that trusts only it rejects the server.
	OtherCA string
}

// New generates the certificates in a new temporary directory of t.
func New(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	c := &Certs{Dir: dir}
	caCert, caKey := authority(t, "foundryq test CA")
	c.CA = write(t, dir, "ca.crt", "CERTIFICATE", caCert.Raw)
	c.ServerCert, c.ServerKey = leaf(t, dir, "server", caCert, caKey, x509.ExtKeyUsageServerAuth)
	c.ClientCert, c.ClientKey = leaf(t, dir, "client", caCert, caKey, x509.ExtKeyUsageClientAuth)
	otherCert, otherKey := authority(t, "another CA")
	c.OtherCA = write(t, dir, "other-ca.crt", "CERTIFICATE", otherCert.Raw)
	c.OtherCert, c.OtherKey = leaf(t, dir, "other-client", otherCert, otherKey, x509.ExtKeyUsageClientAuth)
	return c
}

func key(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func authority(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	k := key(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, k
}

func leaf(t testing.TB, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	k := key(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return write(t, dir, name+".crt", "CERTIFICATE", der), write(t, dir, name+".key", "PRIVATE KEY", pk)
}

func write(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// ServerConfig copies the nats-server configs of srcDir (deploy/nats) into
// a temporary directory, with the certificate directory of
// nats-server-tls.conf (/etc/nats/tls/, as mounted in Kubernetes) pointing
// at copies of c's CA and server files under their mounted names, and
// returns the path of the copied file named name.
func (c *Certs) ServerConfig(t testing.TB, srcDir, name string) string {
	t.Helper()
	return c.ServerConfigMountedAt(t, srcDir, name, "/etc/nats/tls/")
}

// ServerConfigMountedAt is ServerConfig for configs that read their
// certificates from the directory mounted (ending in "/"), such as the
// cluster's route certificates.
func (c *Certs) ServerConfigMountedAt(t testing.TB, srcDir, name, mounted string) string {
	t.Helper()
	tlsDir := filepath.Join(t.TempDir(), "tls")
	if err := os.Mkdir(tlsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{c.ServerCert: "tls.crt", c.ServerKey: "tls.key", c.CA: "ca.crt"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tlsDir, dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	confDir := t.TempDir()
	entries, err := os.ReadDir(srcDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".conf") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(srcDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if e.Name() == name && strings.Contains(text, "tls {") && !strings.Contains(text, mounted) {
			t.Fatalf("%s has a tls block but no %s paths to point at the test's certificates", name, mounted)
		}
		text = strings.ReplaceAll(text, mounted, tlsDir+string(filepath.Separator))
		if err := os.WriteFile(filepath.Join(confDir, e.Name()), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(confDir, name)
}
