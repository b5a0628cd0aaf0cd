package foundry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Response statuses reported by the Responses API.
const (
	StatusQueued     = "queued"
	StatusInProgress = "in_progress"
	StatusCompleted  = "completed"
	StatusFailed     = "failed"
	StatusIncomplete = "incomplete"
	StatusCancelled  = "cancelled"
)

// Response is the part of a Responses API response object foundryq uses.
type Response struct {
	ID     string
	Status string // queued, in_progress, completed, failed, incomplete, cancelled
	// Background is the response's background flag as the server reports it.
	// Foundry hosted agents drop background=true: their response.created says
	// false, and such a response can be neither resumed
	// (ErrStreamingNotEnabled) nor cancelled, and GET keeps reporting it
	// in_progress (Azure/azure-sdk-for-python#46015).
	Background bool
	// BackgroundKnown reports whether the object carried a background field
	// (so that a missing field is not mistaken for false).
	BackgroundKnown  bool
	Error            *ResponseError // set when Status is failed
	IncompleteReason string         // incomplete_details.reason, e.g. max_output_tokens
	Usage            *Usage         // present once the response is finished
	OutputText       string         // the output_text parts of all message items, concatenated
	// Refusal is the refusal parts of all message items, concatenated: the
	// model declined and said why ({"type": "refusal", "refusal": "..."};
	// openai-go v3.98.0 ResponseOutputRefusal). Empty when it did not.
	Refusal  string
	Output   []OutputItem      // every output item, in order
	Metadata map[string]string // as sent at create
}

// Terminal reports whether the status is final (anything but queued or in_progress,
// and not empty).
func (r *Response) Terminal() bool {
	return r != nil && r.Status != "" && r.Status != StatusQueued && r.Status != StatusInProgress
}

// ResponseError is the error of a failed response.
type ResponseError struct {
	Code    string
	Message string
}

// TransientResponseCodes are the error codes of a failed response that say
// nothing about the request itself: the same request may succeed when sent
// again as a new response. "server_error" and "rate_limit_exceeded" are the
// two of the documented ResponseError codes (OpenAI API reference, "The
// response object", error.code; openai-go v3.98.0 ResponseErrorCode) that
// are not about the input (invalid_prompt, images, policy, ...); the
// service's own message for server_error says "You can retry your request".
// vector_store_timeout is left out: it depends on the vector store.
var TransientResponseCodes = []string{"rate_limit_exceeded", "server_error"}

// Retryable reports whether the failure is transient (a code in
// TransientResponseCodes): a new response for the same request may succeed.
// A failed response is final; retrying means creating another one.
func (e *ResponseError) Retryable() bool {
	if e == nil {
		return false
	}
	for _, c := range TransientResponseCodes {
		if e.Code == c {
			return true
		}
	}
	return false
}

// NotFoundGrace is how long after a response id was first seen a 404 for it
// means "not visible yet" rather than "gone": on Azure's /openai/v1, GET
// right after a streamed create answered 404 for up to 32.7 s before
// answering 200 (dotnet/extensions#7704, 79 samples, every one became
// retrievable).
const NotFoundGrace = time.Minute

// NotYetVisible reports whether err is a 404 (ErrNotFound) for a response id
// first seen less than NotFoundGrace ago (seenFor): poll, resume or cancel
// again later instead of treating the response as gone.
func NotYetVisible(err error, seenFor time.Duration) bool {
	return err != nil && seenFor < NotFoundGrace && errors.Is(err, ErrNotFound)
}

// Usage counts the tokens of a response.
type Usage struct {
	InputTokens     int64
	OutputTokens    int64
	TotalTokens     int64
	CachedTokens    int64 // input_tokens_details.cached_tokens
	ReasoningTokens int64 // output_tokens_details.reasoning_tokens
}

// Output item types foundryq looks at (OutputItem.Type).
const (
	ItemMessage            = "message"
	ItemMCPCall            = "mcp_call"
	ItemMCPListTools       = "mcp_list_tools"
	ItemMCPApprovalRequest = "mcp_approval_request"
	ItemFunctionCall       = "function_call"
)

// OutputItem is one output item: a message, an mcp_call, an mcp_list_tools, a
// reasoning item, a function_call, ...
type OutputItem struct {
	ID          string
	Type        string // message, mcp_call, mcp_list_tools, mcp_approval_request, function_call, ...
	Name        string // tool name (mcp_call, mcp_approval_request, function_call)
	ServerLabel string // MCP server label (mcp_call, mcp_list_tools, mcp_approval_request)
	Status      string // in_progress, completed, incomplete, calling, failed
	Error       string // mcp_call / mcp_list_tools error (text; raw JSON if the server sent an object)
	Output      string // mcp_call output
	Arguments   string // tool arguments (a JSON document in a string)
	CallID      string // function_call call_id
	// ApprovalRequestID is set on an mcp_call that ran after an approval.
	ApprovalRequestID string
	// Tools are the tool names of an mcp_list_tools item (at most maxListedTools).
	Tools   []string
	Text    string // message items: the output_text parts, concatenated
	Refusal string // message items: the refusal parts, concatenated
}

// maxListedTools bounds the tool names kept from one mcp_list_tools item.
const maxListedTools = 256

// ApprovalRequests returns the mcp_approval_request items of the output. A
// finished response that has any stopped to ask for approval of an MCP call
// (require_approval was not "never"): the call did not run, and the response
// waits for an mcp_approval_response in a new request.
func (r *Response) ApprovalRequests() []OutputItem { return r.itemsOf(ItemMCPApprovalRequest) }

// FunctionCalls returns the function_call items of the output. A finished
// response that has any waits for the caller to run the functions and send
// their output in a new request.
func (r *Response) FunctionCalls() []OutputItem { return r.itemsOf(ItemFunctionCall) }

func (r *Response) itemsOf(typ string) []OutputItem {
	if r == nil {
		return nil
	}
	var out []OutputItem
	for _, it := range r.Output {
		if it.Type == typ {
			out = append(out, it)
		}
	}
	return out
}

// Get fetches a response (GET responses/{id}). Retried by the SDK per
// Config.MaxRetries; a 404 matches ErrNotFound.
func (c *Client) Get(ctx context.Context, id string) (*Response, error) {
	return c.responseCall(ctx, "get", id, http.MethodGet, "")
}

// Cancel asks the server to stop a background response (POST
// responses/{id}/cancel) and returns the state it reports. Cancel is idempotent:
// on a response that already finished the server returns that final state
// (status completed, failed or incomplete rather than cancelled). If the server
// instead refuses with 400 or 409, Cancel fetches the response and returns it
// without error when it is finished. A 404 matches ErrNotFound.
func (c *Client) Cancel(ctx context.Context, id string) (*Response, error) {
	r, err := c.responseCall(ctx, "cancel", id, http.MethodPost, "/cancel")
	if err == nil {
		return r, nil
	}
	var apiErr *APIError
	if errors.As(err, &apiErr) && (apiErr.StatusCode == http.StatusBadRequest || apiErr.StatusCode == http.StatusConflict) {
		if got, gerr := c.Get(ctx, id); gerr == nil && got.Terminal() {
			return got, nil
		}
	}
	return nil, err
}

func (c *Client) responseCall(ctx context.Context, op, id, method, suffix string) (*Response, error) {
	path, err := responsePath(id, suffix)
	if err != nil {
		return nil, fmt.Errorf("foundry: %s: %w: %v", op, ErrInvalidRequest, err)
	}
	res, err := c.do(ctx, op, id, method, path, nil)
	if err != nil {
		return nil, err
	}
	defer closeBody(res)
	body, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("foundry: %s: read body: %w", opName(op, id), context.Cause(ctx))
		}
		return nil, fmt.Errorf("foundry: %s: read body: %w", opName(op, id), err)
	}
	var w wireResponse
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, fmt.Errorf("foundry: %s: decode response (%s): %w", opName(op, id), res.Header.Get("Content-Type"), err)
	}
	return w.response(), nil
}

// wireResponse is the JSON shape of a response object (only the fields we use).
type wireResponse struct {
	ID                string     `json:"id"`
	Status            string     `json:"status"`
	Background        *bool      `json:"background"`
	Error             *wireError `json:"error"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Usage    *wireUsage        `json:"usage"`
	Output   []wireItem        `json:"output"`
	Metadata map[string]string `json:"metadata"`
}

type wireUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	OutputTokens       int64 `json:"output_tokens"`
	TotalTokens        int64 `json:"total_tokens"`
	InputTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
}

type wireItem struct {
	ID          string     `json:"id"`
	Type        string     `json:"type"`
	Name        string     `json:"name"`
	ServerLabel string     `json:"server_label"`
	Status      string     `json:"status"`
	Error       flexString `json:"error"`
	Output      flexString `json:"output"`
	Arguments   flexString `json:"arguments"`
	CallID      string     `json:"call_id"`
	// ApprovalRequestID is a string or null.
	ApprovalRequestID flexString `json:"approval_request_id"`
	Tools             []struct {
		Name string `json:"name"`
	} `json:"tools"`
	Content []struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	} `json:"content"`
}

func (w *wireResponse) response() *Response {
	r := &Response{
		ID:       w.ID,
		Status:   w.Status,
		Metadata: w.Metadata,
	}
	if w.Background != nil {
		r.Background, r.BackgroundKnown = *w.Background, true
	}
	if w.Error != nil && (w.Error.Code != "" || w.Error.Message != "") {
		r.Error = &ResponseError{Code: string(w.Error.Code), Message: w.Error.Message}
	}
	if w.IncompleteDetails != nil {
		r.IncompleteReason = w.IncompleteDetails.Reason
	}
	if w.Usage != nil {
		r.Usage = w.Usage.usage()
	}
	if len(w.Output) > 0 {
		r.Output = make([]OutputItem, len(w.Output))
		var text, refusal strings.Builder
		for i := range w.Output {
			r.Output[i] = w.Output[i].item()
			if r.Output[i].Type == "message" {
				text.WriteString(r.Output[i].Text)
				refusal.WriteString(r.Output[i].Refusal)
			}
		}
		r.OutputText, r.Refusal = text.String(), refusal.String()
	}
	return r
}

func (u *wireUsage) usage() *Usage {
	out := &Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, TotalTokens: u.TotalTokens}
	if u.InputTokensDetails != nil {
		out.CachedTokens = u.InputTokensDetails.CachedTokens
	}
	if u.OutputTokensDetails != nil {
		out.ReasoningTokens = u.OutputTokensDetails.ReasoningTokens
	}
	return out
}

func (w *wireItem) item() OutputItem {
	it := OutputItem{
		ID:          w.ID,
		Type:        w.Type,
		Name:        w.Name,
		ServerLabel: w.ServerLabel,
		Status:      w.Status,
		Error:       string(w.Error),
		Output:      string(w.Output),
		Arguments:   string(w.Arguments),
		CallID:      w.CallID,

		ApprovalRequestID: string(w.ApprovalRequestID),
	}
	if len(w.Tools) > 0 {
		it.Tools = make([]string, 0, min(len(w.Tools), maxListedTools))
		for _, t := range w.Tools[:min(len(w.Tools), maxListedTools)] {
			it.Tools = append(it.Tools, t.Name)
		}
	}
	switch len(w.Content) {
	case 0:
	case 1:
		switch p := w.Content[0]; p.Type {
		case "output_text":
			it.Text = p.Text
		case "refusal":
			it.Refusal = p.Refusal
		}
	default:
		var b, refusal strings.Builder
		for _, p := range w.Content {
			switch p.Type {
			case "output_text":
				b.WriteString(p.Text)
			case "refusal":
				refusal.WriteString(p.Refusal)
			}
		}
		it.Text, it.Refusal = b.String(), refusal.String()
	}
	return it
}
