package foundry

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestAPIErrorMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  *APIError
		want string
	}{
		{&APIError{Op: "get", ResponseID: "resp_1", StatusCode: 404, Code: "not_found", Message: "No response found"}, "foundry: get resp_1: 404 not_found: No response found"},
		{&APIError{Op: "create", StatusCode: 500, Message: "boom"}, "foundry: create: 500: boom"},
		{&APIError{Op: "stream", ResponseID: "resp_2", Code: "server_error", Message: "oops"}, "foundry: stream resp_2: server_error: oops"},
		{&APIError{Op: "stream", Message: "oops"}, "foundry: stream: error: oops"},
		{&APIError{Op: "create", StatusCode: 400, Code: "invalid_payload", Param: "tools", Message: "Not allowed when agent is specified."},
			"foundry: create: 400 invalid_payload: tools: Not allowed when agent is specified."},
		{&APIError{Op: "create", StatusCode: 400, Code: "invalid_payload", Message: "Invalid payload", Details: []ErrorDetail{
			{Code: "ValidationError", Param: "temperature", Message: "Not allowed when agent is specified."},
			{Param: "/input/2/status", Message: "Value is 'null' but should be 'string'"},
			{Message: "no param"},
		}}, "foundry: create: 400 invalid_payload: Invalid payload (temperature: Not allowed when agent is specified.; " +
			"/input/2/status: Value is 'null' but should be 'string'; no param)"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestAPIErrorIs(t *testing.T) {
	t.Parallel()
	all := []error{ErrNotFound, ErrUnauthorized, ErrForbidden, ErrRateLimited, ErrServer, ErrResumeExpired, ErrNotBackground, ErrStreamingNotEnabled}
	tests := []struct {
		status int
		msg    string
		want   error
	}{
		{404, "", ErrNotFound},
		{401, "", ErrUnauthorized},
		{403, "", ErrForbidden},
		{429, "", ErrRateLimited},
		{500, "", ErrServer},
		{502, "", ErrServer},
		{400, "This response can no longer be streamed because it is more than 5 minutes old.", ErrResumeExpired},
		{400, "This response cannot be streamed because it was not created with background=true.", ErrNotBackground},
		{400, "Streaming is not enabled for this response", ErrStreamingNotEnabled},
		{400, "Invalid value for 'model'.", nil},
	}
	for _, tt := range tests {
		err := fmt.Errorf("wrapped: %w", &APIError{Op: "x", StatusCode: tt.status, Message: tt.msg})
		for _, s := range all {
			if got := errors.Is(err, s); got != (s == tt.want) {
				t.Errorf("status %d %q: errors.Is(%v) = %v", tt.status, tt.msg, s, got)
			}
		}
	}
}

func TestNewAPIError(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func(status int, body string, h http.Header) *APIError {
		if h == nil {
			h = http.Header{}
		}
		return newAPIError("get", "resp_1", &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body))})
	}
	e := mk(429, `{"error":{"code":429,"message":"Rate limit","type":"requests","param":null}}`, http.Header{"Retry-After": {"7"}})
	if e.Code != "429" || e.Message != "Rate limit" || e.Type != "requests" || e.RetryAfter != 7*time.Second {
		t.Errorf("numeric code / Retry-After: %+v", e)
	}
	if e := mk(502, "<html>Bad Gateway</html>", nil); e.Message != "<html>Bad Gateway</html>" {
		t.Errorf("non-JSON body: %+v", e)
	}
	if e := mk(503, "", nil); e.Message != "Service Unavailable" {
		t.Errorf("empty body: %+v", e)
	}
	if e := mk(500, strings.Repeat("x", 5000), nil); len(e.Message) > maxErrorBody+10 {
		t.Errorf("long body not truncated: %d", len(e.Message))
	}
	if d := parseRetryAfter(http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"9"}}, now); d != 250*time.Millisecond {
		t.Errorf("Retry-After-Ms = %v", d)
	}
	if d := parseRetryAfter(http.Header{"Retry-After": {now.Add(30 * time.Second).Format(http.TimeFormat)}}, now); d != 30*time.Second {
		t.Errorf("Retry-After date = %v", d)
	}
	if d := parseRetryAfter(http.Header{"Retry-After": {"soon"}}, now); d != 0 {
		t.Errorf("Retry-After garbage = %v", d)
	}
	if !(&APIError{StatusCode: 503}).Retryable() || (&APIError{StatusCode: 400}).Retryable() {
		t.Error("Retryable wrong")
	}

	// Foundry's invalid_payload carries details[{message, param}] (and more).
	e = mk(400, `{"error":{"code":"invalid_payload","message":"Invalid payload","param":null,"type":"invalid_request_error",
		"details":[{"code":"ValidationError","message":"Not allowed when agent is specified.","param":"temperature","type":"error"},
		{"message":"Value is 'null' but should be 'string'","param":"/input/2/status"}],"additionalInfo":{"request_id":"abc"}}}`, nil)
	want := []ErrorDetail{{Code: "ValidationError", Message: "Not allowed when agent is specified.", Param: "temperature"},
		{Message: "Value is 'null' but should be 'string'", Param: "/input/2/status"}}
	if e.Code != "invalid_payload" || len(e.Details) != 2 || e.Details[0] != want[0] || e.Details[1] != want[1] {
		t.Errorf("details: %+v", e)
	}
	if !strings.Contains(e.Error(), "temperature: Not allowed") || !strings.Contains(e.Error(), "/input/2/status") {
		t.Errorf("Error() drops the details: %q", e.Error())
	}
	// Hostile details are bounded.
	many := `{"error":{"message":"m","details":[` + strings.TrimSuffix(strings.Repeat(`{"message":"x","param":"p"},`, 500), ",") + `]}}`
	if e := mk(400, many, nil); len(e.Details) > maxErrorDetails {
		t.Errorf("%d details kept", len(e.Details))
	}

	// The Azure gateway answers auth failures with {"statusCode","message"}.
	e = mk(401, `{ "statusCode": 401, "message": "Unauthorized. Access token is missing, invalid, audience is incorrect (https://cognitiveservices.azure.com), or have expired." }`, nil)
	if !strings.HasPrefix(e.Message, "Unauthorized. Access token is missing") || !errors.Is(e, ErrAuth) {
		t.Errorf("gateway body: %+v", e)
	}

	// Azure sends retry-after and retry-after-ms; x-ratelimit-reset-* is a
	// fallback for a 429 without them.
	if d := parseRetryAfter(http.Header{"Retry-After-Ms": {"1500.5"}}, now); d != 1500500*time.Microsecond {
		t.Errorf("fractional Retry-After-Ms = %v", d)
	}
	e = mk(429, `{"error":{"code":"429","message":"Rate limit"}}`, http.Header{"X-Ratelimit-Reset-Requests": {"2"}, "X-Ratelimit-Reset-Tokens": {"6"}})
	if e.RetryAfter != 6*time.Second {
		t.Errorf("x-ratelimit-reset fallback = %v, want the longer 6s", e.RetryAfter)
	}
	e = mk(429, `{}`, http.Header{"X-Ratelimit-Reset-Tokens": {"1m30s"}, "X-Ratelimit-Reset-Requests": {"20ms"}})
	if e.RetryAfter != 90*time.Second {
		t.Errorf("x-ratelimit-reset durations = %v", e.RetryAfter)
	}
	e = mk(429, `{}`, http.Header{"Retry-After": {"3"}, "X-Ratelimit-Reset-Tokens": {"60"}})
	if e.RetryAfter != 3*time.Second {
		t.Errorf("Retry-After must win over x-ratelimit-reset: %v", e.RetryAfter)
	}
	if e := mk(400, `{}`, http.Header{"X-Ratelimit-Reset-Tokens": {"60"}}); e.RetryAfter != 0 {
		t.Errorf("x-ratelimit-reset used on a 400: %v", e.RetryAfter)
	}
	if e := mk(429, `{}`, http.Header{"X-Ratelimit-Reset-Tokens": {"-1"}, "X-Ratelimit-Reset-Requests": {"0"}}); e.RetryAfter != 0 {
		t.Errorf("x-ratelimit-reset -1/0 (seen on Azure's Responses API) = %v", e.RetryAfter)
	}
}

func TestErrAuth(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]bool{401: true, 403: true, 400: false, 404: false, 429: false, 500: false} {
		if got := errors.Is(&APIError{StatusCode: status}, ErrAuth); got != want {
			t.Errorf("status %d: errors.Is(ErrAuth) = %v", status, got)
		}
	}
	if errors.Is(fmt.Errorf("dial: %w", io.ErrUnexpectedEOF), ErrAuth) {
		t.Error("a network error matches ErrAuth")
	}
}

func TestResponseErrorRetryable(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]bool{
		"server_error": true, "rate_limit_exceeded": true,
		"invalid_prompt": false, "vector_store_timeout": false, "bio_policy": false, "invalid_image": false, "": false,
	} {
		if got := (&ResponseError{Code: code}).Retryable(); got != want {
			t.Errorf("%q: Retryable = %v, want %v", code, got, want)
		}
	}
	var nilErr *ResponseError
	if nilErr.Retryable() {
		t.Error("nil ResponseError is retryable")
	}
}

func TestNotYetVisible(t *testing.T) {
	t.Parallel()
	nf := fmt.Errorf("get: %w", &APIError{Op: "get", StatusCode: 404})
	if !NotYetVisible(nf, 10*time.Second) || !NotYetVisible(nf, NotFoundGrace-time.Millisecond) {
		t.Error("a 404 soon after the id was seen is not 'not yet'")
	}
	if NotYetVisible(nf, NotFoundGrace) || NotYetVisible(&APIError{StatusCode: 400}, time.Second) || NotYetVisible(nil, 0) {
		t.Error("NotYetVisible too broad")
	}
}
