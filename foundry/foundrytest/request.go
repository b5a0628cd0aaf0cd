package foundrytest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"unicode/utf8"
)

// createRequest is the part of a POST /responses body the emulator uses.
// Unknown fields are accepted and ignored, as the real service ignores
// options it does not need to act on; known fields are type-checked.
type createRequest struct {
	model        string
	agentField   string          // "agent_reference" or "agent" when an agent is referenced
	agentName    string          // the agent's name
	agentRaw     json.RawMessage // echoed in the response object
	input        json.RawMessage
	instructions *string
	tools        []json.RawMessage
	background   bool
	stream       bool
	store        bool
	metadata     map[string]string
	maxOutput    int // 0: no limit
	// obfuscate is stream_options.include_obfuscation (default true): delta
	// events carry an "obfuscation" field.
	obfuscate bool
	// mcpServers are the MCP tools, in request order: each gets an
	// mcp_list_tools output item.
	mcpServers []mcpServer
	// call is the tool a scripted call (emu_tool_ms) uses: the first mcp or
	// function tool of the request; nil without one.
	call *toolCallTarget
	// followUp is what the request answers of a previous response (nil
	// without previous_response_id or answer items); approved are the MCP
	// calls its approvals let run, set by the create handler.
	followUp *followUp
	approved []answeredCall
}

// mcpServer is one "type":"mcp" tool of a request.
type mcpServer struct {
	label string
	tools []string // allowed_tools names (at most maxListedTools), else the default tool
}

// toolCallTarget is what a scripted tool call calls.
type toolCallTarget struct {
	function bool   // a function tool: the response ends with a function_call item
	label    string // mcp: the server label
	name     string // the tool or function name
	approval bool   // mcp: require_approval asks for approval of this call
	// functions are the names of the request's function tools, in order:
	// parallel function calls call them in turn.
	functions []string
}

// functionName is the function parallel call k calls.
func (c *toolCallTarget) functionName(k int) string {
	if len(c.functions) == 0 {
		return c.name
	}
	return c.functions[k%len(c.functions)]
}

// Metadata limits of the real API.
const (
	maxMetadataPairs = 16
	maxMetadataKey   = 64
	maxMetadataValue = 512
	minOutputTokens  = 16
	// maxTools is the longest tools array accepted (OpenAI's documented
	// limit of 128 tools); it also bounds the output items tools can cause.
	maxTools = 128
	// maxListedTools bounds the tool names one mcp_list_tools item lists.
	maxListedTools = 128
)

// agentRefusedFields are the request fields Foundry refuses next to an agent
// reference, in the order the emulator reports them: 400 invalid_payload
// "Not allowed when agent is specified." (tools: microsoft/agent-framework
// issue #5130; temperature and top_p, with one details entry each under
// "Invalid payload": microsoft/agent-framework issue #2573; instructions,
// text and reasoning: the same answer reported by Foundry users).
var agentRefusedFields = []string{"instructions", "tools", "text", "reasoning", "temperature", "top_p"}

// notAllowedWithAgent is the service's message for agentRefusedFields.
const notAllowedWithAgent = "Not allowed when agent is specified."

// agentDeprecated is the service's answer to the old "agent" field
// (MicrosoftLearning/mslearn-ai-agents issues #157 and #193: 400
// invalid_payload, param "agent", details []).
const agentDeprecated = "The 'agent' property is deprecated. Use 'agent_reference' instead."

// parseOptions are the Config settings parseCreate depends on.
type parseOptions struct {
	acceptAgentField bool // Config.AcceptDeprecatedAgentField
}

// jsonKind names the JSON type of raw the way the API's error messages do.
func jsonKind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	if bytes.ContainsAny(raw, ".eE") {
		return "a decimal"
	}
	return "an integer"
}

func isNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

func invalidType(param, want string, raw json.RawMessage) *apiError {
	return invalidRequest(param, "invalid_type",
		"Invalid type for '%s': expected %s, but got %s instead.", param, want, jsonKind(raw))
}

func missingParam(param string) *apiError {
	return invalidRequest(param, "missing_required_parameter", "Missing required parameter: '%s'.", param)
}

// decodeString decodes an optional string field; null counts as absent.
func decodeString(fields map[string]json.RawMessage, name string) (string, bool, *apiError) {
	raw, ok := fields[name]
	if !ok || isNull(raw) {
		return "", false, nil
	}
	var s string
	if jsonKind(raw) != "a string" || json.Unmarshal(raw, &s) != nil {
		return "", false, invalidType(name, "a string", raw)
	}
	return s, true, nil
}

// decodeBool decodes an optional boolean field; null counts as absent.
func decodeBool(fields map[string]json.RawMessage, name string, def bool) (bool, *apiError) {
	raw, ok := fields[name]
	if !ok || isNull(raw) {
		return def, nil
	}
	var b bool
	if json.Unmarshal(raw, &b) != nil {
		return false, invalidType(name, "a boolean", raw)
	}
	return b, nil
}

// parseCreate decodes and validates a create body with the default options.
func parseCreate(body []byte) (*createRequest, *apiError) {
	return parseCreateOpts(body, parseOptions{})
}

// parseCreateOpts decodes and validates a create body.
func parseCreateOpts(body []byte, opts parseOptions) (*createRequest, *apiError) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return nil, invalidRequest("", "",
			"We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. "+
				"The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)")
	}
	req := &createRequest{}
	var aerr *apiError

	var hasModel bool
	if req.model, hasModel, aerr = decodeString(fields, "model"); aerr != nil {
		return nil, aerr
	}
	if hasModel && req.model == "" {
		return nil, invalidRequest("model", "invalid_value", "Invalid value for 'model': expected a non-empty string.")
	}
	for _, name := range []string{"agent_reference", "agent"} {
		raw, ok := fields[name]
		if !ok || isNull(raw) {
			continue
		}
		if req.agentField != "" {
			return nil, invalidRequest(name, "invalid_value",
				"Invalid request: give only one of 'agent_reference' or 'agent'.")
		}
		if aerr := checkAgent(name, raw); aerr != nil {
			return nil, aerr
		}
		req.agentField, req.agentRaw = name, raw
	}
	if req.agentField == "agent" && !opts.acceptAgentField {
		return nil, invalidPayload("agent", agentDeprecated)
	}
	switch {
	case hasModel && req.agentField != "":
		return nil, invalidRequest("model", "invalid_value",
			"Invalid request: provide exactly one of 'model' or '%s', not both.", req.agentField)
	case !hasModel && req.agentField == "":
		return nil, missingParam("model")
	}
	if req.agentField != "" {
		var ref struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(req.agentRaw, &ref)
		req.agentName = ref.Name
		if aerr := checkAgentConflicts(fields); aerr != nil {
			return nil, aerr
		}
	}

	if raw, ok := fields["input"]; ok && !isNull(raw) {
		if k := jsonKind(raw); k != "a string" && k != "an array" {
			return nil, invalidType("input", "a string or an array", raw)
		}
		if !json.Valid(raw) {
			return nil, invalidType("input", "a string or an array", raw)
		}
		req.input = raw
	}
	if s, ok, aerr := decodeString(fields, "instructions"); aerr != nil {
		return nil, aerr
	} else if ok {
		req.instructions = &s
	}
	if aerr := req.parseTools(fields); aerr != nil {
		return nil, aerr
	}
	if req.followUp, aerr = parseFollowUp(fields); aerr != nil {
		return nil, aerr
	}
	if req.background, aerr = decodeBool(fields, "background", false); aerr != nil {
		return nil, aerr
	}
	if req.stream, aerr = decodeBool(fields, "stream", false); aerr != nil {
		return nil, aerr
	}
	if req.store, aerr = decodeBool(fields, "store", true); aerr != nil {
		return nil, aerr
	}
	if req.obfuscate, aerr = parseStreamOptions(fields["stream_options"]); aerr != nil {
		return nil, aerr
	}
	if req.metadata, aerr = parseMetadata(fields["metadata"]); aerr != nil {
		return nil, aerr
	}
	if raw, ok := fields["max_output_tokens"]; ok && !isNull(raw) {
		var n int64
		if jsonKind(raw) != "an integer" || json.Unmarshal(raw, &n) != nil {
			return nil, invalidType("max_output_tokens", "an integer", raw)
		}
		if n < minOutputTokens {
			return nil, invalidRequest("max_output_tokens", "integer_below_min_value",
				"Invalid 'max_output_tokens': integer below minimum value. Expected a value >= %d, but got %d instead.",
				minOutputTokens, n)
		}
		if n > MaxScenarioTokens {
			n = MaxScenarioTokens
		}
		req.maxOutput = int(n)
	}
	if req.background && !req.store {
		return nil, invalidRequest("background", "invalid_value",
			"Background mode requires store=true. Set 'store' to true or 'background' to false.")
	}
	return req, nil
}

// checkAgent validates an agent reference {type:"agent_reference", name, version?}.
func checkAgent(field string, raw json.RawMessage) *apiError {
	if jsonKind(raw) != "an object" {
		return invalidType(field, "an object", raw)
	}
	var ref map[string]json.RawMessage
	if json.Unmarshal(raw, &ref) != nil {
		return invalidType(field, "an object", raw)
	}
	name, ok, aerr := decodeString(ref, "name")
	if aerr != nil {
		return invalidType(field+".name", "a string", ref["name"])
	}
	if !ok || name == "" {
		return missingParam(field + ".name")
	}
	if _, _, aerr := decodeString(ref, "version"); aerr != nil {
		return invalidType(field+".version", "a string", ref["version"])
	}
	if typ, ok, aerr := decodeString(ref, "type"); aerr != nil {
		return invalidType(field+".type", "a string", ref["type"])
	} else if ok && typ != "agent_reference" {
		return invalidRequest(field+".type", "invalid_value",
			"Invalid value: '%s'. Supported values are: 'agent_reference'.", typ)
	}
	return nil
}

// checkAgentConflicts refuses the fields an agent reference does not allow:
// one field gets "Not allowed when agent is specified." naming it, several
// get "Invalid payload" with one details entry each, as the service answers.
func checkAgentConflicts(fields map[string]json.RawMessage) *apiError {
	var bad []string
	for _, f := range agentRefusedFields {
		if raw, ok := fields[f]; ok && !isNull(raw) {
			bad = append(bad, f)
		}
	}
	switch len(bad) {
	case 0:
		return nil
	case 1:
		return invalidPayload(bad[0], notAllowedWithAgent)
	}
	e := invalidPayload("", "Invalid payload")
	for _, f := range bad {
		e.details = append(e.details, payloadDetail{Code: "ValidationError", Message: notAllowedWithAgent, Param: f, Type: "error"})
	}
	return e
}

// parseTools checks tools[], remembers the MCP tools and the first tool a
// scripted call can call (mcp or function).
func (req *createRequest) parseTools(fields map[string]json.RawMessage) *apiError {
	raw, ok := fields["tools"]
	if !ok || isNull(raw) {
		return nil
	}
	if jsonKind(raw) != "an array" || json.Unmarshal(raw, &req.tools) != nil {
		return invalidType("tools", "an array", raw)
	}
	if len(req.tools) > maxTools {
		return invalidRequest("tools", "array_above_max_length",
			"Invalid 'tools': array too long. Expected an array with maximum length %d, but got an array with length %d instead.",
			maxTools, len(req.tools))
	}
	for i, t := range req.tools {
		param := fmt.Sprintf("tools[%d]", i)
		var tool map[string]json.RawMessage
		if jsonKind(t) != "an object" || json.Unmarshal(t, &tool) != nil {
			return invalidType(param, "an object", t)
		}
		typ, ok, aerr := decodeString(tool, "type")
		if aerr != nil {
			return invalidType(param+".type", "a string", tool["type"])
		}
		if !ok {
			return missingParam(param + ".type")
		}
		switch typ {
		case "function":
			name, ok, aerr := decodeString(tool, "name")
			if aerr != nil {
				return invalidType(param+".name", "a string", tool["name"])
			}
			if !ok || name == "" {
				return missingParam(param + ".name")
			}
			if req.call == nil {
				req.call = &toolCallTarget{function: true, name: name}
			}
			if req.call.function {
				req.call.functions = append(req.call.functions, name)
			}
		case "mcp":
			label, ok, aerr := decodeString(tool, "server_label")
			if aerr != nil {
				return invalidType(param+".server_label", "a string", tool["server_label"])
			}
			if !ok || label == "" {
				return missingParam(param + ".server_label")
			}
			names := allowedTools(tool["allowed_tools"])
			if len(names) == 0 {
				names = []string{defaultToolName}
			}
			req.mcpServers = append(req.mcpServers, mcpServer{label: label, tools: names})
			if req.call == nil {
				req.call = &toolCallTarget{label: label, name: names[0],
					approval: needsApproval(tool["require_approval"], names[0])}
			}
		}
	}
	return nil
}

// allowedTools returns the names of an allowed_tools list or filter (at
// most maxListedTools), or nil.
func allowedTools(raw json.RawMessage) []string {
	var names []string
	if json.Unmarshal(raw, &names) != nil || len(names) == 0 {
		var filter struct {
			ToolNames []string `json:"tool_names"`
		}
		if json.Unmarshal(raw, &filter) != nil {
			return nil
		}
		names = filter.ToolNames
	}
	out := make([]string, 0, min(len(names), maxListedTools))
	for _, n := range names {
		if n != "" && len(out) < maxListedTools {
			out = append(out, n)
		}
	}
	return out
}

// needsApproval reports whether a call of tool name needs approval under an
// MCP tool's require_approval: only "never", or a filter whose "never" list
// names the tool, lets it run; the default is "always" (OpenAI API reference,
// MCP tool require_approval; Microsoft Learn, "Azure OpenAI Responses API",
// MCP approvals).
func needsApproval(raw json.RawMessage, name string) bool {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s != "never"
	}
	var filter struct {
		Never *struct {
			ToolNames []string `json:"tool_names"`
		} `json:"never"`
	}
	if json.Unmarshal(raw, &filter) == nil && filter.Never != nil {
		for _, n := range filter.Never.ToolNames {
			if n == name {
				return false
			}
		}
	}
	return true
}

// parseMetadata checks the metadata map against the real API's limits.
func parseMetadata(raw json.RawMessage) (map[string]string, *apiError) {
	if raw == nil || isNull(raw) {
		return map[string]string{}, nil
	}
	var fields map[string]json.RawMessage
	if jsonKind(raw) != "an object" || json.Unmarshal(raw, &fields) != nil {
		return nil, invalidType("metadata", "an object", raw)
	}
	if len(fields) > maxMetadataPairs {
		return nil, invalidRequest("metadata", "object_above_max_properties",
			"Invalid 'metadata': too many properties. Expected an object with at most %d properties, but got %d instead.",
			maxMetadataPairs, len(fields))
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	md := make(map[string]string, len(fields))
	for _, k := range keys {
		if utf8.RuneCountInString(k) > maxMetadataKey {
			return nil, invalidRequest("metadata", "string_above_max_length",
				"Invalid 'metadata': key '%s' is longer than %d characters.", k, maxMetadataKey)
		}
		var v string
		if jsonKind(fields[k]) != "a string" || json.Unmarshal(fields[k], &v) != nil {
			return nil, invalidType("metadata."+k, "a string", fields[k])
		}
		if utf8.RuneCountInString(v) > maxMetadataValue {
			return nil, invalidRequest("metadata."+k, "string_above_max_length",
				"Invalid 'metadata.%s': string too long. Expected a string with maximum length %d, but got a string with length %d instead.",
				k, maxMetadataValue, utf8.RuneCountInString(v))
		}
		md[k] = v
	}
	return md, nil
}

// parseStreamOptions reads stream_options.include_obfuscation, true unless
// set to false (openai-go v3.98.0 ResponseNewParamsStreamOptions: "When
// true, stream obfuscation will be enabled... random characters to an
// obfuscation field on streaming delta events").
func parseStreamOptions(raw json.RawMessage) (bool, *apiError) {
	if len(raw) == 0 || isNull(raw) {
		return true, nil
	}
	var fields map[string]json.RawMessage
	if jsonKind(raw) != "an object" || json.Unmarshal(raw, &fields) != nil {
		return false, invalidType("stream_options", "an object", raw)
	}
	v, aerr := decodeBool(fields, "include_obfuscation", true)
	if aerr != nil {
		aerr.param = "stream_options.include_obfuscation"
		aerr.message = "Invalid type for 'stream_options.include_obfuscation': expected a boolean, but got " +
			jsonKind(fields["include_obfuscation"]) + " instead."
	}
	return v, aerr
}
