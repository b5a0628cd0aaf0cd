package foundry

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RateLimit is what an answer's x-ratelimit-* headers said about the
// deployment's quota: Azure OpenAI sends x-ratelimit-remaining-tokens and
// x-ratelimit-remaining-requests on its answers (Microsoft Learn, "Manage
// Azure OpenAI in Azure AI Foundry Models quota",
// https://learn.microsoft.com/azure/ai-services/openai/how-to/quota).
// Azure's Responses API has been seen to send -1 there ("Azure OpenAI
// Responses API x-ratelimit headers values -1, 0", Microsoft Q&A): a
// negative or unreadable value counts as absent.
type RateLimit struct {
	RemainingTokens   int64         // -1 when absent
	RemainingRequests int64         // -1 when absent
	ResetTokens       time.Duration // x-ratelimit-reset-tokens; 0 when absent
	ResetRequests     time.Duration // x-ratelimit-reset-requests; 0 when absent
}

// parseRateLimit reads the x-ratelimit-* headers of h.
func parseRateLimit(h http.Header) RateLimit {
	return RateLimit{
		RemainingTokens:   headerCount(h, "X-Ratelimit-Remaining-Tokens"),
		RemainingRequests: headerCount(h, "X-Ratelimit-Remaining-Requests"),
		ResetTokens:       headerWait(h, "X-Ratelimit-Reset-Tokens"),
		ResetRequests:     headerWait(h, "X-Ratelimit-Reset-Requests"),
	}
}

func headerCount(h http.Header, name string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(h.Get(name)), 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// headerWait reads a number of seconds (as Azure sends it) or a duration
// such as "6m0s" (as OpenAI does); 0 if absent or not positive.
func headerWait(h http.Header, name string) time.Duration {
	v := strings.TrimSpace(h.Get(name))
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s > 0 && s < 1e9 {
			return time.Duration(s * float64(time.Second))
		}
		return 0
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return d
	}
	return 0
}

// RateLimit returns what the x-ratelimit-* headers of the answer that
// opened the stream said.
func (s *Stream) RateLimit() RateLimit { return s.rateLimit }
