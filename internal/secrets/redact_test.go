package secrets_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/foundryq/foundryq/internal/secrets"
)

func TestRedactRequest(t *testing.T) {
	t.Parallel()
	body := `{"run_id":"r1","model":"m","input":"see https://docs.example.com/?page=2 <b>",` +
		`"tools":[{"type":"mcp","server_label":"crm","server_url":"https://u:url-pass-1@crm.example.com/mcp?key=query-secret-2",` +
		`"headers":{"Authorization":"Bearer header-secret-3","X-Api-Key":"header-secret-4","X-Ref":{"secret":"crm-token"}},` +
		`"authorization":"auth-secret-5"},{"type":"function","name":"f","parameters":{"type":"object"}},` +
		`{"type":"openapi","openapi":{"auth":{"type":"key","api_key":"nested-secret-6","credentials":{"x":"nested-secret-7"}}}}],` +
		`"options":{"temperature":0.2,"client_secret":"opt-secret-8"},"metadata":{"k":"v"},"max_output_tokens":100}`
	got := string(secrets.RedactRequest([]byte(body)))
	for i, s := range []string{"url-pass-1", "query-secret-2", "header-secret-3", "header-secret-4", "auth-secret-5", "nested-secret-6", "nested-secret-7", "opt-secret-8"} {
		if strings.Contains(got, s) {
			t.Errorf("secret %d (%s) survived: %s", i+1, s, got)
		}
	}
	var back struct {
		RunID string            `json:"run_id"`
		Input string            `json:"input"`
		Meta  map[string]string `json:"metadata"`
		Max   int               `json:"max_output_tokens"`
		Tools []struct {
			Type      string         `json:"type"`
			ServerURL string         `json:"server_url"`
			Headers   map[string]any `json:"headers"`
		} `json:"tools"`
		Options map[string]any `json:"options"`
	}
	if err := json.Unmarshal([]byte(got), &back); err != nil {
		t.Fatalf("redacted body is not JSON: %v: %s", err, got)
	}
	if back.RunID != "r1" || back.Input != "see https://docs.example.com/?page=2 <b>" || back.Meta["k"] != "v" || back.Max != 100 {
		t.Errorf("fields that carry no credentials changed: %s", got)
	}
	if back.Tools[0].ServerURL != "https://u:REDACTED@crm.example.com/mcp?key=REDACTED" {
		t.Errorf("server_url = %q", back.Tools[0].ServerURL)
	}
	if ref, ok := back.Tools[0].Headers["X-Ref"].(map[string]any); !ok || ref["secret"] != "crm-token" {
		t.Errorf("a secret reference was not kept: %v", back.Tools[0].Headers["X-Ref"])
	}
	if back.Tools[1].Type != "function" || back.Options["temperature"] != 0.2 {
		t.Errorf("tool without credentials or options changed: %s", got)
	}

	// Nothing to redact: the same bytes.
	plain := `{"run_id":"r2","model":"m","input":"hi","tools":[{"type":"web_search"}]}`
	if got := string(secrets.RedactRequest([]byte(plain))); got != plain {
		t.Errorf("unchanged body re-encoded: %s", got)
	}
}

func TestRedactRequestMalformed(t *testing.T) {
	t.Parallel()
	withCreds := `{"run_id":"r","tools":[{"headers":{"Authorization":"Bearer leaked-token"}}]` // cut short
	if got := string(secrets.RedactRequest([]byte(withCreds))); strings.Contains(got, "leaked-token") {
		t.Errorf("malformed body with credentials kept: %s", got)
	}
	harmless := `{"run_id":"r","input":"hi",`
	if got := string(secrets.RedactRequest([]byte(harmless))); got != harmless {
		t.Errorf("malformed body without credentials changed: %s", got)
	}
	badTools := `{"run_id":"r","tools":"Bearer leaked-token"}`
	if got := string(secrets.RedactRequest([]byte(badTools))); strings.Contains(got, "leaked-token") || !strings.Contains(got, `"run_id":"r"`) {
		t.Errorf("tools given as a string: %s", got)
	}
}

func TestRedactTools(t *testing.T) {
	t.Parallel()
	tools := []json.RawMessage{
		json.RawMessage(`{"type":"mcp","headers":{"A":"h-secret-1"}}`),
		json.RawMessage(`{"type":"web_search"}`),
		json.RawMessage(`{"type":"mcp","authorization":"a-secret-2"`), // malformed
	}
	out := secrets.RedactTools(tools)
	joined := string(out[0]) + string(out[1]) + string(out[2])
	if strings.Contains(joined, "h-secret-1") || strings.Contains(joined, "a-secret-2") {
		t.Fatalf("RedactTools kept a secret: %s", joined)
	}
	if string(out[1]) != string(tools[1]) {
		t.Errorf("tool without credentials changed: %s", out[1])
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"nats://client:s3cret@127.0.0.1:4222", "nats://client:REDACTED@127.0.0.1:4222"},
		{"nats://tok3n@nats:4222", "nats://REDACTED@nats:4222"},
		{"tls://nats.example.com:4222", "tls://nats.example.com:4222"},
		{"nats://client:s3cret@ho st:4222", "nats://REDACTED@ho st:4222"},
		{"nats://client:s3cret@[::1", "nats://REDACTED@[::1"},
		{"https://h.example.com/p?sig=abc&x=1", "https://h.example.com/p?sig=REDACTED&x=REDACTED"},
		{"not a url", "not a url"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := secrets.RedactURL(tt.in); got != tt.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := secrets.RedactURLs("nats://a:p1@h1:4222, nats://tok@h2:4222"); got != "nats://a:REDACTED@h1:4222,nats://REDACTED@h2:4222" {
		t.Errorf("RedactURLs = %q", got)
	}
	got := secrets.URLSecrets("nats://a:p%40ss@h1:4222,nats://tok@h2,nats://h3")
	if strings.Join(got, " ") != "p%40ss p@ss tok" {
		t.Errorf("URLSecrets = %q", got)
	}
}

// Every header value is redacted whatever its JSON shape: the README
// promises it, and a header that is an object or a number still reaches
// the MCP server (or was meant to). Only a secret reference, which holds
// a name, is kept.
func TestRedactHeaderValueShapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, headers, secret string
	}{
		{"object", `{"B":{"value":"sk-live-obj-1"}}`, "sk-live-obj-1"},
		{"nested object", `{"B":{"a":{"b":{"c":"sk-live-nest-2"}}}}`, "sk-live-nest-2"},
		{"array", `{"B":["sk-live-arr-3","x"]}`, "sk-live-arr-3"},
		{"array of objects", `{"B":[{"v":"sk-live-arrobj-4"}]}`, "sk-live-arrobj-4"},
		{"number", `{"B":918273645501}`, "918273645501"},
		{"float", `{"B":3.14159265358979}`, "3.14159265358979"},
		{"bool", `{"X-Debug-Key":true}`, "true"},
		{"reference with an extra key", `{"B":{"secret":"crm-token","value":"sk-live-extra-5"}}`, "sk-live-extra-5"},
		{"reference whose name is an object", `{"B":{"secret":{"value":"sk-live-refobj-6"}}}`, "sk-live-refobj-6"},
		{"reference whose name is no name", `{"B":{"secret":"Bearer sk-live-refname/7"}}`, "sk-live-refname/7"},
		{"headers as a string", `"Authorization: Bearer sk-live-str-8"`, "sk-live-str-8"},
		{"headers as an array", `["Authorization: Bearer sk-live-list-9"]`, "sk-live-list-9"},
		{"headers as a number", `1234567890123`, "1234567890123"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, key := range []string{"headers", "Headers", "HEADERS"} {
				tool := `{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp","` + key + `":` + tt.headers + `}`
				body := `{"run_id":"r1","model":"m","input":"hi","tools":[` + tool + `],"options":{"extra_headers":` + tt.headers + `}}`
				got := string(secrets.RedactRequest([]byte(body)))
				if strings.Contains(got, tt.secret) {
					t.Errorf("%s: RedactRequest kept %s: %s", key, tt.secret, got)
				}
				if !json.Valid([]byte(got)) || !strings.Contains(got, secrets.Redacted) || !strings.Contains(got, "https://crm.example.com/mcp") {
					t.Errorf("%s: RedactRequest = %s, want the request with the header redacted", key, got)
				}
				out := secrets.RedactTools([]json.RawMessage{json.RawMessage(tool)})
				if strings.Contains(string(out[0]), tt.secret) || !json.Valid(out[0]) {
					t.Errorf("%s: RedactTools = %s", key, out[0])
				}
			}
		})
	}

	// What holds no credential is kept: a reference (a name) and null.
	tool := `{"type":"mcp","headers":{"A":{"secret":"crm-token"},"B":null,"C":"sk-live-c"}}`
	got := string(secrets.RedactTools([]json.RawMessage{json.RawMessage(tool)})[0])
	if got != `{"headers":{"A":{"secret":"crm-token"},"B":null,"C":"REDACTED"},"type":"mcp"}` {
		t.Errorf("RedactTools = %s", got)
	}
}

// A reference is kept only when it is one: {"secret": NAME} with a valid
// name. Anything else under "secret" is a value in disguise.
func TestRedactKeepsOnlyRealReferences(t *testing.T) {
	t.Parallel()
	body := `{"tools":[{"type":"mcp","authorization":{"secret":{"password":"sk-live-auth-1"}}}],` +
		`"options":{"x":{"secret":{"api_key":"sk-live-opt-2"}},"y":{"secret":"crm-token"}}}`
	got := string(secrets.RedactRequest([]byte(body)))
	for _, s := range []string{"sk-live-auth-1", "sk-live-opt-2"} {
		if strings.Contains(got, s) {
			t.Errorf("kept %s: %s", s, got)
		}
	}
	if !strings.Contains(got, `"y":{"secret":"crm-token"}`) {
		t.Errorf("a real reference was not kept: %s", got)
	}
}

// Whatever JSON value a header holds, RedactTools leaves only Redacted,
// a reference or null in its place.
func FuzzRedactHeaderValue(f *testing.F) {
	for _, s := range []string{`"sk-1"`, `{"value":"sk-2"}`, `["sk-3"]`, `42`, `true`, `null`, `{"secret":"crm-token"}`, `{"secret":{"x":"sk-4"}}`, `[{"a":[{"b":"sk-5"}]}]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		if !json.Valid([]byte(value)) {
			t.Skip()
		}
		tool := `{"type":"mcp","headers":{"H":` + value + `}}`
		out := secrets.RedactTools([]json.RawMessage{json.RawMessage(tool)})[0]
		var back struct {
			Headers map[string]json.RawMessage `json:"headers"`
		}
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("RedactTools(%s) = %s: %v", tool, out, err)
		}
		got := string(back.Headers["H"])
		var ref map[string]any
		isRef := json.Unmarshal(back.Headers["H"], &ref) == nil && len(ref) == 1
		if name, ok := ref["secret"].(string); isRef && ok && secrets.ValidName(name) {
			return
		}
		if got != `"`+secrets.Redacted+`"` && got != "null" {
			t.Fatalf("header %s came out as %s", value, got)
		}
	})
}
