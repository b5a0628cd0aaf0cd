package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// routeRefusal is how long a node may take to log that it refused a route
// (a node dials its routes at start and again every second).
const routeRefusal = time.Minute

// makeRouteCerts writes ca.crt, tls.crt and tls.key into a new directory
// with deploy/nats/routecerts, as deploy/README.md tells an operator to.
func makeRouteCerts(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "./deploy/nats/routecerts", "-dir", dir)
	cmd.Dir = filepath.Dir(deployDir(t))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./deploy/nats/routecerts: %v\n%s", err, out)
	}
	return dir
}

// withoutEnv returns env without key.
func withoutEnv(env []string, key string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// checkNeedsRouteCerts: Compose refuses the file without ROUTE_CERTS_DIR
// and says so (c.env does not hold it yet).
func (c *cluster) checkNeedsRouteCerts(ctx context.Context, t *testing.T) {
	t.Helper()
	out, err := c.composeRun(ctx, time.Minute, "config", "--quiet")
	if err == nil || !strings.Contains(out, "ROUTE_CERTS_DIR") {
		t.Fatalf("compose config without ROUTE_CERTS_DIR: %v\n%s\nwant a refusal naming ROUTE_CERTS_DIR", err, out)
	}
}

// checkRouteTLS: every running node requires and verifies TLS on its
// routes (/varz), and nats-1 refuses, from inside the cluster's network,
// a server that dials its route port without TLS or with a certificate
// of another CA; one with the routes' certificate and a wrong password
// gets past TLS and is refused by the route authorization.
func (c *cluster) checkRouteTLS(ctx context.Context, t *testing.T, img images, certs, otherCerts string) {
	t.Helper()
	hc := http.Client{Timeout: 5 * time.Second}
	for _, node := range clusterNodes {
		var varz struct {
			Cluster struct {
				TLSRequired bool `json:"tls_required"`
				TLSVerify   bool `json:"tls_verify"`
			} `json:"cluster"`
		}
		resp, err := hc.Get(c.monitorURL(node) + "/varz")
		if err != nil {
			t.Fatalf("%s /varz: %v", node, err)
		}
		err = json.NewDecoder(resp.Body).Decode(&varz)
		resp.Body.Close()
		if err != nil || !varz.Cluster.TLSRequired || !varz.Cluster.TLSVerify {
			t.Fatalf("%s /varz cluster: %+v, %v; want tls_required and tls_verify", node, varz.Cluster, err)
		}
	}
	routePW := envValue(c.env, "ROUTE_PASSWORD")
	for _, tc := range []struct {
		name, password, certs, ca string
		want                      []string // in nats-1's log, on a line from the intruder's address
	}{
		{name: "plain", password: routePW, want: []string{"TLS route handshake error"}},
		{name: "other-ca", password: routePW, certs: otherCerts, ca: certs, want: []string{"TLS route handshake error", "unknown authority"}},
		{name: "wrong-password", password: "x" + randomHex(t, 8), certs: certs, ca: certs, want: []string{"authentication error"}},
	} {
		t.Run("route refused: "+tc.name, func(t *testing.T) {
			c.intruder(ctx, t, img, "intruder-"+tc.name, tc.password, tc.certs, tc.ca, tc.want)
		})
	}
}

// intruder starts a nats-server from the NATS image on the cluster's
// network, without JetStream, whose only route is nats-1's route port
// with the given password and, when certs is set, route TLS with certs'
// tls.crt and tls.key and ca's ca.crt. It waits until nats-1 logs a line
// from the intruder's address holding every want, checks that nats-1 has
// no route to it, and removes it.
func (c *cluster) intruder(ctx context.Context, t *testing.T, img images, name, password, certs, ca string, want []string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tlsBlock := ""
	if certs != "" {
		for src, dst := range map[string]string{filepath.Join(certs, "tls.crt"): "tls.crt", filepath.Join(certs, "tls.key"): "tls.key", filepath.Join(ca, "ca.crt"): "ca.crt"} {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, dst), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		tlsBlock = `tls { cert_file: "/intruder/tls.crt", key_file: "/intruder/tls.key", ca_file: "/intruder/ca.crt", verify: true, timeout: 2 }`
	}
	conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:4222
cluster {
  name: foundryq
  port: 6222
  routes: ["nats-route://route:%s@nats-1:6222"]
  %s
}
`, name, password, tlsBlock)
	if err := os.WriteFile(filepath.Join(dir, "intruder.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	ctr := c.project + "-" + name
	// From now, not a second earlier: the intruder before this one (removed
	// by now) may have had the same address.
	since := time.Now()
	step(t, "start %s on network %s, dialling nats-1:6222", ctr, c.network)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := c.docker(context.Background(), 30*time.Second, "logs", "--tail", "50", ctr)
			t.Logf("--- %s:\n%s", ctr, out)
		}
		if out, err := c.docker(context.Background(), time.Minute, "rm", "--force", "--volumes", ctr); err != nil {
			t.Logf("remove %s: %v\n%s", ctr, err, out)
		}
	})
	if out, err := c.docker(ctx, time.Minute, "run", "--detach", "--name", ctr, "--network", c.network,
		"--volume", dir+":/intruder:ro", img.nats, "--config", "/intruder/intruder.conf"); err != nil {
		t.Fatalf("start %s: %v\n%s", ctr, err, out)
	}
	out, err := c.docker(ctx, 30*time.Second, "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", ctr)
	ip := strings.TrimSpace(out)
	if err != nil || ip == "" {
		t.Fatalf("address of %s: %q, %v", ctr, out, err)
	}

	deadline := time.Now().Add(routeRefusal)
	for {
		logs, err := c.docker(ctx, 30*time.Second, "logs", "--since", since.UTC().Format(time.RFC3339Nano), c.ids["nats-1"])
		if err == nil && logLine(logs, ip+":", want) != "" {
			step(t, "nats-1: %s", logLine(logs, ip+":", want))
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("nats-1 logged no line from %s with %q within %s (last error %v)", ip, want, routeRefusal, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	var routez struct {
		Routes []struct {
			RemoteName string `json:"remote_name"`
			IP         string `json:"ip"`
		} `json:"routes"`
	}
	hc := http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(c.monitorURL("nats-1") + "/routez")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&routez); err != nil {
		t.Fatal(err)
	}
	if len(routez.Routes) == 0 {
		t.Fatal("nats-1 /routez lists no route: the cluster's own routes are missing")
	}
	for _, r := range routez.Routes {
		if r.RemoteName == name || r.IP == ip {
			t.Fatalf("nats-1 has a route to %s (%s): %+v", name, ip, r)
		}
	}
}

// logLine returns the first line of logs holding from and every want, or "".
func logLine(logs, from string, want []string) string {
	for _, l := range strings.Split(logs, "\n") {
		ok := strings.Contains(l, from)
		for _, w := range want {
			ok = ok && strings.Contains(l, w)
		}
		if ok {
			return l
		}
	}
	return ""
}
