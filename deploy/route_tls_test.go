package deploy

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"

	"github.com/foundryq/foundryq/internal/tlstest"
)

// routeTLSDir is where cluster.conf reads the route certificates:
// compose.cluster.yml mounts $ROUTE_CERTS_DIR there (the files
// deploy/nats/routecerts writes, with a kubernetes.io/tls Secret's names).
const routeTLSDir = "/etc/nats/route-tls/"

// clusterConf returns a copy of nats/cluster.conf (with the configs it
// includes) that reads the route certificates from a directory of
// certificates made here instead of routeTLSDir.
func clusterConf(t *testing.T) string {
	t.Helper()
	return tlstest.New(t).ServerConfigMountedAt(t, "nats", "cluster.conf", routeTLSDir)
}

// checkRouteTLS: cluster.conf's routes use mutual TLS with the mounted
// certificate and CA, verifying the other node's certificate both ways.
func checkRouteTLS(t *testing.T, opts *server.Options) {
	t.Helper()
	c := opts.Cluster.TLSConfig
	if c == nil {
		t.Fatal("cluster.conf: routes without TLS (cluster { tls { ... } })")
	}
	if c.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Errorf("cluster.conf: route TLS client auth %v, want RequireAndVerifyClientCert (verify: true)", c.ClientAuth)
	}
	if c.InsecureSkipVerify {
		t.Error("cluster.conf: route TLS insecure: the node dialled is not checked")
	}
	if len(c.Certificates) != 1 || len(c.Certificates[0].Certificate) == 0 {
		t.Fatalf("cluster.conf: %d route certificates, want the one in %stls.crt", len(c.Certificates), routeTLSDir)
	}
	leaf, err := x509.ParseCertificate(c.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	// The certificate verifies against the CA the config loaded, both for
	// the routes it accepts (ClientCAs) and those it dials (RootCAs): the
	// files came from the mounted directory.
	for name, pool := range map[string]*x509.CertPool{"ClientCAs": c.ClientCAs, "RootCAs": c.RootCAs} {
		if pool == nil {
			t.Errorf("cluster.conf: route TLS %s unset, want %sca.crt", name, routeTLSDir)
			continue
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("cluster.conf: route TLS %s does not hold the mounted CA: %v", name, err)
		}
	}
	if opts.Cluster.TLSTimeout <= 0 {
		t.Errorf("cluster.conf: route TLS timeout %v, want a hand-shake deadline", opts.Cluster.TLSTimeout)
	}
}

// TestClusterConfRouteTLS: cluster.conf reads the route certificates at
// their mounted paths, with verify on, and keeps the route password.
func TestClusterConfRouteTLS(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("nats", "cluster.conf"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)\ncluster \{.*\n\}`).FindString(string(raw))
	if block == "" {
		t.Fatal("cluster.conf: no cluster block")
	}
	tlsBlock := regexp.MustCompile(`(?s)\n\s*tls \{[^}]*\}`).FindString(uncomment(block))
	if tlsBlock == "" {
		t.Fatal("cluster.conf: no tls block inside cluster { }")
	}
	for key, file := range map[string]string{"cert_file": "tls.crt", "key_file": "tls.key", "ca_file": "ca.crt"} {
		if !regexp.MustCompile(`\b` + key + `:\s*"?` + regexp.QuoteMeta(routeTLSDir+file) + `"?\s*\n`).MatchString(tlsBlock) {
			t.Errorf("cluster.conf: cluster tls %s is not %s%s", key, routeTLSDir, file)
		}
	}
	if !regexp.MustCompile(`\bverify:\s*true\b`).MatchString(tlsBlock) {
		t.Error("cluster.conf: cluster tls without verify: true")
	}
	if !regexp.MustCompile(`\bpassword:\s*\$ROUTE_PASSWORD\b`).MatchString(uncomment(block)) {
		t.Error("cluster.conf: the routes' authorization lost $ROUTE_PASSWORD")
	}
}

// uncomment drops # comments.
func uncomment(s string) string {
	return regexp.MustCompile(`(?m)#.*$`).ReplaceAllString(s, "")
}

// TestComposeMountsRouteCerts: every NATS node of compose.cluster.yml
// mounts $ROUTE_CERTS_DIR, read-only, where cluster.conf reads the route
// certificates, and Compose refuses to start without it.
func TestComposeMountsRouteCerts(t *testing.T) {
	raw, err := os.ReadFile("compose.cluster.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]struct {
			Command []string `yaml:"command"`
			Volumes []string `yaml:"volumes"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("compose.cluster.yml: %v", err)
	}
	mount := regexp.MustCompile(`^\$\{ROUTE_CERTS_DIR:\?[^}]+\}:` + regexp.QuoteMeta(strings.TrimSuffix(routeTLSDir, "/")) + `:ro$`)
	nodes := 0
	for name, svc := range f.Services {
		if !strings.Contains(strings.Join(svc.Command, " "), "cluster.conf") {
			continue
		}
		nodes++
		found := false
		for _, v := range svc.Volumes {
			found = found || mount.MatchString(v)
		}
		if !found {
			t.Errorf("compose.cluster.yml: %s: volumes %q, want ${ROUTE_CERTS_DIR:?...}:%s:ro", name, svc.Volumes, strings.TrimSuffix(routeTLSDir, "/"))
		}
	}
	if nodes != 3 {
		t.Errorf("compose.cluster.yml: %d services run cluster.conf, want 3", nodes)
	}
}
