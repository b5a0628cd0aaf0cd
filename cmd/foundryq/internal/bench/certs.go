package bench

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// benchCerts are the PEM files of the emulator's HTTPS: a CA made for one
// bench run and a certificate it signed for 127.0.0.1.
type benchCerts struct {
	CA, Cert, Key string
	// Roots holds the CA, for the bench's own HTTP clients.
	Roots *x509.CertPool
}

// makeCerts writes a fresh CA and a server certificate for 127.0.0.1
// signed by it into dir (keys readable by the owner only).
func makeCerts(dir string) (benchCerts, error) {
	var c benchCerts
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return c, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "foundryq bench CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return c, fmt.Errorf("bench: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return c, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return c, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "foundryq bench emulator"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return c, fmt.Errorf("bench: emulator certificate: %w", err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return c, err
	}
	write := func(name, typ string, der []byte) (string, error) {
		path := filepath.Join(dir, name)
		return path, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
	}
	if c.CA, err = write("ca.pem", "CERTIFICATE", caDER); err != nil {
		return c, err
	}
	if c.Cert, err = write("emulator.pem", "CERTIFICATE", der); err != nil {
		return c, err
	}
	if c.Key, err = write("emulator-key.pem", "PRIVATE KEY", pk); err != nil {
		return c, err
	}
	c.Roots = x509.NewCertPool()
	c.Roots.AddCert(ca)
	return c, nil
}
