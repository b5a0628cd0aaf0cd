package foundrytest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// apiError is an error answered with the OpenAI/Azure error body shape
// {"error":{"message","type","param","code"}}.
type apiError struct {
	status  int
	message string
	typ     string
	param   string // "" is sent as null
	code    string // "" is sent as null
	header  http.Header
}

func (e *apiError) Error() string {
	return fmt.Sprintf("foundrytest: %d %s", e.status, e.message)
}

// errorBody is the wire shape of an error reply.
type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// write sends the error reply.
func (e *apiError) write(w http.ResponseWriter) {
	for k, v := range e.header {
		w.Header()[k] = v
	}
	body, _ := json.Marshal(errorBody{Error: errorObject{
		Message: e.message, Type: e.typ, Param: nullable(e.param), Code: nullable(e.code),
	}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(e.status)
	_, _ = w.Write(body)
}

// invalidRequest is a 400 invalid_request_error about param.
func invalidRequest(param, code, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, message: fmt.Sprintf(format, args...),
		typ: "invalid_request_error", param: param, code: code}
}

// notFound is the 404 for an unknown (or deleted, or unstored) response id.
func notFound(id string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: "invalid_request_error",
		message: fmt.Sprintf("Response with id '%s' not found.", id)}
}

// errUnauthorized is the 401 for a missing or wrong key (Azure's wording).
func errUnauthorized() *apiError {
	return &apiError{status: http.StatusUnauthorized, typ: "invalid_request_error", code: "401",
		message: "Access denied due to invalid subscription key or wrong API endpoint. " +
			"Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}
}

// statusError is the error answered for emu_create_status=status.
func statusError(status int) *apiError {
	e := &apiError{status: status, typ: "invalid_request_error",
		message: http.StatusText(status) + " (emulated by emu_create_status)."}
	switch {
	case status == http.StatusTooManyRequests:
		e.typ, e.code = "requests", "rate_limit_exceeded"
		e.message = "Requests to the Responses_Create Operation have exceeded the token rate limit of your current pricing tier. " +
			"Please retry after 1 second."
		e.header = http.Header{"Retry-After": {"1"}}
	case status == http.StatusUnauthorized:
		return errUnauthorized()
	case status == http.StatusNotFound:
		e.code = "DeploymentNotFound"
		e.message = "The API deployment for this resource does not exist."
	case status == http.StatusInternalServerError:
		e.typ = "server_error"
		e.message = "The server had an error while processing your request. Sorry about that!"
	case status >= 500:
		e.typ, e.code = "server_error", strconv.Itoa(status)
		e.message = "The service is temporarily unable to process your request. Please try again later."
	}
	return e
}
