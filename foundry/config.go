package foundry

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
)

// Entra ID scopes chosen from the base URL's host (see Config.Scope).
const (
	// ScopeCognitiveServices is the scope for Azure OpenAI resources (*.openai.azure.com,
	// *.cognitiveservices.azure.com, *.services.ai.azure.com/openai/v1).
	ScopeCognitiveServices = "https://cognitiveservices.azure.com/.default"
	// ScopeAIFoundry is the scope for Foundry project endpoints
	// (*.services.ai.azure.com/api/projects/PROJECT/openai/v1).
	ScopeAIFoundry = "https://ai.azure.com/.default"
)

// DefaultAgentField is the request body field that carries a Foundry agent reference.
const DefaultAgentField = "agent_reference"

// DefaultStreamIdleTimeout is the default of Config.StreamIdleTimeout: three
// of the 30 s intervals at which the service sends keepalive events while a
// response is slow (BerriAI/litellm#39617).
const DefaultStreamIdleTimeout = 90 * time.Second

// DefaultMaxRetries is the number of SDK retries for idempotent calls (Get, Cancel, Resume).
const DefaultMaxRetries = 2

// Config configures a Client. Only BaseURL is required.
type Config struct {
	// BaseURL is the v1 Responses base URL, either an Azure OpenAI resource
	// (https://RES.openai.azure.com/openai/v1/) or a Foundry project endpoint
	// (https://RES.services.ai.azure.com/api/projects/PROJECT/openai/v1/). The path
	// must end in /openai/v1; the trailing slash is optional. Required.
	BaseURL string
	// APIKey is sent in the "api-key" header. Empty: Entra ID is used.
	APIKey string
	// Credential provides Entra ID tokens when APIKey is empty. Default:
	// azidentity.NewDefaultAzureCredential.
	Credential azcore.TokenCredential
	// Scope is the Entra ID token scope. Default: ScopeAIFoundry for a project
	// endpoint (a path .../api/projects/PROJECT/openai/v1), ScopeCognitiveServices
	// otherwise.
	Scope string
	// AgentField is the body field name of an agent reference. Default: "agent_reference".
	AgentField string
	// HTTPClient sends the requests. Default: a clone of http.DefaultTransport with a
	// 10 minute response header timeout, up to 512 idle connections per host, and no
	// overall timeout (streams are long).
	// Do not set http.Client.Timeout: it would cut long streams.
	HTTPClient *http.Client
	// CleartextHTTP2 makes the default HTTP client speak HTTP/2 without TLS
	// (prior knowledge) to an http:// BaseURL, as `foundryq emulator` serves
	// it: many streams then share one connection, as they do over HTTPS
	// when the server offers HTTP/2. Only for http:// endpoints, and only
	// without HTTPClient. Default false (HTTP/1.1 over http://).
	CleartextHTTP2 bool
	// MaxRetries is how often the SDK retries the idempotent calls Get, Cancel and
	// Resume (connection errors, 408, 409, 429, 5xx). 0 means the default (2); a
	// negative value disables retries. Create is never retried: a retried background
	// create can start a second, billed run.
	MaxRetries int
	// StreamIdleTimeout ends a stream (from Create or Resume) that receives
	// nothing at all for that long while Next waits for it: Next returns
	// false, Err wraps ErrStreamIdle and the body is closed. Keepalive frames
	// count as something, and time the caller spends between two calls of
	// Next does not count. Default (0): 90s (DefaultStreamIdleTimeout, three
	// of the service's 30 s keepalive intervals); negative disables it; a
	// positive value under 1ms is refused (a missing unit, most likely).
	StreamIdleTimeout time.Duration
	// IncludeObfuscation lets the service pad every delta event with an
	// "obfuscation" field of random characters (a defence against
	// side-channel attacks on token lengths; openai-go v3.98.0
	// ResponseNewParams.StreamOptions.IncludeObfuscation). Default false:
	// Create sends stream_options.include_obfuscation false and Resume
	// include_obfuscation=false, saving the bytes on every delta between
	// Foundry and a worker that does not need them.
	IncludeObfuscation bool
}

// withDefaults returns cfg with every unset field given its default. It does not
// create the default credential (New does, after validation).
func (cfg Config) withDefaults() Config {
	cfg.BaseURL = strings.TrimSpace(cfg.BaseURL)
	if u, err := url.Parse(cfg.BaseURL); err == nil && u.Path != "" && !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
		cfg.BaseURL = u.String()
	}
	if cfg.AgentField == "" {
		cfg.AgentField = DefaultAgentField
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = DefaultMaxRetries
	} else if cfg.MaxRetries < 0 {
		cfg.MaxRetries = 0
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = defaultHTTPClient(cfg.CleartextHTTP2)
	}
	if cfg.StreamIdleTimeout == 0 {
		cfg.StreamIdleTimeout = DefaultStreamIdleTimeout
	}
	if cfg.Scope == "" && cfg.APIKey == "" {
		cfg.Scope = scopeFor(cfg.BaseURL)
	}
	return cfg
}

// validate checks a config that went through withDefaults.
func (cfg Config) validate() error {
	if cfg.BaseURL == "" {
		return configError("BaseURL", "is required (e.g. https://RES.openai.azure.com/openai/v1/)")
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil {
		return configError("BaseURL", fmt.Sprintf("%q is not a URL: %v", cfg.BaseURL, err))
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return configError("BaseURL", fmt.Sprintf("%q must be an absolute http(s) URL", cfg.BaseURL))
	}
	if cfg.CleartextHTTP2 && u.Scheme != "http" {
		return configError("CleartextHTTP2", "needs an http:// BaseURL (over https the transport negotiates HTTP/2 by itself)")
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return configError("BaseURL", fmt.Sprintf("%q must not carry a query, fragment or user info", redactURL(u)))
	}
	path := strings.TrimSuffix(u.Path, "/")
	if !strings.HasSuffix(path, "/openai/v1") {
		return configError("BaseURL", fmt.Sprintf("%q must be a v1 endpoint ending in /openai/v1 (https://RES.openai.azure.com/openai/v1/ or https://RES.services.ai.azure.com/api/projects/PROJECT/openai/v1/)", cfg.BaseURL))
	}
	if i := strings.Index(path, "/api/projects/"); i >= 0 {
		project := strings.TrimSuffix(path[i+len("/api/projects/"):], "/openai/v1")
		if project == "" || strings.Contains(project, "/") {
			return configError("BaseURL", fmt.Sprintf("%q: a project endpoint must look like .../api/projects/PROJECT/openai/v1", cfg.BaseURL))
		}
	}
	if cfg.APIKey == "" && cfg.Scope != "" {
		if s, err := url.Parse(cfg.Scope); err != nil || s.Scheme == "" || s.Host == "" {
			return configError("Scope", fmt.Sprintf("%q must be an absolute URL such as %s", cfg.Scope, ScopeCognitiveServices))
		}
	}
	if !validFieldName(cfg.AgentField) {
		return configError("AgentField", fmt.Sprintf("%q is not a valid field name (want letters, digits, _ or -, at most 64 characters)", cfg.AgentField))
	}
	if cfg.StreamIdleTimeout > 0 && cfg.StreamIdleTimeout < time.Millisecond {
		return configError("StreamIdleTimeout", fmt.Sprintf("%s is under 1ms (use a negative value to disable it)", cfg.StreamIdleTimeout))
	}
	if strings.ContainsAny(cfg.APIKey, "\r\n") {
		return configError("APIKey", "must not contain line breaks")
	}
	return nil
}

func configError(setting, reason string) error {
	return fmt.Errorf("%w: %s %s", ErrInvalidConfig, setting, reason)
}

// scopeFor picks the Entra ID scope for a base URL: a Foundry project endpoint
// (.../api/projects/PROJECT/openai/v1, whatever the host: *.services.ai.azure.com,
// a custom domain or a private endpoint) uses ScopeAIFoundry, everything else
// ScopeCognitiveServices.
func scopeFor(baseURL string) string {
	u, err := url.Parse(baseURL)
	if err != nil {
		return ScopeCognitiveServices
	}
	if strings.Contains(u.Path, "/api/projects/") {
		return ScopeAIFoundry
	}
	return ScopeCognitiveServices
}

// ValidFieldName reports whether s may be Config.AgentField: a JSON field
// name of letters, digits, '_' and '-', at most 64 characters.
func ValidFieldName(s string) bool { return validFieldName(s) }

// validFieldName accepts JSON field names we are willing to write: letters,
// digits, '_' and '-'.
func validFieldName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
		default:
			return false
		}
	}
	return true
}

func redactURL(u *url.URL) string {
	c := *u
	c.User = nil
	c.RawQuery = ""
	c.Fragment = ""
	return c.String()
}

func defaultHTTPClient(cleartextHTTP2 bool) *http.Client {
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		t = t.Clone()
		if cleartextHTTP2 {
			// Without HTTP1 in the set, http:// requests use HTTP/2 with
			// prior knowledge.
			t.Protocols = new(http.Protocols)
			t.Protocols.SetUnencryptedHTTP2(true)
		}
		t.ResponseHeaderTimeout = 10 * time.Minute
		// A worker talks to one host with many runs at once; the default of
		// 2 idle connections per host would make most cancel and get calls
		// dial a new connection.
		t.MaxIdleConns = 1024
		t.MaxIdleConnsPerHost = 512
		// Each streaming run holds a connection, and each connection its
		// buffers, for the run's whole life: a run sends a request or two,
		// so a small write buffer costs nothing (a larger body is written
		// in several syscalls) and saves 3 KiB a run.
		t.WriteBufferSize = 1 << 10
		return &http.Client{Transport: t}
	}
	return &http.Client{Transport: http.DefaultTransport}
}
