package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
)

// The environment variables that point the suite at a real endpoint.
const (
	// EnvEndpoint is the v1 base URL of an Azure OpenAI resource
	// (https://RES.openai.azure.com/openai/v1/) or a Foundry project
	// (https://RES.services.ai.azure.com/api/projects/PROJECT/openai/v1/).
	EnvEndpoint = "FOUNDRYQ_CONFORMANCE_ENDPOINT"
	// EnvAPIKey is the endpoint's API key; without it the suite
	// authenticates with Entra ID (azidentity.DefaultAzureCredential).
	EnvAPIKey = "FOUNDRYQ_CONFORMANCE_API_KEY"
	// EnvModel is the model deployment the cases use (required with
	// EnvEndpoint): a small, cheap one is best.
	EnvModel = "FOUNDRYQ_CONFORMANCE_MODEL"
	// EnvAgent is the name of an agent of the endpoint's Foundry project,
	// for the cases about agent runs (Case.NeedsAgent); without it they are
	// not run on the endpoint. The agent never runs: its case is a create
	// the service refuses, which spends no token.
	EnvAgent = "FOUNDRYQ_CONFORMANCE_AGENT"
)

// EmulatorAgent is the agent name the cases send to the emulator, which
// knows every agent.
const EmulatorAgent = "foundryq-conformance"

// EmulatorModel is the model name the cases send to the emulator, which
// accepts any.
const EmulatorModel = "gpt-4o-mini"

// Config describes an endpoint to run the cases against.
type Config struct {
	// Name labels the endpoint in results: "emulator" or "endpoint".
	// Default "endpoint".
	Name string
	// BaseURL is the v1 base URL, as foundry.Config.BaseURL. Required.
	BaseURL string
	// Model is the model or deployment name the cases create responses
	// with. Required.
	Model string
	// Agent is the name of an agent of the endpoint's project, for the
	// cases that need one (Case.NeedsAgent). Empty: they are not run.
	Agent string
	// APIKey is sent in the "api-key" header. Empty: Entra ID.
	APIKey string
	// Credential provides Entra ID tokens when APIKey is empty. Default:
	// azidentity.NewDefaultAzureCredential.
	Credential azcore.TokenCredential
	// Scope is the Entra ID scope. Default: the one package foundry picks
	// for the base URL (https://ai.azure.com/.default on a project
	// endpoint, https://cognitiveservices.azure.com/.default otherwise).
	Scope string
	// HTTPClient sends the requests. Default: a client with no overall
	// timeout (each case has its own deadline).
	HTTPClient *http.Client
}

// Endpoint is a Responses API endpoint the cases run against: a base URL
// and its credentials, sent the way package foundry sends them. Cases talk
// raw HTTP to it, since they look at status codes, headers and SSE frames
// that a client would hide.
type Endpoint struct {
	name    string
	baseURL string
	model   string
	agent   string
	apiKey  string
	cred    azcore.TokenCredential
	scope   string
	hc      *http.Client

	// notFoundGrace is how long a response may answer 404 after its
	// streamed create before the cases take the 404 for an answer:
	// foundry.NotFoundGrace (tests of the package shorten it).
	notFoundGrace time.Duration

	// emulator is set for foundrytest's emulator: it honours the emu_*
	// metadata directives, and its clock can be moved (advance).
	emulator bool
	advance  func(time.Duration)
}

// New checks cfg the way foundry.New does (same base URL rules, same
// scope choice) and returns the endpoint. No request is sent.
func New(cfg Config) (*Endpoint, error) {
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, fmt.Errorf("conformance: Model is required (the deployment name, %s)", EnvModel)
	}
	if cfg.APIKey == "" && cfg.Credential == nil {
		cred, err := azidentity.NewDefaultAzureCredential(nil)
		if err != nil {
			return nil, fmt.Errorf("conformance: no API key and DefaultAzureCredential failed: %w", err)
		}
		cfg.Credential = cred
	}
	// foundry.New validates the base URL, normalises it and picks the scope:
	// the suite reaches the endpoint exactly as the worker does.
	fc, err := foundry.New(foundry.Config{BaseURL: cfg.BaseURL, APIKey: cfg.APIKey, Credential: cfg.Credential, Scope: cfg.Scope})
	if err != nil {
		return nil, fmt.Errorf("conformance: %w", err)
	}
	e := &Endpoint{
		name:    cfg.Name,
		baseURL: fc.BaseURL(),
		model:   cfg.Model,
		agent:   strings.TrimSpace(cfg.Agent),
		apiKey:  cfg.APIKey,
		cred:    cfg.Credential,
		scope:   fc.Scope(),
		hc:      cfg.HTTPClient,

		notFoundGrace: foundry.NotFoundGrace,
	}
	if e.name == "" {
		e.name = "endpoint"
	}
	if e.hc == nil {
		e.hc = &http.Client{}
	}
	return e, nil
}

// FromEnv returns the endpoint that EnvEndpoint, EnvAPIKey, EnvModel and
// EnvAgent describe, or nil and no error when EnvEndpoint is unset.
func FromEnv() (*Endpoint, error) {
	base := strings.TrimSpace(os.Getenv(EnvEndpoint))
	if base == "" {
		return nil, nil
	}
	model := strings.TrimSpace(os.Getenv(EnvModel))
	if model == "" {
		return nil, fmt.Errorf("conformance: %s is set but %s is not (the model deployment to use)", EnvEndpoint, EnvModel)
	}
	return New(Config{Name: "endpoint", BaseURL: base, Model: model, Agent: os.Getenv(EnvAgent), APIKey: os.Getenv(EnvAPIKey)})
}

// Emulator is foundrytest's emulator started in process for the cases,
// with an API key and a clock the cases can move forward.
type Emulator struct {
	*Endpoint
	srv *foundrytest.Server
}

// StartEmulator starts the emulator on a loopback port, configured as the
// service is (only an API key is set, and a clock the window cases move).
func StartEmulator() (*Emulator, error) {
	clk := &offsetClock{}
	key := randomHex(16)
	srv, err := foundrytest.Listen("127.0.0.1:0", foundrytest.Config{APIKey: key, Clock: clk.now})
	if err != nil {
		return nil, fmt.Errorf("conformance: start the emulator: %w", err)
	}
	e, err := New(Config{Name: "emulator", BaseURL: srv.BaseURL(), Model: EmulatorModel, Agent: EmulatorAgent, APIKey: key})
	if err != nil {
		srv.Close()
		return nil, err
	}
	e.emulator = true
	e.advance = clk.advance
	return &Emulator{Endpoint: e, srv: srv}, nil
}

// Server is the emulator's server, for tests that look inside.
func (e *Emulator) Server() *foundrytest.Server { return e.srv }

// Close stops the emulator.
func (e *Emulator) Close() {
	e.hc.CloseIdleConnections()
	e.srv.Close()
}

// Name is the endpoint's label in results.
func (e *Endpoint) Name() string { return e.name }

// BaseURL is the normalised v1 base URL (with a trailing slash).
func (e *Endpoint) BaseURL() string { return e.baseURL }

// IsEmulator reports whether the endpoint is foundrytest's emulator.
func (e *Endpoint) IsEmulator() bool { return e.emulator }

// offsetClock is time.Now moved forward by what the cases asked.
type offsetClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *offsetClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *offsetClock) advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// do sends one request to base+path with the endpoint's credentials; body,
// when not nil, is sent as JSON. The caller closes the response body.
func (e *Endpoint) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.baseURL+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if e.apiKey != "" {
		req.Header.Set("api-key", e.apiKey)
	} else {
		tok, err := e.cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{e.scope}})
		if err != nil {
			return nil, fmt.Errorf("get an Entra ID token for %s: %w", e.scope, err)
		}
		req.Header.Set("Authorization", "Bearer "+tok.Token)
	}
	return e.hc.Do(req)
}
