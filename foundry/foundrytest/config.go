package foundrytest

import (
	"crypto/rsa"
	"fmt"
	"time"

	"github.com/rs/zerolog"
)

// Limits on scenario values and request sizes. They keep a malformed or
// hostile request from making the emulator allocate without bound.
const (
	// MaxScenarioTokens is the default (and the ceiling) of Config.MaxTokens.
	MaxScenarioTokens = 1_000_000
	// MaxScenarioDelay is the largest delay any emu_*_ms key accepts.
	MaxScenarioDelay = time.Hour
)

// Config configures a Handler or a Server. The zero value is ready to use:
// every field states its default.
type Config struct {
	// APIKey, when set, is required on every request under /openai/v1/,
	// either in the "api-key" header or as "Authorization: Bearer <key>".
	// Default "": no authentication.
	APIKey string

	// ResumeWindow is how long after created_at a background response can
	// still be streamed with GET ?stream=true. Default 5m, as on Azure/OpenAI.
	ResumeWindow time.Duration

	// DefaultTokens is the number of text tokens generated when the request
	// has no emu_tokens metadata key. Default (and when 0) 20; a request can
	// still ask for an empty message with emu_tokens=0.
	DefaultTokens int

	// DefaultTokenDelay is the pause between two text tokens when the
	// request has no emu_token_ms metadata key. Default 0 (as fast as
	// possible).
	DefaultTokenDelay time.Duration

	// MaxTokens is the largest emu_tokens value accepted (a larger one gets
	// 400); it also caps max_output_tokens. Default and ceiling
	// MaxScenarioTokens (1,000,000).
	MaxTokens int

	// MaxBodyBytes caps the size of a create request body; a larger body gets
	// 413. Default 8 MiB.
	MaxBodyBytes int64

	// Retention is how long a finished response is kept after it ended. Expired
	// responses are forgotten lazily (on later creates): GET answers 404 and
	// they leave Stats.Statuses. Default 0: kept until Close or DELETE.
	Retention time.Duration

	// Clock returns the current time. Default time.Now. Tests can move it
	// forward to expire the resume window without sleeping.
	Clock func() time.Time

	// AcceptDeprecatedAgentField accepts the old "agent" request field for an
	// agent reference. Default false: the service refuses it with 400
	// invalid_payload "The 'agent' property is deprecated. Use
	// 'agent_reference' instead." (MicrosoftLearning/mslearn-ai-agents
	// #157, #193). The service has renamed this field before, which is why
	// foundry.Config.AgentField exists; this setting emulates a service that
	// takes the old name.
	AcceptDeprecatedAgentField bool

	// KeepaliveInterval is the pause between the keepalive events a stream
	// sends while response.created is held back (emu_created_ms), when the
	// request has no emu_keepalive_ms key. Default 30s, as seen on the
	// service (BerriAI/litellm#39617).
	KeepaliveInterval time.Duration

	// EntraKeys, when set, makes the emulator accept Entra ID bearer tokens:
	// RS256 JWTs signed by one of these keys, not expired (exp, nbf against
	// Clock), whose aud is the resource of the endpoint form the request came
	// in on: https://cognitiveservices.azure.com under /openai/v1/ (an Azure
	// OpenAI resource), https://ai.azure.com under
	// /api/projects/{project}/openai/v1/ (a Foundry project). Anything else
	// gets the gateway's 401. An Authority mints such tokens. Default: none
	// (only APIKey, if set).
	EntraKeys []*rsa.PublicKey

	// RecordTimes keeps, for every response, the time each text token was
	// generated and the times each MCP tool call started and finished, for
	// ResponseRecord.TokenTimes and .ToolCalls (served at GET
	// /_emulator/records). It costs 16 bytes per token: meant for
	// benchmarks (foundryq bench). Default false.
	RecordTimes bool

	// TokensPerMinute, when set, gives the deployments it names (a model,
	// or "agent:" and an agent's name) a quota of tokens per minute, as
	// Azure counts it (quota.go): creates over it answer 429 with
	// retry-after, and every create's answer carries
	// x-ratelimit-remaining-tokens. Default: none (no quota, no headers).
	TokensPerMinute map[string]int

	// QuotaWindow is the window a quota counts in and resets at its end:
	// a minute, as on Azure, unless a test shortens it (the quota is
	// TokensPerMinute scaled to the window). Default 1m.
	QuotaWindow time.Duration

	// Logger receives one line per created, cancelled and finished response.
	// Default: the zero zerolog.Logger, which discards everything.
	Logger zerolog.Logger
}

// Validate reports the first invalid setting, naming it.
func (c Config) Validate() error {
	switch {
	case c.ResumeWindow < 0:
		return fmt.Errorf("foundrytest: ResumeWindow must not be negative, got %s", c.ResumeWindow)
	case c.DefaultTokens < 0 || c.DefaultTokens > MaxScenarioTokens:
		return fmt.Errorf("foundrytest: DefaultTokens must be in [0, %d], got %d", MaxScenarioTokens, c.DefaultTokens)
	case c.DefaultTokenDelay < 0 || c.DefaultTokenDelay > MaxScenarioDelay:
		return fmt.Errorf("foundrytest: DefaultTokenDelay must be in [0, %s], got %s", MaxScenarioDelay, c.DefaultTokenDelay)
	case c.MaxTokens < 0 || c.MaxTokens > MaxScenarioTokens:
		return fmt.Errorf("foundrytest: MaxTokens must be in [0, %d], got %d", MaxScenarioTokens, c.MaxTokens)
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("foundrytest: MaxBodyBytes must not be negative, got %d", c.MaxBodyBytes)
	case c.Retention < 0:
		return fmt.Errorf("foundrytest: Retention must not be negative, got %s", c.Retention)
	case c.KeepaliveInterval < 0 || c.KeepaliveInterval > MaxScenarioDelay:
		return fmt.Errorf("foundrytest: KeepaliveInterval must be in [0, %s], got %s", MaxScenarioDelay, c.KeepaliveInterval)
	}
	if err := c.validateQuota(); err != nil {
		return err
	}
	for i, k := range c.EntraKeys {
		if k == nil {
			return fmt.Errorf("foundrytest: EntraKeys[%d] is nil", i)
		}
	}
	return nil
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.ResumeWindow == 0 {
		c.ResumeWindow = 5 * time.Minute
	}
	if c.DefaultTokens == 0 {
		c.DefaultTokens = 20
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = MaxScenarioTokens
	}
	if c.DefaultTokens > c.MaxTokens {
		c.DefaultTokens = c.MaxTokens
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 8 << 20
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.QuotaWindow == 0 {
		c.QuotaWindow = time.Minute
	}
	if c.KeepaliveInterval == 0 {
		c.KeepaliveInterval = 30 * time.Second
	}
	return c
}
