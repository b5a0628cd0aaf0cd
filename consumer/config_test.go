package consumer

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/events"
)

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		is   error  // errors.Is; nil for valid
		want string // in the error: the setting and what it accepts
	}{
		{"defaults", Config{}, nil, ""},
		{"concurrency", Config{Concurrency: -1}, ErrInvalidConfig, "concurrency must be at least 1"},
		{"queued timeout", Config{QueuedTimeout: -time.Second}, ErrInvalidConfig, "queued timeout must not be negative"},
		{"store full timeout", Config{StoreFullTimeout: -time.Second}, ErrInvalidConfig, "store full timeout must not be negative"},
		{"poll wait", Config{PollWait: time.Millisecond}, ErrInvalidConfig, "poll wait must be at least 100ms"},
		{"event interval", Config{EventInterval: time.Minute}, ErrInvalidConfig, "event interval must be at most 5s"},
		{"worker id", Config{WorkerID: "a.b"}, ErrInvalidConfig, "worker id \"a.b\" must match [A-Za-z0-9_-]{1,64}"},
		{"event interval off", Config{EventInterval: -1}, nil, ""},
		{"ready check interval", Config{ReadyCheckInterval: -time.Second}, ErrInvalidConfig, "ready check interval must not be negative"},
		{"cancel confirm timeout", Config{CancelConfirmTimeout: -time.Second}, ErrInvalidConfig, "cancel confirm timeout must not be negative"},
		{"retry delay", Config{RetryDelay: -time.Second}, ErrInvalidConfig, "retry delay must not be negative"},
		{"replicas", Config{Provision: ProvisionConfig{Replicas: 7}}, events.ErrInvalidProvisionConfig, "Replicas 7 must be between 1 and 5"},
		{"state ttl under events max age", Config{Provision: ProvisionConfig{StateTTL: time.Hour}}, events.ErrInvalidProvisionConfig, "StateTTL 1h0m0s must be at least EventsMaxAge"},
		{"ack wait", Config{Provision: ProvisionConfig{AckWait: time.Millisecond}}, ErrInvalidConfig, "AckWait 1ms must be at least 1s"},
		{"tool timeout", Config{ToolTimeout: -time.Second}, ErrInvalidConfig, "tool timeout must be positive"},
		{"tool cancel grace", Config{ToolCancelGrace: -time.Second}, ErrInvalidConfig, "tool cancel grace must not be negative"},
		{"tool timeouts name", Config{ToolTimeouts: map[string]time.Duration{"get.weather": time.Second}}, ErrInvalidConfig, `tool name "get.weather" must match [A-Za-z0-9_-]{1,64}`},
		{"tool timeouts value", Config{ToolTimeouts: map[string]time.Duration{"get_weather": 0}}, ErrInvalidConfig, "tool timeouts: get_weather must be positive, got 0s"},
		{"idempotent tools", Config{IdempotentTools: []string{"ok", ""}}, ErrInvalidConfig, `idempotent tools: tool name "" must match`},
		{"tool settings", Config{ToolTimeouts: map[string]time.Duration{"get_weather": time.Second}, IdempotentTools: []string{"get-time"}}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			switch {
			case tc.is == nil && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.is != nil && (!errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one that is %v and says %q", err, tc.is, tc.want)
			}
		})
	}
	if id := (Config{}).withDefaults().WorkerID; !strings.Contains(id, "-") || strings.ContainsAny(id, ". ") {
		t.Fatalf("default worker id %q", id)
	}
}

// A tool's own timeout overrides the worker's; the defaults are 60s and a
// 1s cancel grace.
func TestToolSettings(t *testing.T) {
	c := Config{ToolTimeouts: map[string]time.Duration{"get_weather": 5 * time.Second}, IdempotentTools: []string{"get_time"}}.withDefaults()
	if c.toolTimeout("get_weather") != 5*time.Second || c.toolTimeout("other") != DefaultToolTimeout || DefaultToolTimeout != time.Minute ||
		c.ToolCancelGrace != time.Second {
		t.Fatalf("timeouts %s %s, grace %s", c.toolTimeout("get_weather"), c.toolTimeout("other"), c.ToolCancelGrace)
	}
	if !c.idempotent("get_time") || c.idempotent("get_weather") {
		t.Fatal("idempotent tools")
	}
	for _, tc := range []struct {
		in   string
		n    int
		want string
		cut  bool
	}{{"abc", 3, "abc", false}, {"abcd", 3, "abc", true}, {"aé", 2, "a", true}, {"éé", 3, "é", true}} {
		if got, cut := cutText(tc.in, tc.n); got != tc.want || cut != tc.cut {
			t.Errorf("cutText(%q, %d) = %q, %v", tc.in, tc.n, got, cut)
		}
	}
}
