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
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestAPIErrorIs(t *testing.T) {
	t.Parallel()
	all := []error{ErrNotFound, ErrUnauthorized, ErrForbidden, ErrRateLimited, ErrServer, ErrResumeExpired, ErrNotBackground}
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
}
