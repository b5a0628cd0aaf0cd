package foundrytest

import (
	"encoding/json"
	"fmt"
)

// A follow-up is a create with previous_response_id whose input answers
// what the previous response stopped on: mcp_approval_response items
// {approval_request_id, approve, reason?} for its mcp_approval_request
// items, function_call_output items {call_id, output} for its
// function_call items (OpenAI API reference, "Create a model response",
// input item types; Microsoft Learn, "Azure OpenAI Responses API", MCP
// approvals and function calling).

// followUp is what a create's input answers.
type followUp struct {
	previousID string
	approvals  []approvalAnswer
	outputs    []string // call ids of function_call_output items
}

// approvalAnswer is one mcp_approval_response input item.
type approvalAnswer struct {
	requestID string
	approve   bool
}

// answeredCall is an MCP call a follow-up approved: it runs before the text.
type answeredCall struct {
	requestID, label, name string
}

// parseFollowUp reads previous_response_id and the answer items of input.
// Other input items are the conversation and are not checked here.
func parseFollowUp(fields map[string]json.RawMessage) (*followUp, *apiError) {
	prev, ok, aerr := decodeString(fields, "previous_response_id")
	if aerr != nil {
		return nil, aerr
	}
	f := &followUp{previousID: prev}
	var items []map[string]json.RawMessage
	if raw := fields["input"]; jsonKind(raw) == "an array" && json.Unmarshal(raw, &items) == nil {
		for i, item := range items {
			if aerr := f.addItem(i, item); aerr != nil {
				return nil, aerr
			}
		}
	}
	if !ok && len(f.approvals)+len(f.outputs) == 0 {
		return nil, nil
	}
	return f, nil
}

// addItem records item i of input if it is an answer.
func (f *followUp) addItem(i int, item map[string]json.RawMessage) *apiError {
	typ, _, _ := decodeString(item, "type")
	param := fmt.Sprintf("input[%d]", i)
	switch typ {
	case "function_call_output":
		id, ok, aerr := decodeString(item, "call_id")
		if aerr != nil {
			return invalidType(param+".call_id", "a string", item["call_id"])
		}
		if !ok || id == "" {
			return missingParam(param + ".call_id")
		}
		if raw, ok := item["output"]; !ok || isNull(raw) {
			return missingParam(param + ".output")
		} else if k := jsonKind(raw); k != "a string" && k != "an array" {
			return invalidType(param+".output", "a string or an array", raw)
		}
		f.outputs = append(f.outputs, id)
	case "mcp_approval_response":
		id, ok, aerr := decodeString(item, "approval_request_id")
		if aerr != nil {
			return invalidType(param+".approval_request_id", "a string", item["approval_request_id"])
		}
		if !ok || id == "" {
			return missingParam(param + ".approval_request_id")
		}
		raw, ok := item["approve"]
		if !ok || isNull(raw) {
			return missingParam(param + ".approve")
		}
		approve, aerr := decodeBool(item, "approve", false)
		if aerr != nil {
			return invalidType(param+".approve", "a boolean", raw)
		}
		if _, _, aerr := decodeString(item, "reason"); aerr != nil {
			return invalidType(param+".reason", "a string", item["reason"])
		}
		f.approvals = append(f.approvals, approvalAnswer{requestID: id, approve: approve})
	}
	return nil
}

// resolveFollowUp checks a follow-up against the response it continues and
// returns the MCP calls it approved, as the service answers:
//   - an unknown, deleted or unstored previous response: 400
//     previous_response_not_found, "Previous response with id '…' not
//     found." (maximhq/bifrost#2441; bigduu/Bamboo-agent#513: a store=false
//     response cannot be continued);
//   - an output whose call_id the previous response did not make: 400 "No
//     tool call found for function call output with call_id …." param input,
//     code null (continuedev/continue#10092);
//   - a function call of the previous response left without an output: 400
//     "No tool output found for function call …." param input, code null
//     (openai/openai-agents-python#673);
//   - an approval for a request the previous response did not make: 400 in
//     the same shape (the message is modelled on the function call one: no
//     public report of the service's exact wording).
func (h *Handler) resolveFollowUp(f *followUp) ([]answeredCall, *apiError) {
	if f.previousID == "" {
		// Without previous_response_id the input carries the conversation,
		// calls included: nothing stored to check against.
		return nil, nil
	}
	prev := h.lookup(f.previousID)
	if prev == nil {
		return nil, invalidRequest("previous_response_id", "previous_response_not_found",
			"Previous response with id '%s' not found.", f.previousID)
	}
	calls, approvals := prev.asked()
	for _, id := range f.outputs {
		if _, ok := calls[id]; !ok {
			return nil, invalidRequest("input", "", "No tool call found for function call output with call_id %s.", id)
		}
		delete(calls, id)
	}
	for id := range calls {
		return nil, invalidRequest("input", "", "No tool output found for function call %s.", id)
	}
	var approved []answeredCall
	for _, a := range f.approvals {
		req, ok := approvals[a.requestID]
		if !ok {
			return nil, invalidRequest("input", "",
				"No approval request found for mcp approval response with approval_request_id %s.", a.requestID)
		}
		if a.approve {
			approved = append(approved, answeredCall{requestID: req.ID, label: req.ServerLabel, name: req.Name})
		}
	}
	return approved, nil
}

// answers reports whether the follow-up answers anything.
func (f *followUp) answers() bool { return f != nil && len(f.approvals)+len(f.outputs) > 0 }

// asked returns the function calls (by call id) and approval requests (by
// id) among r's output items.
func (r *response) asked() (calls map[string]bool, approvals map[string]*mcpApprovalItem) {
	calls, approvals = map[string]bool{}, map[string]*mcpApprovalItem{}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, it := range r.output {
		switch it := it.(type) {
		case *functionCallItem:
			calls[it.CallID] = true
		case *mcpApprovalItem:
			approvals[it.ID] = it
		}
	}
	return calls, approvals
}

// previousID is the request's previous_response_id, "" if none.
func (req *createRequest) previousID() string {
	if req.followUp == nil {
		return ""
	}
	return req.followUp.previousID
}
