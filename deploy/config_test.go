package deploy

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/conf"
	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/natsguard"
	"github.com/foundryq/foundryq/internal/tlstest"
)

// These tests need no Docker: they check that the deployment files agree
// with each other and with the wire contract.

// TestNATSConfigs loads the server configs the way nats-server does (the
// TLS one with certificates made here at its mount paths).
func TestNATSConfigs(t *testing.T) {
	for v := range configSecrets {
		t.Setenv(v, "pass")
	}
	t.Setenv("SERVER_NAME", "nats-2")
	routeURLs(t)
	tlsConf := tlstest.New(t).ServerConfig(t, "nats", "nats-server-tls.conf")
	files := map[string]string{
		"nats-server.conf":     filepath.Join("nats", "nats-server.conf"),
		"dev.conf":             filepath.Join("nats", "dev.conf"),
		"cluster.conf":         clusterConf(t),
		"tenants.conf":         filepath.Join("nats", "tenants.conf"),
		"nats-server-tls.conf": tlsConf,
	}
	for name, path := range files {
		t.Run(name, func(t *testing.T) {
			opts, err := server.ProcessConfigFile(path)
			if err != nil {
				t.Fatalf("nats-server rejects %s: %v", name, err)
			}
			if !opts.JetStream || opts.StoreDir != "/data" {
				t.Errorf("%s: JetStream %v store %q, want on with /data", name, opts.JetStream, opts.StoreDir)
			}
			if opts.HTTPPort != 8222 {
				t.Errorf("%s: monitoring port %d, want 8222 (KEDA reads /jsz there)", name, opts.HTTPPort)
			}
			if name == "nats-server-tls.conf" && (opts.TLSConfig == nil || opts.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert || opts.JetStreamCipher != server.ChaCha || opts.JetStreamKey == "") {
				t.Errorf("%s: TLS %v, store cipher %v: want mutual TLS and an encrypted store", name, opts.TLSConfig != nil, opts.JetStreamCipher)
			}
			if (name == "nats-server-tls.conf" || name == "cluster.conf") && len(opts.Accounts) == 0 {
				t.Errorf("%s: no accounts: the include of nats-server.conf did not work", name)
			}
			if name == "cluster.conf" {
				checkClusterConf(t, opts)
			}
		})
	}
}

// checkClusterConf: a node of compose.cluster.yml takes its name from
// SERVER_NAME (set to nats-2 by the caller), routes to the three services
// by name on 6222, and tells clients no private address.
func checkClusterConf(t *testing.T, opts *server.Options) {
	t.Helper()
	if opts.ServerName != "nats-2" {
		t.Errorf("cluster.conf: server_name %q, want $SERVER_NAME (nats-2)", opts.ServerName)
	}
	if opts.Cluster.Name == "" || opts.Cluster.Port != 6222 || !opts.Cluster.NoAdvertise {
		t.Errorf("cluster.conf: cluster %q port %d no_advertise %v, want a name, 6222 and true", opts.Cluster.Name, opts.Cluster.Port, opts.Cluster.NoAdvertise)
	}
	checkRouteTLS(t, opts)
	if opts.Cluster.Username != "route" || opts.Cluster.Password != "pass" {
		t.Errorf("cluster.conf: route authorization %q/%q, want user route with $ROUTE_PASSWORD", opts.Cluster.Username, opts.Cluster.Password)
	}
	var routes []string
	for _, r := range opts.Routes {
		routes = append(routes, r.Host)
		if p, _ := r.User.Password(); r.User.Username() != "route" || p != "pass" {
			t.Errorf("cluster.conf: route %s without the route credentials", r.Host)
		}
	}
	if want := []string{"nats-1:6222", "nats-2:6222", "nats-3:6222"}; !reflect.DeepEqual(routes, want) {
		t.Errorf("cluster.conf: routes %v, want %v (the services of compose.cluster.yml)", routes, want)
	}
}

// TestTenantsConfigMatchesServerConf: each team's users in tenants.conf
// have the permissions of the same role in nats-server.conf, with their
// own inbox in place of _INBOX.<role>.
func TestTenantsConfigMatchesServerConf(t *testing.T) {
	for v := range configSecrets {
		t.Setenv(v, "pass")
	}
	parsed, err := conf.ParseFile(filepath.Join("nats", "nats-server.conf"))
	if err != nil {
		t.Fatal(err)
	}
	roles := usersOf(t, "nats-server.conf", dig(t, parsed, "accounts", "FOUNDRYQ", "users"))
	tenants, err := conf.ParseFile(filepath.Join("nats", "tenants.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, team := range []string{"a", "b"} {
		account := "TEAM_" + strings.ToUpper(team)
		users := usersOf(t, "tenants.conf", dig(t, tenants, "accounts", account, "users"))
		if len(users) != len(roles) {
			t.Fatalf("%s has %d users, want one per role (%d)", account, len(users), len(roles))
		}
		for role, perms := range roles {
			user := "team-" + team + "-" + role
			got, ok := users[user]
			if !ok {
				t.Fatalf("%s has no user %s", account, user)
			}
			want := strings.ReplaceAll(canonical(t, perms), "_INBOX."+role+".>", "_INBOX."+user+".>")
			if got := canonical(t, got); got != want {
				t.Errorf("%s: permissions differ from role %s\ntenants.conf:     %s\nnats-server.conf: %s", user, role, got, want)
			}
		}
	}
}

// TestNATSConfigNeedsPasswords: a missing password variable stops the server
// instead of starting it with an empty password.
func TestNATSConfigNeedsPasswords(t *testing.T) {
	t.Setenv("CLIENT_PASSWORD", "cpass")
	t.Setenv("WORKER_PASSWORD", "") // restored after the test
	os.Unsetenv("WORKER_PASSWORD")
	if _, err := server.ProcessConfigFile(filepath.Join("nats", "nats-server.conf")); err == nil || !strings.Contains(err.Error(), "WORKER_PASSWORD") {
		t.Fatalf("config without WORKER_PASSWORD: err %v, want one naming the variable", err)
	}
}

// TestHelmValuesMatchServerConf: the users' permissions in the Helm values
// are the ones in nats-server.conf (which the container tests exercise).
func TestHelmValuesMatchServerConf(t *testing.T) {
	for v := range configSecrets {
		t.Setenv(v, "pass")
	}
	parsed, err := conf.ParseFile(filepath.Join("nats", "nats-server.conf"))
	if err != nil {
		t.Fatal(err)
	}
	confUsers := usersOf(t, "nats-server.conf", dig(t, parsed, "accounts", "FOUNDRYQ", "users"))

	raw, err := os.ReadFile(filepath.Join("k8s", "nats-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatalf("nats-values.yaml: %v", err)
	}
	account := dig(t, values, "config", "merge", "accounts", "FOUNDRYQ").(map[string]any)
	if got, want := canonical(t, account["jetstream"]), canonical(t, map[string]any{"max_file": "20G", "max_mem": "256M"}); got != want {
		t.Errorf("nats-values.yaml: account FOUNDRYQ jetstream %s, want %s (nats-server.conf's limits)", got, want)
	}
	confJS := canonical(t, dig(t, parsed, "accounts", "FOUNDRYQ", "jetstream"))
	if want := canonical(t, map[string]any{"max_file": 20e9, "max_mem": 256e6}); confJS != want { // nats: G = 1e9
		t.Errorf("nats-server.conf: account FOUNDRYQ jetstream %s, want %s (the Helm values' limits)", confJS, want)
	}
	helmUsers := usersOf(t, "nats-values.yaml", account["users"])

	if len(confUsers) != len(helmUsers) {
		t.Fatalf("users: nats-server.conf has %d, nats-values.yaml %d", len(confUsers), len(helmUsers))
	}
	for name, perms := range confUsers {
		if !reflect.DeepEqual(perms, helmUsers[name]) {
			t.Errorf("user %s: permissions differ\nnats-server.conf: %v\nnats-values.yaml: %v", name, perms, helmUsers[name])
		}
	}
}

// canonical is v as JSON, without HTML escapes (subjects hold '>').
func canonical(t *testing.T, v any) string {
	t.Helper()
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// usersOf returns each user's permissions, normalised through JSON.
func usersOf(t *testing.T, file string, v any) map[string]any {
	t.Helper()
	list, ok := v.([]any)
	if !ok {
		t.Fatalf("%s: users is %T, want a list", file, v)
	}
	out := map[string]any{}
	for _, u := range list {
		m, ok := u.(map[string]any)
		if !ok {
			t.Fatalf("%s: user entry is %T", file, u)
		}
		b, err := json.Marshal(m["permissions"])
		if err != nil {
			t.Fatal(err)
		}
		var perms any
		if err := json.Unmarshal(b, &perms); err != nil {
			t.Fatal(err)
		}
		out[m["user"].(string)] = perms
	}
	return out
}

func dig(t *testing.T, v any, path ...string) any {
	t.Helper()
	for i, key := range path {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s: not a map", strings.Join(path[:i], "."))
		}
		if v, ok = m[key]; !ok {
			t.Fatalf("%s: missing", strings.Join(path[:i+1], "."))
		}
	}
	return v
}

// TestKubernetesManifests checks the numbers that must agree across files,
// in what kustomize renders from deploy/k8s.
func TestKubernetesManifests(t *testing.T) {
	docs := kustomizeBuild(t)
	deployment := rendered(t, docs, "Deployment/foundryq-worker")
	scaled := rendered(t, docs, "ScaledObject/foundryq-worker")

	pod := dig(t, deployment, "spec", "template", "spec").(map[string]any)
	container := workerContainer(t, deployment)
	env := envValues(container)

	trigger := dig(t, scaled, "spec", "triggers").([]any)[0].(map[string]any)
	meta := trigger["metadata"].(map[string]any)
	if trigger["type"] != "nats-jetstream" {
		t.Errorf("trigger type %v, want nats-jetstream", trigger["type"])
	}
	if meta["lagThreshold"] != env["FOUNDRYQ_CONCURRENCY"] {
		t.Errorf("KEDA lagThreshold %v != FOUNDRYQ_CONCURRENCY %q: one run per slot is the scaling target", meta["lagThreshold"], env["FOUNDRYQ_CONCURRENCY"])
	}
	names, err := events.NewNames("")
	if err != nil {
		t.Fatal(err)
	}
	if meta["stream"] != names.RunsStream() || meta["consumer"] != names.Consumer() {
		t.Errorf("KEDA stream/consumer %v/%v, want %s/%s", meta["stream"], meta["consumer"], names.RunsStream(), names.Consumer())
	}
	if meta["account"] != "FOUNDRYQ" {
		t.Errorf("KEDA account %v, want FOUNDRYQ (nats-server.conf)", meta["account"])
	}

	shutdown, err := time.ParseDuration(env["FOUNDRYQ_SHUTDOWN_TIMEOUT"])
	if err != nil {
		t.Fatalf("FOUNDRYQ_SHUTDOWN_TIMEOUT: %v", err)
	}
	grace, _ := strconv.Atoi(jsonNumber(pod["terminationGracePeriodSeconds"]))
	if time.Duration(grace)*time.Second < shutdown+10*time.Second {
		t.Errorf("terminationGracePeriodSeconds %d leaves less than 10s over FOUNDRYQ_SHUTDOWN_TIMEOUT %s", grace, shutdown)
	}
	// Readiness: connected, resources there, pull loop alive. Liveness: the
	// process and its NATS client, so a NATS outage never restarts pods.
	for probe, want := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		if path := dig(t, container, probe, "httpGet", "path"); path != want {
			t.Errorf("%s path %v, want %s", probe, path, want)
		}
		if port := dig(t, container, probe, "httpGet", "port"); port != "metrics" {
			t.Errorf("%s port %v, want the metrics port (--http-addr)", probe, port)
		}
	}
}

func readYAML(t *testing.T, name string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("k8s", name))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return m
}

func jsonNumber(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestHelmValuesTLS: the Helm values show client TLS with verification,
// from a Secret with the file names nats-server-tls.conf mounts.
func TestHelmValuesTLS(t *testing.T) {
	values := readYAML(t, "nats-values.yaml")
	tlsBlock := dig(t, values, "config", "nats", "tls").(map[string]any)
	if tlsBlock["secretName"] == "" || dig(t, tlsBlock, "merge", "verify") != true {
		t.Errorf("config.nats.tls: %v, want a secretName and merge.verify: true", tlsBlock)
	}
	if key := dig(t, values, "tlsCA", "key"); key != "ca.crt" {
		t.Errorf("tlsCA.key %v, want ca.crt (the name nats-server-tls.conf uses)", key)
	}
	raw, err := os.ReadFile(filepath.Join("nats", "nats-server-tls.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"/etc/nats/tls/tls.crt", "/etc/nats/tls/tls.key", "/etc/nats/tls/ca.crt"} {
		if !strings.Contains(string(raw), f) {
			t.Errorf("nats-server-tls.conf does not read %s (the kubernetes.io/tls Secret's names)", f)
		}
	}
}

// configSecrets are the secret variables of the shipped configs, by the
// files that read them (nats-server.conf's are read by the files that
// include it too).
var configSecrets = map[string][]string{
	"WORKER_PASSWORD":         {"nats-server.conf", "cluster.conf", "nats-server-tls.conf"},
	"CLIENT_PASSWORD":         {"nats-server.conf", "cluster.conf", "nats-server-tls.conf"},
	"GATEWAY_PASSWORD":        {"nats-server.conf", "cluster.conf", "nats-server-tls.conf"},
	"TOOLS_PASSWORD":          {"nats-server.conf", "cluster.conf", "nats-server-tls.conf"},
	"ROUTE_PASSWORD":          {"cluster.conf"},
	"ROUTE_URL_1":             {"cluster.conf"},
	"JETSTREAM_KEY":           {"nats-server-tls.conf"},
	"TEAM_A_WORKER_PASSWORD":  {"tenants.conf"},
	"TEAM_A_CLIENT_PASSWORD":  {"tenants.conf"},
	"TEAM_A_GATEWAY_PASSWORD": {"tenants.conf"},
	"TEAM_A_TOOLS_PASSWORD":   {"tenants.conf"},
	"TEAM_B_WORKER_PASSWORD":  {"tenants.conf"},
	"TEAM_B_CLIENT_PASSWORD":  {"tenants.conf"},
	"TEAM_B_GATEWAY_PASSWORD": {"tenants.conf"},
	"TEAM_B_TOOLS_PASSWORD":   {"tenants.conf"},
}

// routeURLs sets cluster.conf's route URLs as compose.cluster.yml does,
// with the route password "pass".
func routeURLs(t *testing.T) {
	for i := 1; i <= 3; i++ {
		t.Setenv("ROUTE_URL_"+strconv.Itoa(i), "nats-route://route:pass@nats-"+strconv.Itoa(i)+":6222")
	}
}

// TestNATSConfigsRefuseEmptySecrets: a secret variable set but empty stops
// the server as an unset one does (nats-server alone would start with a
// user anyone can log in as), in every shipped config that reads it, and
// every secret the configs read is in configSecrets.
func TestNATSConfigsRefuseEmptySecrets(t *testing.T) {
	t.Setenv("SERVER_NAME", "nats-1")
	routeURLs(t)
	tlsConf := tlstest.New(t).ServerConfig(t, "nats", "nats-server-tls.conf")
	clusterPath := clusterConf(t)
	path := func(name string) string {
		switch name {
		case "nats-server-tls.conf":
			return tlsConf
		case "cluster.conf":
			return clusterPath
		}
		return filepath.Join("nats", name)
	}
	ref := regexp.MustCompile(`(?m)^[^#\n]*:\s*\$([A-Z][A-Z0-9_]*(PASSWORD|KEY))\b`)
	routeRef := regexp.MustCompile(`(?m)^\s*\$(ROUTE_URL_[0-9])\s*$`)
	for _, name := range []string{"nats-server.conf", "cluster.conf", "nats-server-tls.conf", "tenants.conf", "dev.conf"} {
		raw, err := os.ReadFile(filepath.Join("nats", name))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range append(ref.FindAllStringSubmatch(string(raw), -1), routeRef.FindAllStringSubmatch(string(raw), -1)...) {
			if m[1] == "ROUTE_URL_2" || m[1] == "ROUTE_URL_3" {
				continue // as ROUTE_URL_1
			}
			if !slices.Contains(configSecrets[m[1]], name) {
				t.Errorf("%s reads $%s, which configSecrets does not list for it", name, m[1])
			}
		}
	}
	for secret, files := range configSecrets {
		for _, name := range files {
			t.Run(name+" "+secret, func(t *testing.T) {
				for v := range configSecrets {
					t.Setenv(v, "pass")
				}
				routeURLs(t)
				if secret == "ROUTE_URL_1" {
					t.Setenv(secret, "nats-route://route:@nats-1:6222")
				} else {
					t.Setenv(secret, "")
				}
				s, err := natsembed.Start(natsembed.Config{ConfigFile: path(name), StoreDir: t.TempDir()})
				if err == nil {
					s.Shutdown()
					t.Fatalf("%s started with %s empty", name, secret)
				}
				if !errors.Is(err, natsguard.ErrEmptySecret) {
					t.Fatalf("%s with %s empty: %v, want natsguard.ErrEmptySecret", name, secret, err)
				}
			})
		}
	}
}

// TestNATSAccountsHaveStoreLimits: every account of a shipped config with
// users has its share of the store (max_file, max_mem), so that what its
// clients write cannot fill the server's disk.
func TestNATSAccountsHaveStoreLimits(t *testing.T) {
	for v := range configSecrets {
		t.Setenv(v, "pass")
	}
	for _, name := range []string{"nats-server.conf", "tenants.conf"} {
		parsed, err := conf.ParseFile(filepath.Join("nats", name))
		if err != nil {
			t.Fatal(err)
		}
		for account, v := range dig(t, parsed, "accounts").(map[string]any) {
			js, _ := v.(map[string]any)["jetstream"].(map[string]any)
			for _, limit := range []string{"max_file", "max_mem"} {
				if n, _ := js[limit].(int64); n <= 0 {
					t.Errorf("%s: account %s: jetstream %s %v, want a limit", name, account, limit, js[limit])
				}
			}
		}
	}
}

// TestHelmValuesHoldNoEmptyPassword: every user of the Helm values has a
// bcrypt hash for a password (never an empty string, never plain text).
func TestHelmValuesHoldNoEmptyPassword(t *testing.T) {
	values := readYAML(t, "nats-values.yaml")
	users := dig(t, values, "config", "merge", "accounts", "FOUNDRYQ", "users").([]any)
	if len(users) == 0 {
		t.Fatal("nats-values.yaml: no users")
	}
	for _, u := range users {
		m := u.(map[string]any)
		if pw, _ := m["password"].(string); !strings.HasPrefix(pw, "$2a$11$") || len(pw) < 60 {
			t.Errorf("nats-values.yaml: user %v: password %q, want a bcrypt hash ($2a$11$...)", m["user"], pw)
		}
	}
}

// TestHelmValuesRouteAuth: the Helm values' routes authenticate and use
// TLS, with no empty password (the route password is set at install).
func TestHelmValuesRouteAuth(t *testing.T) {
	values := readYAML(t, "nats-values.yaml")
	if user := dig(t, values, "config", "cluster", "routeURLs", "user"); user != "route" {
		t.Errorf("config.cluster.routeURLs.user %v, want route", user)
	}
	if pw, _ := dig(t, values, "config", "cluster", "routeURLs", "password").(string); strings.TrimSpace(pw) == "" {
		t.Error("config.cluster.routeURLs.password is empty: routes would not authenticate")
	}
	if dig(t, values, "config", "cluster", "tls", "enabled") != true || dig(t, values, "config", "cluster", "tls", "secretName") == "" {
		t.Error("config.cluster.tls: want enabled with a secretName (routes over TLS)")
	}
}

// TestHelmRoutePasswordSetAtInstall: the official chart cannot refuse a
// route password left at its default (values hold no logic and the chart
// has no rule for it), so the default is a placeholder the NATS guard
// refuses (natsguard.IsPlaceholder), never a password, and every install
// command shown sets it from ${ROUTE_PASSWORD:?...}, which the shell
// refuses to run with the variable unset or empty (an empty password
// makes the chart drop route authentication altogether).
func TestHelmRoutePasswordSetAtInstall(t *testing.T) {
	values := readYAML(t, "nats-values.yaml")
	if pw, _ := dig(t, values, "config", "cluster", "routeURLs", "password").(string); !natsguard.IsPlaceholder(pw) {
		t.Errorf("config.cluster.routeURLs.password %q: want a placeholder ($ROUTE_PASSWORD), set at install", pw)
	}
	set := regexp.MustCompile(`routeURLs\.password=(\S*)`)
	found := 0
	for _, file := range []string{filepath.Join("k8s", "nats-values.yaml"), "README.md", filepath.Join("..", "README.md"), filepath.Join("..", "docs", "security.md"), filepath.Join("..", "docs", "operations.md")} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range set.FindAllStringSubmatch(string(raw), -1) {
			found++
			if !strings.HasPrefix(m[1], `"${ROUTE_PASSWORD:?`) {
				t.Errorf("%s: routeURLs.password=%s: want \"${ROUTE_PASSWORD:?...}\" (the shell refuses it unset or empty)", file, m[1])
			}
		}
	}
	if found == 0 {
		t.Error("no install command sets config.cluster.routeURLs.password")
	}
}

// TestComposeRequiresPasswords: the compose files refuse to start without
// each password (${VAR:?...}), so none can come out empty.
func TestComposeRequiresPasswords(t *testing.T) {
	ref := regexp.MustCompile(`(?m)^\s*([A-Z_]*PASSWORD):\s*(.*)$`)
	for _, file := range []string{filepath.Join("..", "docker-compose.yml"), "compose.cluster.yml"} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ref.FindAllStringSubmatch(string(raw), -1) {
			if !regexp.MustCompile(`^\$\{[A-Z_]+:\?`).MatchString(m[2]) {
				t.Errorf("%s: %s: %s, want ${VAR:?message} (refused when unset or empty)", file, m[1], m[2])
			}
		}
	}
}
