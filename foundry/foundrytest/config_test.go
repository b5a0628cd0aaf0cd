package foundrytest

import (
	"crypto/rsa"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" valid, else a word the error names
	}{
		{"zero", Config{}, ""},
		{"negative window", Config{ResumeWindow: -time.Second}, "ResumeWindow"},
		{"negative tokens", Config{DefaultTokens: -1}, "DefaultTokens"},
		{"too many tokens", Config{DefaultTokens: MaxScenarioTokens + 1}, "DefaultTokens"},
		{"negative delay", Config{DefaultTokenDelay: -1}, "DefaultTokenDelay"},
		{"negative max tokens", Config{MaxTokens: -1}, "MaxTokens"},
		{"negative body", Config{MaxBodyBytes: -1}, "MaxBodyBytes"},
		{"negative retention", Config{Retention: -1}, "Retention"},
		{"negative keepalive", Config{KeepaliveInterval: -1}, "KeepaliveInterval"},
		{"nil Entra key", Config{EntraKeys: make([]*rsa.PublicKey, 1)}, "EntraKeys"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v should name %s", tc.name, err, tc.want)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := Config{}.withDefaults()
	if c.ResumeWindow != 5*time.Minute || c.DefaultTokens != 20 || c.MaxTokens != MaxScenarioTokens ||
		c.MaxBodyBytes != 8<<20 || c.Clock == nil || c.DefaultTokenDelay != 0 || c.Retention != 0 {
		t.Fatalf("defaults: %+v", c)
	}
	if c := (Config{DefaultTokens: 50, MaxTokens: 10}).withDefaults(); c.DefaultTokens != 10 {
		t.Fatalf("DefaultTokens %d not capped by MaxTokens", c.DefaultTokens)
	}
}
