package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sort"
	"strings"
	"time"
)

// The request every case starts from: a prompt the model answers in a
// token or two, capped at the smallest max_output_tokens the API accepts
// (16), so that a case costs a few dozen tokens on a real endpoint.
const (
	prompt          = "Reply with the single word OK."
	maxOutputTokens = 16
)

// errNoID is returned when a stream never said which response it was.
var errNoID = errors.New("no response id in the stream")

// createBody is a create request for e with the given extra fields. The
// metadata marks the response as the suite's and carries emu_* directives,
// which the emulator follows and the service stores as plain metadata; the
// default emu_tokens=5 keeps the emulator's answer under max_output_tokens,
// as the service's answer to the prompt is.
func (e *Endpoint) createBody(extra map[string]any, directives ...string) map[string]any {
	md := map[string]string{"foundryq_conformance": "1", "emu_tokens": "5"}
	for i := 0; i+1 < len(directives); i += 2 {
		md[directives[i]] = directives[i+1]
	}
	body := map[string]any{
		"model":             e.model,
		"input":             prompt,
		"max_output_tokens": maxOutputTokens,
		"metadata":          md,
	}
	for k, v := range extra {
		body[k] = v
	}
	return body
}

// backgroundStream is a background, streamed, stored create.
var backgroundStream = map[string]any{"background": true, "stream": true, "store": true}

// openStream sends a background + streamed create and returns the reply
// unread (the caller closes its body); a status other than 200 is an error
// carrying the error observation.
func (e *Endpoint) openStream(ctx context.Context, directives ...string) (*http.Response, *frameReader, error) {
	res, err := e.do(ctx, http.MethodPost, "responses", e.createBody(backgroundStream, directives...))
	if err != nil {
		return nil, nil, err
	}
	if res.StatusCode != http.StatusOK {
		obs := errorObservation(res)
		res.Body.Close()
		return nil, nil, fmt.Errorf("create: %s", obs)
	}
	return res, newFrameReader(res.Body), nil
}

// streamed creates a background + streamed response and reads its stream
// to the terminal event.
func (e *Endpoint) streamed(ctx context.Context, directives ...string) (string, []frame, error) {
	res, fr, err := e.openStream(ctx, directives...)
	if err != nil {
		return "", nil, err
	}
	defer res.Body.Close()
	frames, err := fr.readAll()
	if err != nil {
		return "", frames, fmt.Errorf("read the create stream: %w", err)
	}
	id := responseID(frames)
	if id == "" {
		return "", frames, errNoID
	}
	return id, frames, nil
}

// lifecycle is the response snapshot of response.* lifecycle events and
// the object GET and cancel return.
type lifecycle struct {
	Type     string          `json:"type"`
	Response *responseObject `json:"response"`
}

type responseObject struct {
	ID         string `json:"id"`
	Object     string `json:"object"`
	Status     string `json:"status"`
	Background *bool  `json:"background"`
	// Error is the response's error object, "null" or absent.
	Error  json.RawMessage `json:"error"`
	Output []outputItem    `json:"output"`
}

// outputItem is one item of a response's output, with the fields the
// cases look at.
type outputItem struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	// CallID is a function_call's id, which its function_call_output names.
	CallID string `json:"call_id"`
	// ApprovalRequestID is, on an mcp_call, the mcp_approval_request that
	// let it run.
	ApprovalRequestID *string `json:"approval_request_id"`
	// Error is an mcp_list_tools item's reason (a string) or an mcp_call's
	// error object.
	Error   json.RawMessage `json:"error"`
	Content []struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	} `json:"content"`
}

// itemTypes lists the types of r's output items, or "none".
func (r *responseObject) itemTypes() string {
	if len(r.Output) == 0 {
		return "none"
	}
	types := make([]string, len(r.Output))
	for i, it := range r.Output {
		types[i] = it.Type
	}
	return strings.Join(types, " ")
}

// errorCode says what r's error is: "error null", "error absent" or
// "error CODE".
func (r *responseObject) errorCode() string {
	raw := bytes.TrimSpace(r.Error)
	switch {
	case len(raw) == 0:
		return "error absent"
	case string(raw) == "null":
		return "error null"
	}
	var e struct {
		Code json.RawMessage `json:"code"`
	}
	if json.Unmarshal(raw, &e) != nil {
		return "error not an object"
	}
	if c := jsonScalar(e.Code); c != "" {
		return "error " + c
	}
	return "error without a code"
}

// text is the output text of a message items, concatenated.
func (r *responseObject) text() string {
	var b strings.Builder
	for _, it := range r.Output {
		for _, c := range it.Content {
			if c.Type == "output_text" {
				b.WriteString(c.Text)
			}
		}
	}
	return b.String()
}

// snapshot decodes the response of a lifecycle frame; nil if it has none.
func (f frame) snapshot() *responseObject {
	var l lifecycle
	if json.Unmarshal(f.data, &l) != nil {
		return nil
	}
	return l.Response
}

// responseID is the id of the first frame that carries a response.
func responseID(frames []frame) string {
	for _, f := range frames {
		if r := f.snapshot(); r != nil && r.ID != "" {
			return r.ID
		}
	}
	return ""
}

// deltaText concatenates the output_text deltas of frames.
func deltaText(frames []frame) string {
	var b strings.Builder
	for _, f := range frames {
		if f.typ != "response.output_text.delta" {
			continue
		}
		var d struct {
			Delta string `json:"delta"`
		}
		_ = json.Unmarshal(f.data, &d)
		b.WriteString(d.Delta)
	}
	return b.String()
}

// apiErrorBody is the service's error object, or the Azure gateway's.
type apiErrorBody struct {
	Error *struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
		Param   json.RawMessage `json:"param"`
	} `json:"error"`
	StatusCode int    `json:"statusCode"`
	Message    string `json:"message"`
}

// errorObservation reads an error reply: "STATUS TYPE code=C param=P" with
// the parts the body has, or what else the body was.
func errorObservation(res *http.Response) string {
	data, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	return errorObs(res.StatusCode, data, false)
}

// errorObs formats an error reply: "STATUS TYPE code=C param=P", or with
// withMessage "STATUS TYPE "message"" (for the fixed messages sources
// quote; without its final period, which quotes drop).
func errorObs(status int, data []byte, withMessage bool) string {
	var b apiErrorBody
	if err := json.Unmarshal(data, &b); err != nil || (b.Error == nil && b.StatusCode == 0) {
		if len(bytes.TrimSpace(data)) == 0 {
			return fmt.Sprintf("%d (empty body)", status)
		}
		return fmt.Sprintf("%d (not an error object)", status)
	}
	if b.Error == nil {
		return fmt.Sprintf("%d gateway: %s", status, strings.TrimSuffix(b.Message, "."))
	}
	parts := []string{fmt.Sprint(status), b.Error.Type}
	if withMessage {
		return strings.Join(append(parts, fmt.Sprintf("%q", strings.TrimSuffix(b.Error.Message, "."))), " ")
	}
	if c := jsonScalar(b.Error.Code); c != "" {
		parts = append(parts, "code="+c)
	}
	if p := jsonScalar(b.Error.Param); p != "" {
		parts = append(parts, "param="+p)
	}
	return strings.Join(parts, " ")
}

// jsonScalar renders a string or number, "" for null or absent.
func jsonScalar(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// call sends a request and observes the reply: on 2xx the decoded
// response object, otherwise the error observation (with the message when
// withMessage).
func (e *Endpoint) call(ctx context.Context, method, path string, body any, withMessage bool) (int, *responseObject, string, error) {
	res, err := e.do(ctx, method, path, body)
	if err != nil {
		return 0, nil, "", err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil {
		return res.StatusCode, nil, "", fmt.Errorf("read the %s %s reply: %w", method, path, err)
	}
	if res.StatusCode >= 300 {
		return res.StatusCode, nil, errorObs(res.StatusCode, data, withMessage), nil
	}
	var r responseObject
	if err := json.Unmarshal(data, &r); err != nil {
		return res.StatusCode, nil, fmt.Sprintf("%d (not a response object)", res.StatusCode), nil
	}
	return res.StatusCode, &r, fmt.Sprintf("%d %s", res.StatusCode, r.Status), nil
}

// visible repeats call while it answers 404, for up to e.notFoundGrace
// (foundry.NotFoundGrace): on Azure's /openai/v1 a response can answer 404
// for about 33 s after a streamed create (dotnet/extensions #7704). The
// emulator answers at once.
func (e *Endpoint) visible(ctx context.Context, method, path string, body any, withMessage bool) (int, *responseObject, string, error) {
	deadline := time.Now().Add(e.notFoundGrace)
	for {
		status, r, obs, err := e.call(ctx, method, path, body, withMessage)
		if err != nil || status != http.StatusNotFound || time.Now().After(deadline) {
			return status, r, obs, err
		}
		if err := sleep(ctx, notFoundPause); err != nil {
			return status, r, obs, err
		}
	}
}

// notFoundPause is the wait between two tries of a response not visible yet.
const notFoundPause = 2 * time.Second

// sleep waits d, or until ctx ends (its cause is returned then).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// mediaType is the media type of a Content-Type header, without parameters.
func mediaType(h http.Header) string {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil {
		return "no content type"
	}
	return mt
}

// headerNames returns the lower-case names of h starting with prefix,
// sorted, or "none".
func headerNames(h http.Header, prefix string) string {
	var names []string
	for k := range h {
		if k = strings.ToLower(k); strings.HasPrefix(k, prefix) {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}
