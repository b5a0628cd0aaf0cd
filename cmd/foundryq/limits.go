package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
)

// limitFlags are the worker's fleet-wide limits: concurrency caps per
// fairness key and token budgets per deployment (consumer/caps.go,
// consumer/budget.go).
type limitFlags struct {
	capPerKey, defaultOutput *int
	caps, tokensPerMinute    *string
	slotLease, capRetry      *time.Duration
}

func addLimitFlags(f *flags) limitFlags {
	var l limitFlags
	l.capPerKey = f.Int("cap-per-key", "FOUNDRYQ_CAP_PER_KEY", 0, "most runs of one fairness key running at once across every worker of the prefix (0: no cap)", atLeast(0))
	l.caps = f.String("cap", "FOUNDRYQ_CAP", "", "per-key --cap-per-key: KEY=N entries separated by commas, e.g. tenant-a=10,batch=2", rule[string]{func(v string) bool {
		_, err := parseNamedCounts(v, events.ValidFairnessKey)
		return err == nil
	}, "KEY=N entries separated by commas (KEY: a fairness key, [A-Za-z0-9_-]{1,64}; N at least 1)"})
	l.slotLease = f.Duration("slot-lease", "FOUNDRYQ_SLOT_LEASE", consumer.DefaultSlotLease, "how long a killed worker's concurrency slots stay held (a live worker renews its slots every third of it)", durAtLeast(time.Second))
	l.capRetry = f.Duration("cap-retry-delay", "FOUNDRYQ_CAP_RETRY_DELAY", time.Second, "delay before a run whose key is at its cap is delivered again (halved for priority high, doubled for low)", durAtLeast(10*time.Millisecond))
	l.tokensPerMinute = f.String("tokens-per-minute", "FOUNDRYQ_TOKENS_PER_MINUTE", "", "fleet-wide token budget per Foundry deployment: DEPLOYMENT=N entries separated by commas (DEPLOYMENT: a model deployment's name, or agent:NAME), e.g. gpt-4o=150000", rule[string]{func(v string) bool {
		_, err := parseNamedCounts(v, validDeployment)
		return err == nil
	}, "DEPLOYMENT=N entries separated by commas (N at least 1)"})
	l.defaultOutput = f.Int("default-output-tokens", "FOUNDRYQ_DEFAULT_OUTPUT_TOKENS", consumer.DefaultOutputTokens, "output tokens a create without max_output_tokens is estimated at for --tokens-per-minute", atLeast(1))
	return l
}

// apply sets the limits on cfg.
func (l limitFlags) apply(cfg *consumer.Config) {
	cfg.CapPerKey = *l.capPerKey
	cfg.Caps = checked(parseNamedCounts(*l.caps, events.ValidFairnessKey))
	cfg.SlotLease = *l.slotLease
	cfg.CapRetryDelay = *l.capRetry
	cfg.TokensPerMinute = checked(parseNamedCounts(*l.tokensPerMinute, validDeployment))
	cfg.DefaultOutputTokens = *l.defaultOutput
}

func validDeployment(name string) bool {
	return strings.TrimPrefix(name, "agent:") != "" && !strings.ContainsAny(name, " ,=")
}

// parseNamedCounts parses NAME=N entries separated by commas (N at least 1);
// nil for "".
func parseNamedCounts(v string, valid func(string) bool) (map[string]int, error) {
	var m map[string]int
	for _, entry := range strings.Split(v, ",") {
		if entry = strings.TrimSpace(entry); entry == "" {
			continue
		}
		name, num, ok := strings.Cut(entry, "=")
		n, err := strconv.Atoi(strings.TrimSpace(num))
		if name = strings.TrimSpace(name); !ok || !valid(name) || err != nil || n < 1 {
			return nil, fmt.Errorf("%q: want NAME=N", entry)
		}
		if m == nil {
			m = make(map[string]int)
		}
		m[name] = n
	}
	return m, nil
}
