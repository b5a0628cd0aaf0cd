package foundry

import (
	"errors"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cred := &fakeCred{}
	tests := []struct {
		name      string
		cfg       Config
		wantErr   string // substring naming the setting; "" means valid
		wantBase  string
		wantScope string
	}{
		{name: "missing base URL", cfg: Config{APIKey: "k"}, wantErr: "BaseURL is required"},
		{name: "relative", cfg: Config{BaseURL: "openai/v1", APIKey: "k"}, wantErr: "BaseURL"},
		{name: "ftp", cfg: Config{BaseURL: "ftp://x.openai.azure.com/openai/v1", APIKey: "k"}, wantErr: "absolute http(s)"},
		{name: "legacy path", cfg: Config{BaseURL: "https://x.openai.azure.com/openai", APIKey: "k"}, wantErr: "/openai/v1"},
		{name: "bare resource", cfg: Config{BaseURL: "https://x.openai.azure.com", APIKey: "k"}, wantErr: "/openai/v1"},
		{name: "agent endpoint", cfg: Config{BaseURL: "https://x.services.ai.azure.com/api/projects/p/agents/a/endpoint/protocols/openai", APIKey: "k"}, wantErr: "/openai/v1"},
		{name: "project without name", cfg: Config{BaseURL: "https://x.services.ai.azure.com/api/projects//openai/v1", APIKey: "k"}, wantErr: "PROJECT"},
		{name: "query", cfg: Config{BaseURL: "https://x.openai.azure.com/openai/v1?api-version=v1", APIKey: "k"}, wantErr: "query"},
		{name: "bad scope", cfg: Config{BaseURL: "https://x.openai.azure.com/openai/v1", Credential: cred, Scope: "cognitiveservices"}, wantErr: "Scope"},
		{name: "bad agent field", cfg: Config{BaseURL: "https://x.openai.azure.com/openai/v1", APIKey: "k", AgentField: "a b"}, wantErr: `AgentField "a b" is not a valid field name (want letters, digits, _ or -, at most 64 characters)`},
		{
			name: "resource with key", cfg: Config{BaseURL: "https://x.openai.azure.com/openai/v1", APIKey: "k"},
			wantBase: "https://x.openai.azure.com/openai/v1/",
		},
		{
			name: "resource with Entra ID", cfg: Config{BaseURL: "https://x.openai.azure.com/openai/v1/", Credential: cred},
			wantBase: "https://x.openai.azure.com/openai/v1/", wantScope: ScopeCognitiveServices,
		},
		{
			name: "services host without project", cfg: Config{BaseURL: "https://x.services.ai.azure.com/openai/v1", Credential: cred},
			wantBase: "https://x.services.ai.azure.com/openai/v1/", wantScope: ScopeCognitiveServices,
		},
		{
			name: "project endpoint", cfg: Config{BaseURL: "https://x.services.ai.azure.com/api/projects/proj/openai/v1", Credential: cred},
			wantBase: "https://x.services.ai.azure.com/api/projects/proj/openai/v1/", wantScope: ScopeAIFoundry,
		},
		{
			// The path makes a project endpoint, whatever the host (a custom
			// domain, a private endpoint, the emulator).
			name: "project path on another host", cfg: Config{BaseURL: "http://127.0.0.1:8089/api/projects/proj/openai/v1", Credential: cred},
			wantBase: "http://127.0.0.1:8089/api/projects/proj/openai/v1/", wantScope: ScopeAIFoundry,
		},
		{
			name: "scope override", cfg: Config{BaseURL: "https://x.services.ai.azure.com/api/projects/proj/openai/v1", Credential: cred, Scope: "https://example.test/.default"},
			wantBase: "https://x.services.ai.azure.com/api/projects/proj/openai/v1/", wantScope: "https://example.test/.default",
		},
		{
			name: "local emulator", cfg: Config{BaseURL: "http://127.0.0.1:8089/openai/v1/", APIKey: "k"},
			wantBase: "http://127.0.0.1:8089/openai/v1/",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := New(tt.cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrInvalidConfig) {
					t.Fatalf("New err = %v, want ErrInvalidConfig mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if c.BaseURL() != tt.wantBase {
				t.Errorf("BaseURL = %q, want %q", c.BaseURL(), tt.wantBase)
			}
			if c.Scope() != tt.wantScope {
				t.Errorf("Scope = %q, want %q", c.Scope(), tt.wantScope)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg := Config{BaseURL: "https://x.openai.azure.com/openai/v1", APIKey: "k"}.withDefaults()
	if cfg.AgentField != "agent_reference" || cfg.MaxRetries != 2 || cfg.HTTPClient == nil || cfg.HTTPClient.Timeout != 0 {
		t.Errorf("defaults = %+v", cfg)
	}
	if got := (Config{MaxRetries: -1}).withDefaults().MaxRetries; got != 0 {
		t.Errorf("MaxRetries -1 → %d, want 0", got)
	}
}

func TestDefaultCredential(t *testing.T) {
	t.Parallel()
	// No key, no credential: DefaultAzureCredential is built (no token is
	// requested until the first call).
	c, err := New(Config{BaseURL: "https://x.services.ai.azure.com/api/projects/p/openai/v1"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if c.tokens == nil || c.Scope() != ScopeAIFoundry {
		t.Errorf("tokens = %v, scope = %q", c.tokens, c.Scope())
	}
}
