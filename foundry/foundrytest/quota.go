package foundrytest

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// A deployment's tokens-per-minute quota (Config.TokensPerMinute), as
// Azure OpenAI enforces it (Microsoft Learn, "Manage Azure OpenAI in Azure
// AI Foundry Models quota", Understanding rate limits,
// https://learn.microsoft.com/azure/ai-services/openai/how-to/quota): as
// each request is received, an estimate of its tokens (the prompt's, plus
// max_tokens) is added to a running count of the deployment that is reset
// each minute; once the count has reached the quota, further requests get
// 429 until it is reset. Answers carry x-ratelimit-remaining-tokens (the
// page's "Rate limit headers" lists it with x-ratelimit-remaining-requests;
// this quota limits tokens only, so only the tokens headers are sent) and
// a 429 carries retry-after and retry-after-ms (Microsoft Learn, "Azure
// OpenAI 429: token and request rate limits explained").

// quotaState is the running count of each deployment with a quota.
type quotaState struct {
	mu     sync.Mutex
	counts map[string]*quotaCount
}

type quotaCount struct {
	start time.Time // the window it counts
	used  int64
}

// quotaDeployment names the deployment a create counts against: its
// model, or "agent:" and the agent's name.
func quotaDeployment(cr *createRequest) string {
	if cr.agentField != "" {
		return "agent:" + cr.agentName
	}
	return cr.model
}

// quotaCost is the estimate a create is counted for: its prompt at four
// bytes a token, plus max_output_tokens or, without it, the tokens the
// emulator will generate.
func quotaCost(cr *createRequest, sc scenario) int64 {
	prompt := len(cr.input)
	if cr.instructions != nil {
		prompt += len(*cr.instructions)
	}
	out := cr.maxOutput
	if out == 0 {
		out = sc.tokens
	}
	return int64((prompt+3)/4 + out)
}

// chargeQuota counts a create against its deployment's quota. It returns
// the headers to send with the answer, or the 429 to answer instead; both
// nil for a deployment without a quota.
func (h *Handler) chargeQuota(cr *createRequest, sc scenario) (http.Header, *apiError) {
	dep := quotaDeployment(cr)
	perMinute := h.cfg.TokensPerMinute[dep]
	if perMinute <= 0 {
		return nil, nil
	}
	win := h.cfg.QuotaWindow
	limit := max(int64(float64(perMinute)*win.Seconds()/60), 1)
	now := h.cfg.Clock()
	start := now.Truncate(win)
	reset := start.Add(win).Sub(now)

	q := &h.quota
	q.mu.Lock()
	if q.counts == nil {
		q.counts = make(map[string]*quotaCount)
	}
	c := q.counts[dep]
	if c == nil || !c.start.Equal(start) {
		c = &quotaCount{start: start}
		q.counts[dep] = c
	}
	over := c.used >= limit
	if !over {
		c.used += quotaCost(cr, sc)
	}
	remaining := max(limit-c.used, 0)
	q.mu.Unlock()

	header := http.Header{
		"X-Ratelimit-Limit-Tokens":     {strconv.FormatInt(limit, 10)},
		"X-Ratelimit-Remaining-Tokens": {strconv.FormatInt(remaining, 10)},
		"X-Ratelimit-Reset-Tokens":     {strconv.FormatInt(int64(math.Ceil(reset.Seconds())), 10)},
	}
	if !over {
		return header, nil
	}
	e := rateLimited(reset)
	delete(e.header, "X-Ratelimit-Remaining-Requests") // this quota counts tokens
	for k, v := range header {
		e.header[k] = v
	}
	return nil, e
}

// validateQuota checks Config.TokensPerMinute and QuotaWindow.
func (c Config) validateQuota() error {
	for dep, n := range c.TokensPerMinute {
		if dep == "" || n < 1 {
			return fmt.Errorf("foundrytest: TokensPerMinute[%q] = %d: want a deployment name and at least 1", dep, n)
		}
	}
	if c.QuotaWindow < 0 || c.QuotaWindow > time.Minute {
		return fmt.Errorf("foundrytest: QuotaWindow must be in [0, 1m], got %s", c.QuotaWindow)
	}
	return nil
}
