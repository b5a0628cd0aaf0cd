package foundrytest

import (
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestQuota: a deployment's tokens-per-minute count takes each create's
// estimate (prompt at four bytes a token, plus max_output_tokens); a create
// once the count has reached the quota gets 429 with retry-after up to the
// window's end; every answer says the tokens left; the count resets with
// the next window; other deployments have no quota and no headers.
func TestQuota(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 10, 0, 10, 0, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	srv, c := setup(t, Config{TokensPerMinute: map[string]int{"gpt-test": 250}, Clock: clock})
	ctx := testCtx(t)
	create := func(model string) *http.Response {
		body := createBody("q", true, false, map[string]string{"emu_tokens": "3"})
		body["model"] = model
		body["input"] = "12345678" // 2 tokens
		body["max_output_tokens"] = 100
		return do(t, ctx, c, "POST", srv.BaseURL()+"responses", body)
	}
	remaining := func(resp *http.Response) string {
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Header.Get("X-Ratelimit-Remaining-Tokens")
	}
	// "12345678" is 10 bytes as JSON: 3 tokens, plus 100.
	for i, want := range []string{"147", "44", "0"} {
		resp := create("gpt-test")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("create %d: status %d", i, resp.StatusCode)
		}
		if got := remaining(resp); got != want {
			t.Fatalf("create %d: x-ratelimit-remaining-tokens %q, want %q", i, got, want)
		}
	}
	resp := create("gpt-test")
	if got := resp.Header.Get("Retry-After"); got != "50" {
		t.Errorf("429 retry-after %q, want 50 (the window's end)", got)
	}
	if got := resp.Header.Get("X-Ratelimit-Remaining-Tokens"); got != "0" {
		t.Errorf("429 x-ratelimit-remaining-tokens %q, want 0", got)
	}
	apiErr(t, resp, http.StatusTooManyRequests)
	if st := srv.Stats(); st.CreatesOverQuota != 1 || st.CreatesThrottled != 0 {
		t.Errorf("stats: over quota %d, throttled %d; want 1, 0", st.CreatesOverQuota, st.CreatesThrottled)
	}
	other := create("gpt-other")
	if other.StatusCode != http.StatusOK || other.Header.Get("X-Ratelimit-Remaining-Tokens") != "" {
		t.Errorf("deployment without a quota: status %d, headers %v", other.StatusCode, other.Header)
	}
	remaining(other)

	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	resp = create("gpt-test")
	if got := remaining(resp); resp.StatusCode != http.StatusOK || got != "147" {
		t.Errorf("next window: status %d, remaining %q; want 200, 147", resp.StatusCode, got)
	}
	if reset, err := strconv.Atoi(resp.Header.Get("X-Ratelimit-Reset-Tokens")); err != nil || reset != 50 {
		t.Errorf("x-ratelimit-reset-tokens %q, want 50", resp.Header.Get("X-Ratelimit-Reset-Tokens"))
	}
}

func TestQuotaConfigRefused(t *testing.T) {
	for _, c := range []Config{
		{TokensPerMinute: map[string]int{"gpt-test": 0}},
		{TokensPerMinute: map[string]int{"": 10}},
		{QuotaWindow: 2 * time.Minute},
	} {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
