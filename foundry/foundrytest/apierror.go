package foundrytest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
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
	// details, when not nil, is sent as Foundry's "details" list (an empty
	// list is sent as []).
	details []payloadDetail
	// gateway sends the Azure API gateway's {"statusCode","message"} body
	// instead of the error object.
	gateway bool
	// inner, when not nil, is sent as Azure's "innererror" (with the
	// status in the error object, as Azure sends it).
	inner *innerError
}

// innerError is Azure's error.innererror.
type innerError struct {
	Code                string                         `json:"code"`
	ContentFilterResult map[string]contentFilterResult `json:"content_filter_result"`
}

// contentFilterResult is one category of a content_filter_result.
type contentFilterResult struct {
	Filtered bool   `json:"filtered"`
	Severity string `json:"severity,omitempty"`
	Detected *bool  `json:"detected,omitempty"`
}

// payloadDetail is one entry of Foundry's error.details.
type payloadDetail struct {
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
	Param   string `json:"param"`
	Type    string `json:"type,omitempty"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("foundrytest: %d %s", e.status, e.message)
}

// errorBody is the wire shape of an error reply.
type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Message string           `json:"message"`
	Type    string           `json:"type"`
	Param   *string          `json:"param"`
	Code    *string          `json:"code"`
	Details *[]payloadDetail `json:"details,omitempty"`
	Status  int              `json:"status,omitempty"`
	Inner   *innerError      `json:"innererror,omitempty"`
}

// gatewayBody is the Azure API gateway's error body.
type gatewayBody struct {
	StatusCode int    `json:"statusCode"`
	Message    string `json:"message"`
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
	obj := errorObject{Message: e.message, Type: e.typ, Param: nullable(e.param), Code: nullable(e.code)}
	if e.details != nil {
		d := e.details
		obj.Details = &d
	}
	if e.inner != nil {
		obj.Status, obj.Inner = e.status, e.inner
	}
	var body []byte
	if e.gateway {
		body, _ = json.Marshal(gatewayBody{StatusCode: e.status, Message: e.message})
	} else {
		body, _ = json.Marshal(errorBody{Error: obj})
	}
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

// invalidPayload is Foundry's own 400 shape: code invalid_payload and a
// details list ([] when the param says it all).
func invalidPayload(param, message string) *apiError {
	return &apiError{status: http.StatusBadRequest, message: message, typ: "invalid_request_error",
		param: param, code: "invalid_payload", details: []payloadDetail{}}
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
		return rateLimited(time.Second)
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

// contentFilterMessage is Azure's message for a prompt (or a response) its
// content filter stopped.
const contentFilterMessage = "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. " +
	"Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: " +
	"https://go.microsoft.com/fwlink/?linkid=2198766"

// errContentFilter is Azure's 400 for a prompt the content filter refused
// (emu_content_filter=prompt): code content_filter, param prompt, and an
// innererror ResponsibleAIPolicyViolation with the category results
// (openai/openai-dotnet#55; Azure/azure-sdk-for-go#23936).
func errContentFilter() *apiError {
	f := false
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: "prompt", code: "content_filter",
		message: contentFilterMessage,
		inner: &innerError{Code: "ResponsibleAIPolicyViolation", ContentFilterResult: map[string]contentFilterResult{
			"hate":      {Severity: "safe"},
			"jailbreak": {Detected: &f},
			"self_harm": {Severity: "safe"},
			"sexual":    {Severity: "safe"},
			"violence":  {Filtered: true, Severity: "medium"},
		}}}
}
