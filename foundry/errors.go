package foundry

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors. API errors match them through (*APIError).Is, so
// errors.Is(err, ErrNotFound) works on anything this package returns.
var (
	// ErrInvalidConfig is wrapped by every error New returns for a bad Config.
	ErrInvalidConfig = errors.New("foundry: invalid config")
	// ErrInvalidRequest is wrapped by every error Create returns for a bad CreateRequest
	// (nothing was sent).
	ErrInvalidRequest = errors.New("foundry: invalid request")

	// ErrNotFound matches an API error with status 404 (unknown or expired response id).
	ErrNotFound = errors.New("foundry: not found")
	// ErrUnauthorized matches an API error with status 401 (bad key or token).
	ErrUnauthorized = errors.New("foundry: unauthorized")
	// ErrForbidden matches an API error with status 403 (missing role or scope).
	ErrForbidden = errors.New("foundry: forbidden")
	// ErrRateLimited matches an API error with status 429; see APIError.RetryAfter.
	ErrRateLimited = errors.New("foundry: rate limited")
	// ErrServer matches an API error with a 5xx status.
	ErrServer = errors.New("foundry: server error")
	// ErrResumeExpired matches the 400 a resume gets once the response is too old to
	// be streamed again ("can no longer be streamed because it is more than 5 minutes
	// old"). Poll with Get instead.
	ErrResumeExpired = errors.New("foundry: response can no longer be streamed")
	// ErrNotBackground matches the 400 a resume gets for a response that was not
	// created with background=true.
	ErrNotBackground = errors.New("foundry: response was not created in background mode")

	// ErrStreamTruncated is reported by Stream.Err when the stream ended (clean EOF,
	// [DONE] or a network error, which is wrapped too) before a terminal event.
	// Resume from Stream.LastSeq, or poll with Get.
	ErrStreamTruncated = errors.New("foundry: stream ended without a terminal event")
	// ErrMalformedEvent is reported by Stream.Err when an event's data is not the
	// JSON it should be.
	ErrMalformedEvent = errors.New("foundry: malformed stream event")
	// ErrLineTooLong is reported by Stream.Err when one SSE line exceeds MaxLineSize.
	ErrLineTooLong = errors.New("foundry: stream line too long")
	// ErrNotStreaming is returned by Create and Resume when the server answered
	// with something other than text/event-stream (e.g. a JSON object, which is what
	// a GET without stream=true in the query returns).
	ErrNotStreaming = errors.New("foundry: response is not an event stream")
)

// APIError is an error reported by the Responses API: an HTTP status >= 400, or an
// {"error": {...}} frame inside a stream (StatusCode 0). It keeps the server's
// code and message, which openai-go's own error string drops.
type APIError struct {
	Op         string        // what was being done: create, resume, get, cancel, stream
	ResponseID string        // the response concerned, if known
	StatusCode int           // HTTP status; 0 for an error frame inside a stream
	Code       string        // error.code, e.g. "rate_limit_exceeded"
	Type       string        // error.type, e.g. "invalid_request_error"
	Param      string        // error.param
	Message    string        // error.message (or the body text when it was not JSON)
	RetryAfter time.Duration // from Retry-After-Ms or Retry-After; 0 if absent
}

// Error formats "foundry: <op> <id>: <status> <code>: <message>", leaving out
// the parts that are empty.
func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString("foundry: ")
	b.WriteString(e.Op)
	if e.ResponseID != "" {
		b.WriteByte(' ')
		b.WriteString(e.ResponseID)
	}
	b.WriteString(":")
	if e.StatusCode != 0 {
		b.WriteByte(' ')
		b.WriteString(strconv.Itoa(e.StatusCode))
	}
	if e.Code != "" {
		b.WriteByte(' ')
		b.WriteString(e.Code)
	}
	if e.StatusCode == 0 && e.Code == "" {
		b.WriteString(" error")
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Is reports whether the error matches one of the package's sentinels.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.StatusCode == http.StatusNotFound
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized
	case ErrForbidden:
		return e.StatusCode == http.StatusForbidden
	case ErrRateLimited:
		return e.StatusCode == http.StatusTooManyRequests
	case ErrServer:
		return e.StatusCode >= 500
	case ErrResumeExpired:
		m := strings.ToLower(e.Message)
		return e.StatusCode == http.StatusBadRequest &&
			(strings.Contains(m, "no longer be streamed") || strings.Contains(m, "minutes old"))
	case ErrNotBackground:
		return e.StatusCode == http.StatusBadRequest && strings.Contains(strings.ToLower(e.Message), "not created with background")
	}
	return false
}

// Retryable reports whether repeating the same request may succeed (408, 409, 429,
// 5xx). It says nothing about whether repeating it is safe: a create that failed
// with a 5xx may still have started a run.
func (e *APIError) Retryable() bool {
	switch {
	case e.StatusCode == http.StatusRequestTimeout, e.StatusCode == http.StatusConflict,
		e.StatusCode == http.StatusTooManyRequests, e.StatusCode >= 500:
		return true
	}
	return false
}

// maxErrorBody bounds how much of a non-JSON error body ends up in a message.
const maxErrorBody = 1 << 10

// wireError is the {"code","message","type","param"} object of an error body.
type wireError struct {
	Code    flexString `json:"code"`
	Message string     `json:"message"`
	Type    string     `json:"type"`
	Param   flexString `json:"param"`
}

// newAPIError builds an APIError from an HTTP error response. It reads at most
// 1 MiB of the body and does not close it.
func newAPIError(op, id string, res *http.Response) *APIError {
	e := &APIError{Op: op, ResponseID: id, StatusCode: res.StatusCode, RetryAfter: parseRetryAfter(res.Header, time.Now())}
	var body []byte
	if res.Body != nil {
		body, _ = io.ReadAll(io.LimitReader(res.Body, 1<<20))
	}
	var env struct {
		Error *wireError `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err == nil && env.Error != nil {
		e.Code, e.Message, e.Type, e.Param = string(env.Error.Code), env.Error.Message, env.Error.Type, string(env.Error.Param)
		return e
	}
	msg := string(bytes.TrimSpace(body))
	if len(msg) > maxErrorBody {
		msg = msg[:maxErrorBody] + "…"
	}
	if msg == "" {
		msg = http.StatusText(res.StatusCode)
	}
	e.Message = msg
	return e
}

// parseRetryAfter reads Retry-After-Ms, then Retry-After (seconds or an HTTP date).
func parseRetryAfter(h http.Header, now time.Time) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && ms < 1e12 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s < 0 || s > 1e9 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// flexString decodes a JSON string, number or bool into its text; null leaves it
// empty. Error codes are documented as "string or null" but not every server agrees.
type flexString string

func (f *flexString) UnmarshalJSON(data []byte) error {
	if len(data) == 0 || string(data) == "null" {
		return nil
	}
	if data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*f = flexString(s)
		return nil
	}
	if data[0] == '{' || data[0] == '[' {
		*f = flexString(data)
		return nil
	}
	*f = flexString(data)
	return nil
}
