package foundrytest

import "encoding/json"

// The wire shapes of the Responses API objects the emulator sends.

// usageObject is Response.usage.
type usageObject struct {
	InputTokens         int                 `json:"input_tokens"`
	InputTokensDetails  inputTokensDetails  `json:"input_tokens_details"`
	OutputTokens        int                 `json:"output_tokens"`
	OutputTokensDetails outputTokensDetails `json:"output_tokens_details"`
	TotalTokens         int                 `json:"total_tokens"`
}

type inputTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

type outputTokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// errorDetail is Response.error.
type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// incompleteDetails is Response.incomplete_details.
type incompleteDetails struct {
	Reason string `json:"reason"`
}

// outputText is a content part of a message item.
type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

func newOutputText(text string) outputText {
	return outputText{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}
}

// refusalPart is a content part of type "refusal": the model declined
// (openai-go v3.98.0 ResponseOutputRefusal).
type refusalPart struct {
	Type    string `json:"type"`
	Refusal string `json:"refusal"`
}

// refusalDeltaEvent is response.refusal.delta.
type refusalDeltaEvent struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
	ItemID         string `json:"item_id"`
	OutputIndex    int    `json:"output_index"`
	ContentIndex   int    `json:"content_index"`
	Delta          string `json:"delta"`
}

// refusalDoneEvent is response.refusal.done.
type refusalDoneEvent struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
	ItemID         string `json:"item_id"`
	OutputIndex    int    `json:"output_index"`
	ContentIndex   int    `json:"content_index"`
	Refusal        string `json:"refusal"`
}

// messageItem is an output item of type "message".
type messageItem struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Status  string `json:"status"`
	Role    string `json:"role"`
	Content []any  `json:"content"` // outputText or refusalPart
}

// mcpCallItem is an output item of type "mcp_call".
type mcpCallItem struct {
	ID                string    `json:"id"`
	Type              string    `json:"type"`
	Name              string    `json:"name"`
	ServerLabel       string    `json:"server_label"`
	Arguments         string    `json:"arguments"`
	Output            *string   `json:"output"`
	Error             *mcpError `json:"error"`
	Status            string    `json:"status"`
	ApprovalRequestID *string   `json:"approval_request_id"`
}

// mcpListToolsItem is an output item of type "mcp_list_tools".
type mcpListToolsItem struct {
	ID          string        `json:"id"`
	Type        string        `json:"type"`
	ServerLabel string        `json:"server_label"`
	Tools       []mcpToolInfo `json:"tools"`
	Error       *string       `json:"error"`
}

// mcpToolInfo is one tool of an mcp_list_tools item.
type mcpToolInfo struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	Annotations *struct{}       `json:"annotations"`
}

// mcpApprovalItem is an output item of type "mcp_approval_request".
type mcpApprovalItem struct {
	ID          string `json:"id"`
	Type        string `json:"type"`
	ServerLabel string `json:"server_label"`
	Name        string `json:"name"`
	Arguments   string `json:"arguments"`
}

// functionCallItem is an output item of type "function_call".
type functionCallItem struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
}

// mcpError is mcp_call.error in the object form of the current spec
// (McpToolCallErrorUnion: mcp_protocol_error | mcp_tool_execution_error |
// http_error); the emulator sends an mcp_protocol_error.
type mcpError struct {
	Type    string `json:"type"`
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// responseObject is the Response object returned by create, get, cancel
// and carried by the response.* lifecycle events.
type responseObject struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"`
	CreatedAt          int64              `json:"created_at"`
	CompletedAt        *int64             `json:"completed_at,omitempty"`
	Status             string             `json:"status"`
	Background         bool               `json:"background"`
	Error              *errorDetail       `json:"error"`
	IncompleteDetails  *incompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	MaxOutputTokens    *int               `json:"max_output_tokens"`
	Model              string             `json:"model,omitempty"`
	AgentReference     json.RawMessage    `json:"agent_reference,omitempty"`
	Agent              json.RawMessage    `json:"agent,omitempty"`
	Output             []any              `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Store              bool               `json:"store"`
	Temperature        float64            `json:"temperature"`
	TopP               float64            `json:"top_p"`
	ToolChoice         string             `json:"tool_choice"`
	Tools              []json.RawMessage  `json:"tools"`
	Truncation         string             `json:"truncation"`
	Usage              *usageObject       `json:"usage"`
	Metadata           map[string]string  `json:"metadata"`
}

// deletedObject is the reply to DELETE /responses/{id}.
type deletedObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}

// Stream event shapes. Every event carries type and sequence_number.

type lifecycleEvent struct {
	Type           string          `json:"type"`
	SequenceNumber int             `json:"sequence_number"`
	Response       *responseObject `json:"response"`
}

type itemEvent struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
	OutputIndex    int    `json:"output_index"`
	Item           any    `json:"item"`
}

type partEvent struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
	ItemID         string `json:"item_id"`
	OutputIndex    int    `json:"output_index"`
	ContentIndex   int    `json:"content_index"`
	Part           any    `json:"part"` // outputText or refusalPart
}

type textDoneEvent struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
	ItemID         string `json:"item_id"`
	OutputIndex    int    `json:"output_index"`
	ContentIndex   int    `json:"content_index"`
	Text           string `json:"text"`
	Logprobs       []any  `json:"logprobs"`
}

type mcpEvent struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
	ItemID         string `json:"item_id"`
	OutputIndex    int    `json:"output_index"`
}

type mcpArgsDeltaEvent struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
	ItemID         string `json:"item_id"`
	OutputIndex    int    `json:"output_index"`
	Delta          string `json:"delta"`
}

// keepaliveEvent is the undocumented {"type":"keepalive","sequence_number"}.
type keepaliveEvent struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
}

// errorEvent is the "error" stream event (flat: code, message, param).
type errorEvent struct {
	Type           string  `json:"type"`
	SequenceNumber int     `json:"sequence_number"`
	Code           *string `json:"code"`
	Message        string  `json:"message"`
	Param          *string `json:"param"`
}

// functionArgsDeltaEvent is response.function_call_arguments.delta.
type functionArgsDeltaEvent struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
	ItemID         string `json:"item_id"`
	OutputIndex    int    `json:"output_index"`
	Delta          string `json:"delta"`
}

// functionArgsDoneEvent is response.function_call_arguments.done.
type functionArgsDoneEvent struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
	ItemID         string `json:"item_id"`
	OutputIndex    int    `json:"output_index"`
	Name           string `json:"name"`
	Arguments      string `json:"arguments"`
}

type mcpArgsDoneEvent struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
	ItemID         string `json:"item_id"`
	OutputIndex    int    `json:"output_index"`
	Arguments      string `json:"arguments"`
}

// Event type names.
const (
	evCreated         = "response.created"
	evQueued          = "response.queued"
	evInProgress      = "response.in_progress"
	evCompleted       = "response.completed"
	evFailed          = "response.failed"
	evIncomplete      = "response.incomplete"
	evItemAdded       = "response.output_item.added"
	evItemDone        = "response.output_item.done"
	evPartAdded       = "response.content_part.added"
	evPartDone        = "response.content_part.done"
	evTextDelta       = "response.output_text.delta"
	evTextDone        = "response.output_text.done"
	evMCPInProgress   = "response.mcp_call.in_progress"
	evMCPArgsDelta    = "response.mcp_call_arguments.delta"
	evMCPArgsDone     = "response.mcp_call_arguments.done"
	evMCPCompleted    = "response.mcp_call.completed"
	evMCPFailed       = "response.mcp_call.failed"
	evListInProgress  = "response.mcp_list_tools.in_progress"
	evListCompleted   = "response.mcp_list_tools.completed"
	evFuncArgsDelta   = "response.function_call_arguments.delta"
	evFuncArgsDone    = "response.function_call_arguments.done"
	evKeepalive       = "keepalive"
	evRefusalDelta    = "response.refusal.delta"
	evRefusalDone     = "response.refusal.done"
	evListFailed      = "response.mcp_list_tools.failed"
	reasonFilter      = "content_filter"
	evError           = "error"
	statusQueued      = "queued"
	statusInProgress  = "in_progress"
	statusCompleted   = "completed"
	statusFailed      = "failed"
	statusIncomplete  = "incomplete"
	statusCancelled   = "cancelled"
	reasonMaxTokens   = "max_output_tokens"
	failedCode        = "server_error"
	failedMessage     = "An error occurred while processing your request. You can retry your request, or contact us if the error persists."
	toolFailedMessage = "Error executing tool: the MCP server returned an error (emulated by emu_tool_fail)."
)

// terminalStatus reports whether s is a final status.
func terminalStatus(s string) bool {
	switch s {
	case statusCompleted, statusFailed, statusIncomplete, statusCancelled:
		return true
	}
	return false
}
