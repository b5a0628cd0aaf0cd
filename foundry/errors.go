package foundry

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"sort"
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
	// ErrStreamingNotEnabled matches the 400 "Streaming is not enabled for this
	// response" that a resume of a Foundry hosted agent's response gets: hosted
	// agents drop background=true (the response reports background false), so
	// their responses can be neither resumed nor cancelled
	// (Azure/azure-sdk-for-python#46015).
	ErrStreamingNotEnabled = errors.New("foundry: streaming is not enabled for this response")
	// ErrAuth matches authentication and authorization failures: an API error
	// with status 401 or 403, and a failure to get an Entra ID token from the
	// credential. Repeating the call will not help until the credential or the
	// role assignment is fixed; it is not a network error.
	ErrAuth = errors.New("foundry: authentication failed")
	// ErrDeploymentNotFound matches Azure's 404 DeploymentNotFound ("The API
	// deployment for this resource does not exist"; MicrosoftDocs/azure-docs
	// #114013): the model deployment a create names does not exist on the
	// resource. It matches ErrNotFound too; the 404 of an unknown response
	// id does not match it.
	ErrDeploymentNotFound = errors.New("foundry: deployment not found")

	// ErrHostNotFound wraps a call whose endpoint host name does not resolve
	// (a *net.DNSError with IsNotFound: NXDOMAIN, "no such host"). Nothing
	// was sent; repeating the call will not help until the endpoint is
	// fixed. A DNS failure that is not "not found" (a resolver timeout) does
	// not match it.
	ErrHostNotFound = errors.New("foundry: endpoint host not found")
	// ErrTLSVerification wraps a call whose TLS handshake failed because the
	// server's certificate could not be verified (unknown authority, wrong
	// host name, expired: tls.CertificateVerificationError and the x509
	// errors it carries). Nothing was sent.
	ErrTLSVerification = errors.New("foundry: TLS certificate verification failed")

	// ErrStreamTruncated is reported by Stream.Err when the stream ended (clean EOF,
	// [DONE] or a network error, which is wrapped too) before a terminal event.
	// Resume from Stream.LastSeq, or poll with Get.
	ErrStreamTruncated = errors.New("foundry: stream ended without a terminal event")
	// ErrStreamIdle is reported by Stream.Err when the stream received nothing
	// at all, not even a keepalive, for Config.StreamIdleTimeout: a response
	// can stay queued or go silent with its connection open ("Background:
	// true, stream: true Response can be stuck in queued after a near-instant
	// client disconnect", OpenAI developer community). The body is closed;
	// the message says how long the stream was silent. It does not match
	// ErrStreamTruncated: Get tells whether the response is still alive.
	ErrStreamIdle = errors.New("foundry: stream idle")
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
	Op         string // what was being done: create, resume, get, cancel, stream
	ResponseID string // the response concerned, if known
	StatusCode int    // HTTP status; 0 for an error frame inside a stream
	Code       string // error.code, e.g. "rate_limit_exceeded"
	Type       string // error.type, e.g. "invalid_request_error"
	Param      string // error.param
	Message    string // error.message (or the body text when it was not JSON)
	// Details are Foundry's error.details: one entry per field refused, e.g.
	// {Param: "temperature", Message: "Not allowed when agent is specified."}
	// under an "Invalid payload" message (at most maxErrorDetails are kept).
	Details []ErrorDetail
	// RetryAfter is the wait the server asked for: Retry-After-Ms, else
	// Retry-After (seconds or a date), else, on a 429 only, the longer of
	// x-ratelimit-reset-requests and x-ratelimit-reset-tokens; 0 if none.
	RetryAfter time.Duration
	// RequestID is the x-request-id header of the answer (or of the answer
	// that opened the stream), and APIMRequestID its apim-request-id: what
	// Azure support asks for (Microsoft Q&A "X-Request-Id"; OpenAI API
	// reference, "Debugging requests"). Empty when the server sent none.
	RequestID     string
	APIMRequestID string
	// Inner is Azure's error.innererror, e.g. {code:
	// "ResponsibleAIPolicyViolation", content_filter_result: {...}} on a
	// prompt the content filter refused (openai/openai-dotnet#55); nil if
	// absent.
	Inner *InnerError
	// ShouldRetry is the server's x-should-retry header: "true" or "false"
	// overrides the status in Retryable, as openai-go does
	// (internal/requestconfig/requestconfig.go); empty if absent.
	ShouldRetry string
}

// InnerError is Azure's error.innererror.
type InnerError struct {
	Code string // e.g. "ResponsibleAIPolicyViolation"
	// ContentFilter lists the content filter categories that filtered the
	// request (filtered: true), in name order.
	ContentFilter []FilterCategory
}

// FilterCategory is one content filter category that filtered a request
// or a response: {"violence": {"filtered": true, "severity": "medium"}}.
type FilterCategory struct {
	Name     string // hate, sexual, violence, self_harm, jailbreak, ...
	Severity string // safe, low, medium, high; empty for detectors without one
}

// FilterSummary formats categories as "violence: medium, hate: high" for
// a message; "" for none.
func FilterSummary(cats []FilterCategory) string {
	parts := make([]string, 0, len(cats))
	for _, c := range cats {
		if c.Severity != "" {
			parts = append(parts, c.Name+": "+c.Severity)
		} else {
			parts = append(parts, c.Name)
		}
	}
	return strings.Join(parts, ", ")
}

// RequestIDOf returns the x-request-id (else the apim-request-id) carried
// by an *APIError in err's chain; "" if none.
func RequestIDOf(err error) string {
	var e *APIError
	if !errors.As(err, &e) {
		return ""
	}
	if e.RequestID != "" {
		return e.RequestID
	}
	return e.APIMRequestID
}

// ErrorDetail is one entry of an error's details list.
type ErrorDetail struct {
	Code    string // e.g. "ValidationError"; often empty
	Param   string // the field, as a name ("tools") or a JSON pointer ("/input/2/status")
	Message string
}

// maxErrorDetails bounds the details kept from one error body.
const maxErrorDetails = 32

// Error formats "foundry: <op> <id>: <status> <code>: <param>: <message>
// (<detail param>: <detail message>; ...)", leaving out the parts that are
// empty, so that a user sees which field was wrong.
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
	if e.Param != "" && len(e.Details) == 0 {
		b.WriteString(": ")
		b.WriteString(e.Param)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if len(e.Details) > 0 {
		b.WriteString(" (")
		for i, d := range e.Details {
			if i > 0 {
				b.WriteString("; ")
			}
			if d.Param != "" {
				b.WriteString(d.Param)
				b.WriteString(": ")
			}
			b.WriteString(d.Message)
		}
		b.WriteString(")")
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
	case ErrStreamingNotEnabled:
		return e.StatusCode == http.StatusBadRequest && strings.Contains(strings.ToLower(e.Message), "streaming is not enabled")
	case ErrAuth:
		return e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden
	case ErrDeploymentNotFound:
		return e.StatusCode == http.StatusNotFound && strings.EqualFold(e.Code, "DeploymentNotFound")
	}
	return false
}

// Retryable reports whether repeating the same request may succeed (408, 409, 429,
// 5xx), unless the server said otherwise with x-should-retry. It says nothing
// about whether repeating it is safe: a create that failed with a 5xx may
// still have started a run.
func (e *APIError) Retryable() bool {
	switch e.ShouldRetry {
	case "true":
		return true
	case "false":
		return false
	}
	switch {
	case e.StatusCode == http.StatusRequestTimeout, e.StatusCode == http.StatusConflict,
		e.StatusCode == http.StatusTooManyRequests, e.StatusCode >= 500:
		return true
	}
	return false
}

// notSent classifies a transport error after which nothing reached the
// server and repeating the call will not help: a host name that does not
// resolve (ErrHostNotFound) or a server certificate that cannot be
// verified (ErrTLSVerification). It returns nil for any other error.
func notSent(err error) error {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return ErrHostNotFound
	}
	var verr *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	if errors.As(err, &verr) || errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid) {
		return ErrTLSVerification
	}
	return nil
}

// maxErrorBody bounds how much of a non-JSON error body ends up in a message.
const maxErrorBody = 1 << 10

// wireError is the {"code","message","type","param","details"} object of an
// error body.
type wireError struct {
	Code       flexString        `json:"code"`
	Message    string            `json:"message"`
	Type       string            `json:"type"`
	Param      flexString        `json:"param"`
	Details    []wireErrorDetail `json:"details"`
	InnerError *wireInnerError   `json:"innererror"`
}

// wireInnerError is Azure's innererror object.
type wireInnerError struct {
	Code                flexString                 `json:"code"`
	ContentFilterResult map[string]json.RawMessage `json:"content_filter_result"`
}

// maxFilterCategories bounds the categories kept from one innererror.
const maxFilterCategories = 32

func (w *wireInnerError) inner() *InnerError {
	if w == nil {
		return nil
	}
	return &InnerError{Code: string(w.Code), ContentFilter: filteredCategories(w.ContentFilterResult)}
}

// filteredCategories returns the categories of a content_filter_result
// whose filtered is true, in name order. Entries of another shape are
// skipped.
func filteredCategories(result map[string]json.RawMessage) []FilterCategory {
	var out []FilterCategory
	for name, raw := range result {
		var c struct {
			Filtered bool       `json:"filtered"`
			Severity flexString `json:"severity"`
		}
		if json.Unmarshal(raw, &c) != nil || !c.Filtered {
			continue
		}
		out = append(out, FilterCategory{Name: name, Severity: string(c.Severity)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out[:min(len(out), maxFilterCategories)]
}

type wireErrorDetail struct {
	Code    flexString `json:"code"`
	Message string     `json:"message"`
	Param   flexString `json:"param"`
}

func (w *wireError) details() []ErrorDetail {
	if len(w.Details) == 0 {
		return nil
	}
	n := min(len(w.Details), maxErrorDetails)
	out := make([]ErrorDetail, n)
	for i := range out {
		d := w.Details[i]
		out[i] = ErrorDetail{Code: string(d.Code), Param: string(d.Param), Message: d.Message}
	}
	return out
}

// newAPIError builds an APIError from an HTTP error response. It reads at most
// 1 MiB of the body and does not close it.
func newAPIError(op, id string, res *http.Response) *APIError {
	e := &APIError{Op: op, ResponseID: id, StatusCode: res.StatusCode, RetryAfter: parseRetryAfter(res.Header, time.Now()),
		RequestID: res.Header.Get("X-Request-Id"), APIMRequestID: res.Header.Get("Apim-Request-Id"),
		ShouldRetry: strings.ToLower(strings.TrimSpace(res.Header.Get("X-Should-Retry")))}
	if e.RetryAfter == 0 && res.StatusCode == http.StatusTooManyRequests {
		e.RetryAfter = parseRateLimitReset(res.Header)
	}
	var body []byte
	if res.Body != nil {
		body, _ = io.ReadAll(io.LimitReader(res.Body, 1<<20))
	}
	var env struct {
		Error *wireError `json:"error"`
		// The Azure API gateway answers some failures (an Entra ID token for
		// the wrong audience or expired) with {"statusCode": 401, "message"}.
		StatusCode json.RawMessage `json:"statusCode"`
		Message    string          `json:"message"`
	}
	if err := json.Unmarshal(body, &env); err == nil && env.Error != nil {
		e.Code, e.Message, e.Type, e.Param = string(env.Error.Code), env.Error.Message, env.Error.Type, string(env.Error.Param)
		e.Details = env.Error.details()
		e.Inner = env.Error.InnerError.inner()
		return e
	} else if err == nil && env.Message != "" && len(env.StatusCode) > 0 {
		e.Message = truncateText(env.Message)
		return e
	}
	msg := truncateText(string(bytes.TrimSpace(body)))
	if msg == "" {
		msg = http.StatusText(res.StatusCode)
	}
	e.Message = msg
	return e
}

func truncateText(msg string) string {
	if len(msg) > maxErrorBody {
		return msg[:maxErrorBody] + "…"
	}
	return msg
}

// parseRateLimitReset reads x-ratelimit-reset-requests and
// x-ratelimit-reset-tokens (a number of seconds, as Azure sends them, or a
// duration such as "6m0s" or "20ms", as OpenAI does) and returns the longer
// wait: the fallback for a 429 without Retry-After. Azure's Responses API
// has been seen to send -1 and 0 there and no Retry-After (Microsoft Q&A
// "Azure OpenAI Responses API x-ratelimit headers values -1, 0"); those
// count as absent.
func parseRateLimitReset(h http.Header) time.Duration {
	var longest time.Duration
	for _, name := range []string{"X-Ratelimit-Reset-Requests", "X-Ratelimit-Reset-Tokens"} {
		v := strings.TrimSpace(h.Get(name))
		if v == "" {
			continue
		}
		var d time.Duration
		if s, err := strconv.ParseFloat(v, 64); err == nil {
			if s > 0 && s < 1e9 {
				d = time.Duration(s * float64(time.Second))
			}
		} else if pd, err := time.ParseDuration(v); err == nil && pd > 0 {
			d = pd
		}
		longest = max(longest, d)
	}
	return longest
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
