package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/gateway"
)

// startAccountsServer runs a NATS server with two accounts, A and B (users
// a/pa and b/pb), each with JetStream: the tenant boundary.
func startAccountsServer(t *testing.T) string {
	t.Helper()
	return startNATSConf(t, `
accounts {
  A { jetstream: enabled, users: [ { user: a, password: pa } ] }
  B { jetstream: enabled, users: [ { user: b, password: pb } ] }
}`, "")
}

// startNATSConf runs a NATS server on a loopback port from a configuration
// (jsLimits goes in jetstream { limits { ... } }) and returns its URL.
func startNATSConf(t testing.TB, body, jsLimits string) string {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	if jsLimits != "" {
		jsLimits = "limits { " + jsLimits + " }"
	}
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("listen: \"127.0.0.1:-1\"\njetstream { store_dir: %q\n%s }\n%s\n",
		filepath.Join(dir, "js"), jsLimits, body)), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	opts.NoSigs, opts.NoLog = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS not ready")
	}
	return s.ClientURL()
}

// One tenant's token cannot see, follow or cancel another tenant's runs:
// each tenant is its own NATS account, reached through its own connection.
func TestTenantsAreIsolated(t *testing.T) {
	t.Parallel()
	e := setup(t, 0) // the emulator and a Foundry client; the tenants' NATS is below
	url := startAccountsServer(t)
	userURL := func(user, pass string) string {
		return strings.Replace(url, "nats://", "nats://"+user+":"+pass+"@", 1)
	}
	for _, u := range [][2]string{{"a", "pa"}, {"b", "pb"}} {
		connect := func() (*nats.Conn, error) { return nats.Connect(userURL(u[0], u[1])) }
		nc, err := connect()
		if err != nil {
			t.Fatal(err)
		}
		js := mustJS(t, nc)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err = consumer.Provision(ctx, js, events.Names{}, consumer.ProvisionConfig{})
		cancel()
		nc.Close()
		if err != nil {
			t.Fatal(err)
		}
		startWorkerOn(t, connect, e.up, consumerConfig())
	}
	tokenA, tokenB := "token-of-tenant-a", "token-of-tenant-b"
	g := startGateway(t, gateway.Config{Tenants: []gateway.Tenant{
		{Name: "a", NATSURL: userURL("a", "pa"), TokenSHA256: []string{gateway.HashToken(tokenA)}},
		{Name: "b", NATSURL: userURL("b", "pb"), TokenSHA256: []string{strings.TrimPrefix(gateway.HashToken(tokenB), "sha256:")}},
	}}, nil)
	asA := []string{"Authorization", "Bearer " + tokenA}
	asB := []string{"Authorization", "Bearer " + tokenB}

	for _, c := range []struct {
		name string
		hdr  []string
	}{
		{"no token", nil},
		{"unknown token", []string{"Authorization", "Bearer nope"}},
		{"basic", []string{"Authorization", "Basic " + tokenA}},
		{"empty bearer", []string{"Authorization", "Bearer "}},
	} {
		r := g.do(t, "GET", "/v1/runs", nil, c.hdr...)
		if ae := r.apiError(t); r.status != http.StatusUnauthorized || ae.Code != gateway.CodeUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: %d %+v", c.name, r.status, ae)
		}
	}

	cr := g.create(t, runRequest(map[string]string{"emu_tokens": "100000", "emu_token_ms": "20"}), asA...)
	path := "/v1/runs/" + cr.RunID
	s := g.stream(t, path+"/events?access_token="+tokenA) // as a browser's EventSource does
	if ev, _, err := s.nextEvent(t); err != nil || ev.Seq != 1 {
		t.Fatalf("A follows its run: %+v %v", ev, err)
	}
	for _, c := range []struct{ method, path string }{
		{"GET", path}, {"GET", path + "/events"}, {"POST", path + "/cancel"},
	} {
		r := g.do(t, c.method, c.path, nil, asB...)
		if ae := r.apiError(t); r.status != http.StatusNotFound {
			t.Errorf("B: %s %s: %d %+v", c.method, c.path, r.status, ae)
		}
	}
	if _, status, _ := g.openStream(t, path+"/events?access_token="+tokenB); status != http.StatusNotFound {
		t.Errorf("B follows A's run with access_token: %d", status)
	}
	var list gateway.RunList
	g.do(t, "GET", "/v1/runs", nil, asB...).decode(t, &list)
	for _, st := range list.Runs {
		if st.RunID == cr.RunID {
			t.Errorf("B lists A's run")
		}
	}
	// access_token works for event streams only.
	if r := g.do(t, "GET", "/v1/runs?access_token="+tokenA, nil); r.status != http.StatusUnauthorized {
		t.Errorf("access_token on the listing: %d", r.status)
	}
	// The same run id is free in B's account: B's run is B's own.
	req := runRequest(nil)
	req["run_id"] = cr.RunID
	if crB := g.create(t, req, asB...); crB.RunID != cr.RunID || crB.Existing {
		t.Fatalf("B's run under the same id: %+v", crB)
	}
	r := g.do(t, "POST", path+"/cancel", nil, asA...)
	if r.status != http.StatusOK {
		t.Fatalf("A cancels: %d %s", r.status, r.body)
	}
	rest := s.readAll(t)
	if end := rest[len(rest)-1]; end.Type != events.TypeRunCancelled {
		t.Fatalf("A's run ended %+v", end)
	}
}

func TestCORS(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	g := e.gateway(gateway.Config{CORSOrigins: []string{"https://app.example.com"}})
	r := g.do(t, "OPTIONS", "/v1/runs", nil, "Origin", "https://app.example.com", "Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "authorization, content-type")
	h := r.header
	if r.status != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization") || !strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") {
		t.Fatalf("preflight: %d %v", r.status, h)
	}
	r = g.do(t, "OPTIONS", "/v1/runs", nil, "Origin", "https://evil.example.com", "Access-Control-Request-Method", "POST")
	if ae := r.apiError(t); r.status != http.StatusForbidden || ae.Code != gateway.CodeForbidden {
		t.Fatalf("preflight from another origin: %d %+v", r.status, ae)
	}
	r = g.do(t, "GET", "/v1/runs", nil, "Origin", "https://app.example.com")
	if r.status != http.StatusOK || r.header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Fatalf("GET from the allowed origin: %d %v", r.status, r.header)
	}
	r = g.do(t, "GET", "/v1/runs", nil, "Origin", "https://evil.example.com")
	if r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("GET from another origin got CORS headers: %v", r.header)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	hash := gateway.HashToken("t")
	one := []gateway.Tenant{{Name: "a", TokenSHA256: []string{hash}}}
	dir := t.TempDir()
	keyFile, shortFile := filepath.Join(dir, "key"), filepath.Join(dir, "short")
	if err := os.WriteFile(keyFile, []byte("a-callback-key-of-the-tenant\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shortFile, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keyed := func(files ...string) []gateway.Tenant {
		return []gateway.Tenant{{Name: "a", TokenSHA256: []string{hash}, CallbackSecretFiles: files}}
	}
	cases := []struct {
		name string
		cfg  gateway.Config
		want string
	}{
		{"ok", gateway.Config{Tenants: one}, ""},
		{"no tenant", gateway.Config{}, "no tenant"},
		{"raw token", gateway.Config{Tenants: []gateway.Tenant{{Name: "a", TokenSHA256: []string{"my-secret-token"}}}}, "never the token itself"},
		{"no tokens", gateway.Config{Tenants: []gateway.Tenant{{Name: "a"}}}, "no token_sha256"},
		{"hash twice", gateway.Config{Tenants: []gateway.Tenant{{Name: "a", TokenSHA256: []string{hash}}, {Name: "b", TokenSHA256: []string{hash}}}}, "same token hash"},
		{"bad name", gateway.Config{Tenants: []gateway.Tenant{{Name: "a b", TokenSHA256: []string{hash}}}}, "name"},
		{"bad prefix", gateway.Config{Tenants: []gateway.Tenant{{Name: "a", Prefix: "a..b", TokenSHA256: []string{hash}}}}, "prefix"},
		{"no auth on loopback", gateway.Config{NoAuth: true, Tenants: []gateway.Tenant{{Name: "dev"}}}, ""},
		{"no auth on all interfaces", gateway.Config{Addr: "0.0.0.0:8080", NoAuth: true, Tenants: []gateway.Tenant{{Name: "dev"}}}, "open the API"},
		{"no auth with tokens", gateway.Config{NoAuth: true, Tenants: one}, "exactly one tenant"},
		{"bad addr", gateway.Config{Addr: "8080", Tenants: one}, "Addr"},
		{"half TLS", gateway.Config{TLSCertFile: "c.pem", Tenants: one}, "TLSCertFile and TLSKeyFile"},
		{"bad origin", gateway.Config{CORSOrigins: []string{"app.example.com"}, Tenants: one}, "not an origin"},
		{"small body limit", gateway.Config{MaxBodyBytes: 10, Tenants: one}, "MaxBodyBytes"},
		{"list limit", gateway.Config{ListLimit: 5000, Tenants: one}, "ListLimit"},
		{"short secret", gateway.Config{Callbacks: gateway.CallbackConfig{Secret: []byte("short")}, Tenants: one}, "at least 16 bytes"},
		{"tenant key", gateway.Config{Tenants: keyed(keyFile)}, ""},
		{"tenant keys rotating", gateway.Config{Tenants: keyed(keyFile, keyFile)}, ""},
		{"three tenant keys", gateway.Config{Tenants: keyed(keyFile, keyFile, keyFile)}, "at most 2"},
		{"short tenant key", gateway.Config{Tenants: keyed(shortFile)}, "at least 16"},
		{"missing tenant key", gateway.Config{Tenants: keyed(filepath.Join(dir, "none"))}, "callback_secret_files[0]"},
		{"tenant key, bad callback setting", gateway.Config{Tenants: keyed(keyFile), Callbacks: gateway.CallbackConfig{MaxAttempts: 1000}}, "MaxAttempts"},
		{"no auth any addr without hosts", gateway.Config{Addr: "0.0.0.0:8080", NoAuth: true, NoAuthAnyAddr: true, Tenants: []gateway.Tenant{{Name: "dev"}}}, "AllowedHosts"},
		{"no auth any addr with hosts", gateway.Config{Addr: "0.0.0.0:8080", NoAuth: true, NoAuthAnyAddr: true, AllowedHosts: []string{"gw.example.com"}, Tenants: []gateway.Tenant{{Name: "dev"}}}, ""},
		{"host with a port", gateway.Config{AllowedHosts: []string{"gw.example.com:80"}, Tenants: one}, "AllowedHosts"},
		{"streams", gateway.Config{MaxStreamsPerToken: -1, Tenants: one}, "MaxStreamsPerToken"},
		{"rate", gateway.Config{RateLimit: -1, Tenants: one}, "RateLimit"},
		{"read timeout", gateway.Config{ReadTimeout: time.Millisecond, Tenants: one}, "ReadTimeout"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			if c.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}

func TestLoadTenants(t *testing.T) {
	t.Parallel()
	ts, err := gateway.LoadTenants(strings.NewReader(`{"tenants":[{"name":"acme","token_sha256":["sha256:` + strings.Repeat("ab", 32) + `"],"nats_url":"nats://n:4222","nats_creds":"/c","prefix":"acme"}]}`))
	if err != nil || len(ts) != 1 || ts[0].Name != "acme" || ts[0].NATSCreds != "/c" || ts[0].Prefix != "acme" {
		t.Fatalf("%+v %v", ts, err)
	}
	for _, bad := range []string{`{"tenants":[]}`, `{"tenants":[{"name":"a","token":"x"}]}`, `{"tenants":[]} x`, `[`} {
		if _, err := gateway.LoadTenants(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	hs, err := gateway.ParseTokenHashes("sha256:" + strings.Repeat("AB", 32) + ", " + strings.Repeat("cd", 32))
	if err != nil || len(hs) != 2 || hs[0] != strings.Repeat("ab", 32) {
		t.Fatalf("%v %v", hs, err)
	}
	if _, err := gateway.ParseTokenHashes("plain-token"); err == nil {
		t.Fatal("a raw token was taken as a hash")
	}
}
