package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// A follow-up continues a response that stopped on a function_call or an
// mcp_approval_request: a create with previous_response_id whose input
// answers it (function_call_output, mcp_approval_response). OpenAI API
// reference, "Create a model response"; Microsoft Learn, "Azure OpenAI
// Responses API", function calling and MCP approvals.

// wordTool is the function the follow-up cases make the model call: no
// arguments, so that the call costs a token or two.
var wordTool = map[string]any{
	"type":        "function",
	"name":        "get_word",
	"description": "Returns the word to reply with.",
	"parameters":  map[string]any{"type": "object", "properties": map[string]any{}},
}

// callPrompt asks for the call, and for the answer the follow-up gives.
const callPrompt = "Call get_word, then reply with the single word it returns."

// calledFunction creates a stored, foreground response that calls
// wordTool: tool_choice forces the call on the service, emu_tool_ms makes
// the emulator's scripted call. It returns the response id and the call id,
// or, when there is no call, what the create gave instead.
func (e *Endpoint) calledFunction(ctx context.Context) (id, callID, obs string, err error) {
	body := e.createBody(map[string]any{
		"store":       true,
		"input":       callPrompt,
		"tools":       []any{wordTool},
		"tool_choice": map[string]any{"type": "function", "name": "get_word"},
	}, "emu_tool_ms", "0")
	_, r, obs, err := e.call(ctx, http.MethodPost, "responses", body, false)
	if err != nil || r == nil {
		return "", "", "create " + obs, err
	}
	for _, it := range r.Output {
		if it.Type == "function_call" && it.CallID != "" {
			return r.ID, it.CallID, "", nil
		}
	}
	return "", "", fmt.Sprintf("create %s, output %s, no function_call", obs, r.itemTypes()), nil
}

// idPattern matches the ids the service puts in its messages.
var idPattern = regexp.MustCompile(`\b(resp|call|fc|mcpr|mcp|msg)_[A-Za-z0-9]+`)

// followUp sends a follow-up create and observes the reply: on 2xx the
// decoded response; otherwise "STATUS TYPE code=C param=P "message"", ids
// in the message replaced by "…". It repeats while the service says the
// previous response is not found, for up to e.notFoundGrace
// (foundry.NotFoundGrace): a
// response just created can be invisible for a while on Azure's /openai/v1
// (dotnet/extensions #7704); the emulator knows it at once.
func (e *Endpoint) followUp(ctx context.Context, body map[string]any) (*responseObject, string, error) {
	deadline := time.Now().Add(e.notFoundGrace)
	for {
		r, obs, notFound, err := e.followUpOnce(ctx, body)
		if err != nil || !notFound || time.Now().After(deadline) {
			return r, obs, err
		}
		if err := sleep(ctx, notFoundPause); err != nil {
			return nil, obs, err
		}
	}
}

func (e *Endpoint) followUpOnce(ctx context.Context, body map[string]any) (*responseObject, string, bool, error) {
	res, err := e.do(ctx, http.MethodPost, "responses", body)
	if err != nil {
		return nil, "", false, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil {
		return nil, "", false, fmt.Errorf("read the follow-up reply: %w", err)
	}
	if res.StatusCode >= 300 {
		var b apiErrorBody
		_ = json.Unmarshal(data, &b)
		obs := errorObs(res.StatusCode, data, false)
		notFound := false
		if b.Error != nil {
			notFound = jsonScalar(b.Error.Code) == "previous_response_not_found"
			msg := idPattern.ReplaceAllString(strings.TrimSuffix(b.Error.Message, "."), "…")
			obs += fmt.Sprintf(" %q", msg)
		}
		return nil, obs, notFound, nil
	}
	var r responseObject
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Sprintf("%d (not a response object)", res.StatusCode), false, nil
	}
	return &r, fmt.Sprintf("%d %s", res.StatusCode, r.Status), false, nil
}

// answered describes a follow-up's response: its status, then "text" or
// "no text".
func answered(r *responseObject, obs string) string {
	if r == nil {
		return "follow-up " + obs
	}
	text := "text"
	if strings.TrimSpace(r.text()) == "" {
		text = "no text"
	}
	return fmt.Sprintf("follow-up %s, %s", obs, text)
}

var caseFunctionFollowUp = Case{
	Name: "function call, then its output",
	Want: "create: a function_call; follow-up 200 completed, text",
	Source: "OpenAI API reference, \"Create a model response\" (tool_choice forcing a function; previous_response_id with " +
		"an input item function_call_output {call_id, output}); Microsoft Learn \"Azure OpenAI Responses API\", function calling",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		id, callID, obs, err := e.calledFunction(ctx)
		if err != nil || id == "" {
			return obs, err
		}
		r, obs, err := e.followUp(ctx, e.createBody(map[string]any{
			"previous_response_id": id,
			"input":                []any{map[string]any{"type": "function_call_output", "call_id": callID, "output": "OK"}},
			"tools":                []any{wordTool},
			"tool_choice":          "none",
		}))
		if err != nil {
			return "", err
		}
		return "create: a function_call; " + answered(r, obs), nil
	},
}

var caseFunctionOutputMissing = Case{
	Name:   "function call left without its output",
	Want:   `create: a function_call; follow-up 400 invalid_request_error param=input "No tool output found for function call …"`,
	Source: "openai/openai-agents-python #673 (400 \"No tool output found for function call call_….\", param input, code null)",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		id, _, obs, err := e.calledFunction(ctx)
		if err != nil || id == "" {
			return obs, err
		}
		// A plain message instead of the output: refused before any token.
		r, obs, err := e.followUp(ctx, e.createBody(map[string]any{"previous_response_id": id}))
		if err != nil {
			return "", err
		}
		return "create: a function_call; " + answered(r, obs), nil
	},
}

var casePreviousUnknown = Case{
	Name: "previous_response_id unknown",
	Want: "400 invalid_request_error code=previous_response_not_found param=previous_response_id",
	Source: "maximhq/bifrost #2441 and bigduu/Bamboo-agent PR #513 (400 previous_response_not_found, " +
		"\"Previous response with id '…' not found.\")",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		return e.refused(ctx, map[string]any{"previous_response_id": unknownID})
	},
}

var caseMCPApprovalFollowUp = Case{
	Name: "MCP approval, then approved",
	Want: "create: an mcp_approval_request; follow-up 200 completed, output mcp_call message, " +
		"the call names the request, text",
	Source: "OpenAI API reference, \"Create a model response\" (previous_response_id with an input item mcp_approval_response " +
		"{approval_request_id, approve}); Microsoft Learn \"Azure OpenAI Responses API\", MCP approvals (the approved call " +
		"runs: an mcp_call item with approval_request_id, then the answer); OpenAI \"Remote MCP\" guide (the tools are not listed again)",
	EmulatorOnly: "the service would call a real MCP server, and approving is a person's decision",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		tool := map[string]any{"type": "mcp", "server_label": "crm", "server_url": "https://crm.example.invalid/mcp"}
		_, r, obs, err := e.call(ctx, http.MethodPost, "responses",
			e.createBody(map[string]any{"store": true, "tools": []any{tool}}, "emu_tool_ms", "0"), false)
		if err != nil || r == nil {
			return "create " + obs, err
		}
		reqID := ""
		for _, it := range r.Output {
			if it.Type == "mcp_approval_request" && it.ID != "" {
				reqID = it.ID
			}
		}
		if reqID == "" {
			return fmt.Sprintf("create %s, output %s, no mcp_approval_request", obs, r.itemTypes()), nil
		}
		next, obs, err := e.followUp(ctx, e.createBody(map[string]any{
			"previous_response_id": r.ID,
			"input":                []any{map[string]any{"type": "mcp_approval_response", "approval_request_id": reqID, "approve": true}},
			"tools":                []any{tool},
		}, "emu_tool_ms", "0"))
		if err != nil {
			return "", err
		}
		if next == nil {
			return "create: an mcp_approval_request; follow-up " + obs, nil
		}
		names := "no mcp_call"
		for _, it := range next.Output {
			if it.Type != "mcp_call" {
				continue
			}
			switch {
			case it.ApprovalRequestID == nil:
				names = "the call names no request"
			case *it.ApprovalRequestID == reqID:
				names = "the call names the request"
			default:
				names = "the call names another request"
			}
		}
		text := "text"
		if strings.TrimSpace(next.text()) == "" {
			text = "no text"
		}
		return fmt.Sprintf("create: an mcp_approval_request; follow-up %s, output %s, %s, %s", obs, next.itemTypes(), names, text), nil
	},
}
