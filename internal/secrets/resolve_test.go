package secrets_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/foundryq/foundryq/internal/secrets"
	"github.com/foundryq/foundryq/internal/testkit"
)

// setup returns a resolver over a directory holding crm-token (with a
// trailing newline, as `kubectl create secret --from-file` often leaves)
// and an environment holding FOUNDRYQ_SECRET_BILLING_KEY.
func setup(t *testing.T, hosts map[string][]string) *secrets.Resolver {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "crm-token"), []byte("crm-value-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "empty"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"FOUNDRYQ_SECRET_BILLING_KEY": "billing-value-456", "FOUNDRYQ_SECRET_CRM_TOKEN": "env-loses"}
	r, err := secrets.NewResolver(secrets.Config{
		Dir:       dir,
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		Hosts:     hosts,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestLookup(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	r := setup(t, nil).WithLogger(zerolog.New(&logs).Level(zerolog.DebugLevel))
	tests := []struct {
		name, want string
		err        error
		msg        string
	}{
		{name: "crm-token", want: "crm-value-123"},       // the file wins over the environment
		{name: "billing.key", want: "billing-value-456"}, // '.' becomes '_' in the variable name
		{name: "missing", err: secrets.ErrSecretNotFound, msg: "no file missing in"},
		{name: "empty", err: secrets.ErrSecretNotFound, msg: "is empty"},
		{name: "../etc/passwd", err: secrets.ErrBadReference},
		{name: "a/b", err: secrets.ErrBadReference},
		{name: "-x", err: secrets.ErrBadReference},
		{name: "", err: secrets.ErrBadReference},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.Lookup(tt.name)
			if !errors.Is(err, tt.err) || got != tt.want {
				t.Fatalf("Lookup(%q) = %q, %v; want %q, %v", tt.name, got, err, tt.want, tt.err)
			}
			// Where it looked is for the operator's log, not the error.
			if tt.msg != "" && (strings.Contains(err.Error(), tt.msg) || !strings.Contains(logs.String(), tt.msg)) {
				t.Fatalf("error %q, log %s: want %q in the log only", err, logs.String(), tt.msg)
			}
		})
	}
	var nilR *secrets.Resolver
	if _, err := nilR.Lookup("crm-token"); !errors.Is(err, secrets.ErrSecretNotFound) || strings.Contains(err.Error(), "--secrets-dir") {
		t.Fatalf("nil resolver: %v, want ErrSecretNotFound without configuration", err)
	}
	var nilLogs testkit.Buffer
	if _, err := nilR.WithLogger(zerolog.New(&nilLogs).Level(zerolog.DebugLevel)).Lookup("crm-token"); !errors.Is(err, secrets.ErrSecretNotFound) || !strings.Contains(nilLogs.String(), "--secrets-dir") {
		t.Fatalf("nil resolver with a log: %v, log %s: want a hint in the log", err, nilLogs.String())
	}
}

func TestLookupRefusesLinksOutOfTheDirectory(t *testing.T) {
	t.Parallel()
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("not-for-you"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "escape")); err != nil {
		t.Skipf("symlinks: %v", err)
	}
	// Kubernetes' layout: name -> ..data/name, ..data -> ..2024_01_01; all inside.
	if err := os.MkdirAll(filepath.Join(dir, "..v1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "..v1", "k8s"), []byte("inside"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "k8s"), filepath.Join(dir, "k8s")); err != nil {
		t.Fatal(err)
	}
	r, err := secrets.NewResolver(secrets.Config{Dir: dir, LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := r.Lookup("escape"); err == nil {
		t.Fatalf("read %q through a link out of the directory", v)
	}
	if v, err := r.Lookup("k8s"); err != nil || v != "inside" {
		t.Fatalf("Kubernetes-style link: %q, %v", v, err)
	}
}

func TestNewResolverChecksConfig(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]secrets.Config{
		"missing dir":   {Dir: filepath.Join(t.TempDir(), "nope")},
		"file as dir":   {Dir: file},
		"bad name":      {Hosts: map[string][]string{"../x": {"a.example.com"}}},
		"url as host":   {Hosts: map[string][]string{"x": {"https://a.example.com"}}},
		"inner star":    {Hosts: map[string][]string{"x": {"a.*.example.com"}}},
		"empty host":    {Hosts: map[string][]string{"x": {""}}},
		"host and port": {Hosts: map[string][]string{"x": {"a.example.com:443"}}},
	} {
		if _, err := secrets.NewResolver(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestParseHosts(t *testing.T) {
	t.Parallel()
	got, err := secrets.ParseHosts("crm-token=crm.example.com,crm2.example.com; billing=*.billing.example.com\n")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"crm-token": {"crm.example.com", "crm2.example.com"}, "billing": {"*.billing.example.com"}}
	if len(got) != len(want) || strings.Join(got["crm-token"], ",") != "crm.example.com,crm2.example.com" || got["billing"][0] != "*.billing.example.com" {
		t.Fatalf("ParseHosts = %v, want %v", got, want)
	}
	for _, bad := range []string{"crm-token", "=x", "x="} {
		if _, err := secrets.ParseHosts(bad); err == nil {
			t.Errorf("ParseHosts(%q) accepted", bad)
		}
	}
	if m, err := secrets.ParseHosts(""); err != nil || len(m) != 0 {
		t.Errorf("ParseHosts(\"\") = %v, %v", m, err)
	}
}

func TestResolveTools(t *testing.T) {
	t.Parallel()
	r := setup(t, map[string][]string{
		"crm-token":   {"crm.example.com"},
		"billing.key": {"*.billing.example.com", "connector_dropbox"},
	})
	tools := []json.RawMessage{
		json.RawMessage(`{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp","headers":{"Authorization":{"secret":"crm-token"},"X-Plain":"kept"},"require_approval":"never"}`),
		json.RawMessage(`{"type":"mcp","server_url":"https://eu.billing.example.com/mcp","authorization":{"secret":"billing.key"}}`),
		json.RawMessage(`{"type":"mcp","connector_id":"connector_dropbox","authorization":{"secret":"billing.key"}}`),
		json.RawMessage(`{"type":"web_search"}`),
		json.RawMessage(`{"type":"mcp","server_url":"https://x.example.com","headers":{"A":"literal <&>"}}`),
	}
	if !secrets.HasReferences(tools) || secrets.HasReferences(tools[3:]) {
		t.Fatal("HasReferences is wrong")
	}
	out, err := r.ResolveTools(tools)
	if err != nil {
		t.Fatal(err)
	}
	var mcp struct {
		ServerURL string            `json:"server_url"`
		Headers   map[string]string `json:"headers"`
		Auth      string            `json:"authorization"`
		Approval  string            `json:"require_approval"`
	}
	if err := json.Unmarshal(out[0], &mcp); err != nil {
		t.Fatal(err)
	}
	if mcp.Headers["Authorization"] != "crm-value-123" || mcp.Headers["X-Plain"] != "kept" || mcp.Approval != "never" || mcp.ServerURL != "https://crm.example.com/mcp" {
		t.Fatalf("tool 0 resolved to %s", out[0])
	}
	if err := json.Unmarshal(out[1], &mcp); err != nil || mcp.Auth != "billing-value-456" {
		t.Fatalf("tool 1 resolved to %s (%v)", out[1], err)
	}
	if err := json.Unmarshal(out[2], &mcp); err != nil || mcp.Auth != "billing-value-456" {
		t.Fatalf("tool 2 (connector) resolved to %s (%v)", out[2], err)
	}
	for i := 3; i < 5; i++ {
		if string(out[i]) != string(tools[i]) {
			t.Errorf("tool %d without references changed: %s -> %s", i, tools[i], out[i])
		}
	}
	if strings.Contains(string(tools[0]), "crm-value") {
		t.Fatal("ResolveTools changed its input")
	}
}

func TestResolveToolsErrors(t *testing.T) {
	t.Parallel()
	r := setup(t, map[string][]string{"crm-token": {"crm.example.com"}, "missing": {"crm.example.com"}})
	tests := []struct {
		name, tool, field string
		err               error
	}{
		{"not found", `{"type":"mcp","server_url":"https://crm.example.com","headers":{"A":{"secret":"missing"}}}`, "tools[0].headers.A", secrets.ErrSecretNotFound},
		{"no hosts configured", `{"type":"mcp","server_url":"https://crm.example.com","authorization":{"secret":"billing.key"}}`, "tools[0].authorization", secrets.ErrSecretNotAllowed},
		{"other host", `{"type":"mcp","server_url":"https://evil.example.net/crm.example.com","headers":{"A":{"secret":"crm-token"}}}`, "tools[0].headers.A", secrets.ErrSecretNotAllowed},
		{"suffix is not a subdomain", `{"type":"mcp","server_url":"https://evilcrm.example.com","headers":{"A":{"secret":"crm-token"}}}`, "tools[0].headers.A", secrets.ErrSecretNotAllowed},
		{"plain http", `{"type":"mcp","server_url":"http://crm.example.com","headers":{"A":{"secret":"crm-token"}}}`, "tools[0].headers.A", secrets.ErrSecretNotAllowed},
		{"no server_url", `{"type":"mcp","headers":{"A":{"secret":"crm-token"}}}`, "tools[0].headers.A", secrets.ErrSecretNotAllowed},
		{"extra key", `{"type":"mcp","server_url":"https://crm.example.com","headers":{"A":{"secret":"crm-token","x":1}}}`, "tools[0].headers.A", secrets.ErrBadReference},
		{"number", `{"type":"mcp","server_url":"https://crm.example.com","headers":{"A":5}}`, "tools[0].headers.A", secrets.ErrBadReference},
		{"bad name", `{"type":"mcp","server_url":"https://crm.example.com","authorization":{"secret":"../x"}}`, "tools[0].authorization", secrets.ErrBadReference},
		{"headers not an object", `{"type":"mcp","server_url":"https://crm.example.com","headers":"x"}`, "tools[0].headers", secrets.ErrBadReference},
		{"reference as headers", `{"type":"mcp","server_url":"https://crm.example.com","headers":{"secret":"crm-token"}}`, "tools[0].headers", secrets.ErrBadReference},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.ResolveTools([]json.RawMessage{json.RawMessage(tt.tool)})
			var re *secrets.ReferenceError
			if !errors.Is(err, tt.err) || !errors.As(err, &re) || re.Field != tt.field {
				t.Fatalf("err = %v, want %v on %s", err, tt.err, tt.field)
			}
			if strings.Contains(err.Error(), "crm-value") {
				t.Fatalf("error carries the secret: %v", err)
			}
		})
	}
	var nilR *secrets.Resolver
	_, err := nilR.ResolveTools([]json.RawMessage{json.RawMessage(`{"type":"mcp","server_url":"https://crm.example.com","authorization":{"secret":"crm-token"}}`)})
	if !errors.Is(err, secrets.ErrSecretNotFound) {
		t.Fatalf("nil resolver: %v, want ErrSecretNotFound", err)
	}
	out, err := nilR.ResolveTools([]json.RawMessage{json.RawMessage(`{"type":"mcp","authorization":"literal","headers":{"A":null}}`)})
	if err != nil || len(out) != 1 {
		t.Fatalf("nil resolver without references: %v", err)
	}
}

// A secret goes only where the operator allows, whichever field of the
// MCP tool says where the call goes. openai-go's responses.ToolMcpParam
// has server_url, connector_id and tunnel_id ("one of ... must be
// provided"); Foundry's MCP tool adds project_connection_id. A second
// destination beside an allowed server_url, or a field spelt another way
// (Server_URL, serverUrl) that a lenient parser could read as server_url,
// must not carry the secret elsewhere.
func TestResolveToolsDestinations(t *testing.T) {
	t.Parallel()
	r := setup(t, map[string][]string{
		"crm-token":   {"crm.example.com", "crm-connection"},
		"billing.key": {"*.billing.example.com", "connector_dropbox"},
	})
	const ref = `"headers":{"A":{"secret":"crm-token"}}`
	const ok = `"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp",` + ref
	refused := []struct{ name, tool string }{
		{"Server_URL beside server_url", `{` + ok + `,"Server_URL":"https://evil.example.net"}`},
		{"SERVER_URL alone", `{"type":"mcp","SERVER_URL":"https://crm.example.com",` + ref + `}`},
		{"serverUrl", `{` + ok + `,"serverUrl":"https://evil.example.net"}`},
		{"server-url", `{` + ok + `,"server-url":"https://evil.example.net"}`},
		{"connector_id elsewhere", `{` + ok + `,"connector_id":"connector_gmail"}`},
		{"Connector_Id elsewhere", `{` + ok + `,"Connector_Id":"connector_gmail"}`},
		{"tunnel_id elsewhere", `{` + ok + `,"tunnel_id":"tunnel_evil"}`},
		{"project_connection_id elsewhere", `{` + ok + `,"project_connection_id":"evil-connection"}`},
		{"projectConnectionId", `{` + ok + `,"projectConnectionId":"evil-connection"}`},
		{"unknown url field", `{` + ok + `,"url":"https://evil.example.net"}`},
		{"unknown endpoint field", `{` + ok + `,"endpoint":"evil.example.net"}`},
		{"unknown field without a url", `{` + ok + `,"x_route":"evil"}`},
		{"server_url not a string", `{"type":"mcp","server_url":{"host":"crm.example.com"},` + ref + `}`},
		{"connector_id not a string", `{` + ok + `,"connector_id":["connector_gmail"]}`},
		{"not an mcp tool", `{"type":"openapi","server_url":"https://crm.example.com",` + ref + `}`},
		{"type in another case", `{"type":"MCP","server_url":"https://crm.example.com",` + ref + `}`},
		{"no type", `{"server_url":"https://crm.example.com",` + ref + `}`},
		{"no destination", `{"type":"mcp","server_url":"",` + ref + `}`},
		{"only an allowed id of another secret", `{"type":"mcp","connector_id":"connector_dropbox",` + ref + `}`},
		{"user information", `{"type":"mcp","server_url":"https://crm.example.com@evil.example.net/mcp",` + ref + `}`},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			out, err := r.ResolveTools([]json.RawMessage{json.RawMessage(tt.tool)})
			if !errors.Is(err, secrets.ErrSecretNotAllowed) {
				t.Fatalf("err = %v (out %s), want ErrSecretNotAllowed", err, out)
			}
		})
	}
	accepted := []struct{ name, tool string }{
		{"every MCP field", `{` + ok + `,"server_description":"d","require_approval":{"never":{"tool_names":["a"]}},"allowed_tools":["a"],"defer_loading":false,"allowed_callers":["direct"],"authorization":"literal"}`},
		{"null and empty destinations", `{` + ok + `,"connector_id":null,"tunnel_id":""}`},
		{"an allowed connection beside an allowed server", `{` + ok + `,"project_connection_id":"crm-connection"}`},
		{"an allowed connection alone", `{"type":"mcp","server_label":"crm","project_connection_id":"CRM-Connection",` + ref + `}`},
	}
	for _, tt := range accepted {
		t.Run(tt.name, func(t *testing.T) {
			out, err := r.ResolveTools([]json.RawMessage{json.RawMessage(tt.tool)})
			if err != nil || !strings.Contains(string(out[0]), "crm-value-123") {
				t.Fatalf("ResolveTools = %s, %v; want the secret resolved", out, err)
			}
		})
	}
}

// A refusal is stored in run state, run events and dead letters, which
// every submitter may read: it says what is wrong with the request, never
// where a secret may go, where secrets are kept or what the variables are
// called. Those go to the worker's log, at debug level.
func TestRefusalsRevealNoConfiguration(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "unreadable"), 0o700); err != nil { // a directory: reading it fails
		t.Fatal(err)
	}
	quiet := zerolog.New(&strings.Builder{}).Level(zerolog.InfoLevel) // replaced in each case
	r, err := secrets.NewResolver(secrets.Config{
		Dir:       dir,
		EnvPrefix: "ACME_VAULT_",
		LookupEnv: func(string) (string, bool) { return "", false },
		Hosts: map[string][]string{
			"crm-token":  {"crm.internal-hosts.example", "*.hidden-zone.example"},
			"missing":    {"crm.internal-hosts.example"},
			"unreadable": {"crm.internal-hosts.example"},
		},
		Logger: &quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	tool := func(server, name string) json.RawMessage {
		return json.RawMessage(`{"type":"mcp","server_label":"s","server_url":"` + server + `","headers":{"A":{"secret":"` + name + `"}}}`)
	}
	tests := []struct {
		name   string
		r      *secrets.Resolver
		tool   json.RawMessage
		err    error
		hidden []string // in the log at debug, never in the error
	}{
		{"other host", r, tool("https://evil.example.net/mcp", "crm-token"), secrets.ErrSecretNotAllowed, []string{"crm.internal-hosts.example", "*.hidden-zone.example"}},
		{"no hosts for the secret", r, tool("https://evil.example.net/mcp", "no-hosts"), secrets.ErrSecretNotAllowed, []string{"--secret-hosts"}},
		{"connector elsewhere", r, json.RawMessage(`{"type":"mcp","connector_id":"connector_gmail","headers":{"A":{"secret":"crm-token"}}}`), secrets.ErrSecretNotAllowed, []string{"crm.internal-hosts.example", "*.hidden-zone.example"}},
		{"not found", r, tool("https://crm.internal-hosts.example/mcp", "missing"), secrets.ErrSecretNotFound, []string{dir, "ACME_VAULT_MISSING"}},
		{"unreadable", r, tool("https://crm.internal-hosts.example/mcp", "unreadable"), secrets.ErrSecretNotFound, []string{dir}},
		{"no secret store", nil, tool("https://crm.internal-hosts.example/mcp", "crm-token"), secrets.ErrSecretNotFound, []string{"--secrets-dir", "FOUNDRYQ_SECRET_"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs strings.Builder
			res := tt.r.WithLogger(zerolog.New(&logs).Level(zerolog.DebugLevel))
			_, err := res.ResolveTools([]json.RawMessage{tt.tool})
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			for _, h := range append(tt.hidden, dir, "ACME_VAULT", "FOUNDRYQ_SECRET", "internal-hosts", "hidden-zone") {
				if strings.Contains(err.Error(), h) {
					t.Errorf("refusal %q names %q", err, h)
				}
			}
			if !strings.Contains(err.Error(), "tools[0].headers.A") {
				t.Errorf("refusal %q does not name the field", err)
			}
			var found bool
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var m map[string]any
				if json.Unmarshal([]byte(l), &m) != nil || m["level"] != "debug" || m["field"] != "tools[0].headers.A" {
					continue
				}
				all := true
				for _, h := range tt.hidden {
					all = all && strings.Contains(l, h)
				}
				found = found || all
			}
			if !found {
				t.Errorf("no debug line with %q in the log:\n%s", tt.hidden, logs.String())
			}
		})
	}
}
