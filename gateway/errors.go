package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// Error codes of the gateway's JSON error object (APIError.Code).
const (
	CodeInvalidRequest   = "invalid_request"        // 400: the run request breaks a rule; field and reason say which
	CodeBadParameter     = "bad_parameter"          // 400: a query parameter, header or path value is wrong; field names it
	CodeUnauthorized     = "unauthorized"           // 401: no bearer token, or an unknown one
	CodeForbidden        = "forbidden"              // 403: CORS origin not allowed, an unsafe method from another origin, a host name not served, or NATS refused the tenant the operation
	CodeNotFound         = "not_found"              // 404: no such run (for this tenant), or no such route
	CodeMethodNotAllowed = "method_not_allowed"     // 405: the route exists for other methods (see the Allow header)
	CodeRequestTimeout   = "request_timeout"        // 408: the body did not arrive within Config.ReadTimeout
	CodeRunIDUsed        = "run_id_used"            // 409: the run id belongs to a run with a different request
	CodeRunQueued        = "run_queued"             // 409: a request with this run id is still waiting in the queue
	CodeCallbackConflict = "callback_conflict"      // 409: the run was created with another callback_url
	CodeRunFinished      = "run_finished"           // 409: an answer to a run that has ended
	CodeTooLarge         = "body_too_large"         // 413: the body is larger than Config.MaxBodyBytes
	CodeUnsupportedMedia = "unsupported_media_type" // 415: the body (or the Content-Type of an empty one) is not application/json
	CodeTooManyRequests  = "too_many_requests"      // 429: over the token's request rate or open streams; see Retry-After
	CodeCancelFailed     = "cancel_failed"          // 502: the worker that answered the cancel reported an error
	CodeUnavailable      = "unavailable"            // 503: NATS or the workers' streams cannot be reached
	CodeInternal         = "internal_error"         // 500: anything else
)

// APIError is the body of every refusal: {"error": {...}}.
type APIError struct {
	Status  int    `json:"status"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field names what is wrong: a run request field ("metadata.run_id",
	// "callback_url"), a query parameter ("limit"), a header
	// ("Last-Event-ID") or a path value ("run_id").
	Field string `json:"field,omitempty"`
	// Reason is what is wrong with Field, in words.
	Reason string `json:"reason,omitempty"`
	// RunID is the run the refusal concerns, when there is one.
	RunID string `json:"run_id,omitempty"`
	// RunStatus is the status of the existing run, on run_id_used.
	RunStatus string `json:"run_status,omitempty"`
}

func (e *APIError) Error() string {
	if e.Field != "" && e.Reason != "" {
		return fmt.Sprintf("%d %s: %s: %s", e.Status, e.Code, e.Field, e.Reason)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// ErrorBody is the JSON document of a refusal.
type ErrorBody struct {
	Error APIError `json:"error"`
}

func apiErr(status int, code, format string, args ...any) *APIError {
	return &APIError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func badParam(field, format string, args ...any) *APIError {
	reason := fmt.Sprintf(format, args...)
	return &APIError{Status: http.StatusBadRequest, Code: CodeBadParameter, Field: field, Reason: reason,
		Message: field + ": " + reason}
}

// writeJSON writes v as the JSON body with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		status, data = http.StatusInternalServerError, []byte(`{"error":{"status":500,"code":"internal_error","message":"encode response"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(data)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

// writeError writes err as an error object. An error that is not an
// *APIError is a 500 whose message says nothing of the internals.
func writeError(w http.ResponseWriter, err error) {
	var e *APIError
	if !errors.As(err, &e) {
		e = apiErr(http.StatusInternalServerError, CodeInternal, "internal error")
	}
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="foundryq"`)
	}
	writeJSON(w, e.Status, ErrorBody{Error: *e})
}
