// Command routecerts makes the TLS files of the routes between the NATS
// nodes of deploy/compose.cluster.yml (deploy/nats/cluster.conf): a CA and
// one certificate with its key that every node presents, as the server of
// the routes it accepts and as the client of the routes it dials (mutual
// TLS), naming every node (nats-1, nats-2, nats-3: a node checks the name
// it dialled against the certificate).
//
//	go run ./deploy/nats/routecerts -dir "$HOME/foundryq-route-tls/certs"
//	export ROUTE_CERTS_DIR="$HOME/foundryq-route-tls/certs"
//
// It writes ca.crt, tls.crt and tls.key (the file names of a
// kubernetes.io/tls Secret) into -dir, which it creates, and refuses to
// overwrite a file that exists. The CA's key is not kept: nothing else can
// be signed with it, so only the holder of tls.key joins the cluster. To
// rotate, make a new directory and recreate every node at once.
//
// The files are readable by everyone (0644, the directory 0755): the image
// runs as user 65534 and reads them through the bind mount. Put -dir in a
// directory only you can enter (0700): the container does not need to pass
// through it.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Files written into the directory.
const (
	caFile   = "ca.crt"
	certFile = "tls.crt"
	keyFile  = "tls.key"
)

// Config says what to make.
type Config struct {
	// Dir receives the files; created if missing. Required.
	Dir string
	// Names are the nodes' host names, as the route URLs name them.
	// Default nats-1, nats-2, nats-3 (compose.cluster.yml's services).
	Names []string
	// Valid is how long the certificates are valid from now. Default one
	// year; at most ten.
	Valid time.Duration
}

// Defaults of Config.
var (
	DefaultNames = []string{"nats-1", "nats-2", "nats-3"}
	DefaultValid = 365 * 24 * time.Hour
	maxValid     = 10 * DefaultValid
)

// ErrConfig is wrapped by every refusal of a Config.
var ErrConfig = errors.New("routecerts: bad config")

// hostName is a DNS name: labels of letters, digits and inner hyphens.
var hostName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)

func (c Config) withDefaults() Config {
	if c.Names == nil {
		c.Names = DefaultNames
	}
	if c.Valid == 0 {
		c.Valid = DefaultValid
	}
	return c
}

func (c Config) validate() error {
	if strings.TrimSpace(c.Dir) == "" {
		return fmt.Errorf("%w: -dir is required", ErrConfig)
	}
	if len(c.Names) == 0 {
		return fmt.Errorf("%w: -names is empty", ErrConfig)
	}
	seen := map[string]bool{}
	for _, n := range c.Names {
		if len(n) > 253 || !hostName.MatchString(n) {
			return fmt.Errorf("%w: -names: %q is not a host name", ErrConfig, n)
		}
		if seen[strings.ToLower(n)] {
			return fmt.Errorf("%w: -names: %q twice", ErrConfig, n)
		}
		seen[strings.ToLower(n)] = true
	}
	if c.Valid <= 0 || c.Valid > maxValid {
		return fmt.Errorf("%w: -valid %s, want more than 0 and at most %s", ErrConfig, c.Valid, maxValid)
	}
	return nil
}

// Generate writes ca.crt, tls.crt and tls.key into cfg.Dir. It writes
// nothing if any of them exists.
func Generate(cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	for _, f := range []string{caFile, certFile, keyFile} {
		if _, err := os.Lstat(filepath.Join(cfg.Dir, f)); err == nil {
			return fmt.Errorf("routecerts: %s: %w (remove it or choose another -dir)", filepath.Join(cfg.Dir, f), os.ErrExist)
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("routecerts: %w", err)
		}
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("routecerts: CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "foundryq NATS routes CA"},
		NotBefore:             now.Add(-5 * time.Minute),
		NotAfter:              now.Add(cfg.Valid),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("routecerts: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return fmt.Errorf("routecerts: CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("routecerts: route key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "foundryq NATS route"},
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     now.Add(cfg.Valid),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		// nats-server uses one certificate for both ends of a route.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    cfg.Names,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("routecerts: route certificate: %w", err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("routecerts: route key: %w", err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return fmt.Errorf("routecerts: %w", err)
	}
	// The image's user (65534) reads the bind-mounted directory.
	if err := os.Chmod(cfg.Dir, 0o755); err != nil {
		return fmt.Errorf("routecerts: %w", err)
	}
	for _, f := range []struct {
		name, typ string
		der       []byte
	}{{caFile, "CERTIFICATE", caDER}, {certFile, "CERTIFICATE", der}, {keyFile, "PRIVATE KEY", pk}} {
		if err := writeNew(filepath.Join(cfg.Dir, f.name), pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der})); err != nil {
			return err
		}
	}
	return nil
}

// writeNew creates path (never replacing a file) readable by all.
func writeNew(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("routecerts: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("routecerts: write %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil { // past the umask
		f.Close()
		return fmt.Errorf("routecerts: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("routecerts: write %s: %w", path, err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

// parse reads the flags into a Config.
func parse(args []string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("routecerts", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory to write ca.crt, tls.crt and tls.key into (required; created)")
	names := fs.String("names", strings.Join(DefaultNames, ","), "the nodes' host names, comma-separated")
	valid := fs.Duration("valid", DefaultValid, "validity of the certificates")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("%w: unexpected arguments %q", ErrConfig, fs.Args())
	}
	if *valid <= 0 { // not left to withDefaults: the flag was given
		return Config{}, fmt.Errorf("%w: -valid %s, want more than 0", ErrConfig, *valid)
	}
	cfg := Config{Dir: *dir, Names: []string{}, Valid: *valid}
	for _, n := range strings.Split(*names, ",") {
		if n = strings.TrimSpace(n); n != "" {
			cfg.Names = append(cfg.Names, n)
		}
	}
	return cfg, nil
}

func main() {
	cfg, err := parse(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err == nil {
		err = Generate(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Printf("routecerts: wrote %s, %s and %s in %s\n", caFile, certFile, keyFile, cfg.Dir)
}
