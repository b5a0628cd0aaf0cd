package foundry

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRateLimit(t *testing.T) {
	h := http.Header{}
	h.Set("x-ratelimit-remaining-tokens", "4500")
	h.Set("x-ratelimit-remaining-requests", "0")
	h.Set("x-ratelimit-reset-tokens", "12")
	h.Set("x-ratelimit-reset-requests", "6m0s")
	got := parseRateLimit(h)
	want := RateLimit{RemainingTokens: 4500, RemainingRequests: 0, ResetTokens: 12 * time.Second, ResetRequests: 6 * time.Minute}
	if got != want {
		t.Fatalf("%+v, want %+v", got, want)
	}
	// Azure's Responses API has sent -1; absent headers are absent.
	h = http.Header{}
	h.Set("x-ratelimit-remaining-tokens", "-1")
	h.Set("x-ratelimit-reset-tokens", "-1")
	if got := parseRateLimit(h); got != (RateLimit{RemainingTokens: -1, RemainingRequests: -1}) {
		t.Fatalf("%+v: want all absent", got)
	}
}
