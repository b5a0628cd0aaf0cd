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
