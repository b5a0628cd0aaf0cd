package foundrytest

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// defaultThrottleRetryAfter is the wait a throttle asks for when none is given.
const defaultThrottleRetryAfter = time.Second

// Throttle makes every create answer 429 for d from now (by Config.Clock),
// as the service does while a deployment is over its quota, asking the
// client to retry after retryAfter (defaultThrottleRetryAfter, 1s, when 0)
// in the retry-after and retry-after-ms headers Azure sends (Microsoft
// Learn, "Azure OpenAI 429: token and request rate limits explained").
// Nothing is created meanwhile; Stats.CreatesThrottled counts the refusals
// and CreateRequests still records the bodies. A d of 0 ends a throttle.
func (h *Handler) Throttle(d, retryAfter time.Duration) {
	if retryAfter <= 0 {
		retryAfter = defaultThrottleRetryAfter
	}
	h.mu.Lock()
	h.throttleUntil = h.cfg.Clock().Add(d)
	h.throttleRetry = retryAfter
	h.mu.Unlock()
}

// throttled returns the 429 to answer while a throttle lasts, else nil.
func (h *Handler) throttled() *apiError {
	h.mu.Lock()
	until, retry := h.throttleUntil, h.throttleRetry
	h.mu.Unlock()
	if !h.cfg.Clock().Before(until) {
		return nil
	}
	return rateLimited(retry)
}

// rateLimited is Azure's 429 for a deployment over its rate limit, with the
// headers that say when to retry.
func rateLimited(retryAfter time.Duration) *apiError {
	secs := int64(math.Ceil(retryAfter.Seconds()))
	if secs < 1 {
		secs = 1
	}
	return &apiError{status: http.StatusTooManyRequests, typ: "requests", code: "rate_limit_exceeded",
		message: fmt.Sprintf("Requests to the Responses_Create Operation under Azure OpenAI API version v1 have exceeded "+
			"token rate limit of your current pricing tier. Please retry after %d second%s. "+
			"Please contact Azure support service if you would like to further increase the default rate limit.", secs, plural(secs)),
		header: http.Header{
			"Retry-After":                    {strconv.FormatInt(secs, 10)},
			"Retry-After-Ms":                 {strconv.FormatInt(max(retryAfter.Milliseconds(), 1), 10)},
			"X-Ratelimit-Remaining-Requests": {"0"},
		}}
}

func plural(n int64) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// throttleState is the reply of the throttle control endpoint.
type throttleState struct {
	Throttled    bool   `json:"throttled"`
	Until        string `json:"until,omitempty"` // RFC 3339
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
}

// handleThrottle serves the throttle control endpoint (no key needed):
//
//	POST   /_emulator/throttle?for=30s&retry_after=2s   throttle creates for 30 s (retry_after default 1s)
//	GET    /_emulator/throttle                          the current state
//	DELETE /_emulator/throttle                          end it
func (h *Handler) handleThrottle(w http.ResponseWriter, req *http.Request) {
	switch req.Method {
	case http.MethodPost:
		q := req.URL.Query()
		d, err := time.ParseDuration(q.Get("for"))
		if err != nil || d < 0 || d > MaxScenarioDelay {
			invalidRequest("for", "invalid_value", "Invalid value for 'for': %q. The emulator expects a duration in [0, %s], e.g. 30s.",
				q.Get("for"), MaxScenarioDelay).write(w)
			return
		}
		retry := defaultThrottleRetryAfter
		if v := q.Get("retry_after"); v != "" {
			if retry, err = time.ParseDuration(v); err != nil || retry < time.Millisecond || retry > MaxScenarioDelay {
				invalidRequest("retry_after", "invalid_value", "Invalid value for 'retry_after': %q. The emulator expects a duration in [1ms, %s].",
					v, MaxScenarioDelay).write(w)
				return
			}
		}
		h.Throttle(d, retry)
	case http.MethodDelete:
		h.Throttle(0, 0)
	}
	h.mu.Lock()
	until, retry := h.throttleUntil, h.throttleRetry
	h.mu.Unlock()
	st := throttleState{}
	if h.cfg.Clock().Before(until) {
		st = throttleState{Throttled: true, Until: until.UTC().Format(time.RFC3339Nano), RetryAfterMS: retry.Milliseconds()}
	}
	writeJSON(w, http.StatusOK, st)
}
