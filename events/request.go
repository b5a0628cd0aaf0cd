package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/foundryq/foundryq/internal/owned"
)

// Limits enforced by Validate.
const (
	MaxMetadataKeys      = 15  // user keys; Foundry allows 16 and foundryq adds run_id
	MaxMetadataKeyLen    = 64  // characters
	MaxMetadataValueLen  = 512 // characters
	MetadataRunIDKey     = "run_id"
	MinMaxOutputTokens   = 16
	MaxTimeoutSeconds    = 86400
	MaxNameLen           = 256 // model deployment names, agent names and versions
	MaxCancelReasonLen   = 512
	maxReportedFieldRune = 64
)

// ReservedOptions are the Responses fields foundryq sets itself; options
// may not carry them. "agent" and "stream_options" are reserved besides
// the fields of the request because the agent reference field name is
// configurable and the worker owns how the stream is shaped. The foundry
// client refuses the same list.
var ReservedOptions = owned.RequestFields

// AgentRef references a Foundry agent by name and optional version.
type AgentRef struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
}

// RunRequest is the JSON body published on <prefix>.runs.<run_id>.
type RunRequest struct {
	// RunID names the run; it must match [A-Za-z0-9_-]{1,64} and equal the subject's last token.
	RunID string `json:"run_id"`
	// Model is a deployment name. Exactly one of Model and Agent is set.
	Model string `json:"model,omitempty"`
	// Agent references a Foundry agent. Exactly one of Model and Agent is set.
	Agent *AgentRef `json:"agent,omitempty"`
	// Input is a non-empty JSON string or a non-empty array of Responses input items (objects).
	Input json.RawMessage `json:"input"`
	// Instructions is the system/developer message.
	Instructions string `json:"instructions,omitempty"`
	// Tools are Responses tools passed through; each is an object with a string "type".
	Tools []json.RawMessage `json:"tools,omitempty"`
	// Metadata is forwarded to Foundry with run_id added (at most 15 keys; run_id is reserved).
	Metadata map[string]string `json:"metadata,omitempty"`
	// MaxOutputTokens is 0 (no limit) or at least 16.
	MaxOutputTokens int `json:"max_output_tokens,omitempty"`
	// TimeoutSeconds is the run deadline (0 = the worker default; at most 86400);
	// on expiry the worker cancels server-side with reason "timeout".
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	// CancelOnDisconnectSeconds, if > 0, cancels the run server-side (reason
	// "abandoned") when no watcher heartbeat arrived for that long (at most 86400).
	CancelOnDisconnectSeconds int `json:"cancel_on_disconnect_seconds,omitempty"`
	// InputTimeoutSeconds, if > 0, bounds each pause of a run that asks
	// (input.required): unanswered for that long, the run ends run.failed
	// input_timeout (at most 86400; 0: no bound but the run's own deadline).
	InputTimeoutSeconds int `json:"input_timeout_seconds,omitempty"`
	// Options are raw Responses fields merged into the request body
	// (e.g. temperature, reasoning); keys in ReservedOptions are refused.
	Options map[string]json.RawMessage `json:"options,omitempty"`
	// FairnessKey names who the run is for (a customer, a team) when the
	// workers share the queue fairly between keys: [A-Za-z0-9_-]{1,64};
	// empty: the header HeaderFairnessKey, else DefaultFairnessKey. A
	// scheduling hint, not part of the request's identity (Digest).
	FairnessKey string `json:"fairness_key,omitempty"`
	// Priority is "high", "normal" or "low"; empty: the header
	// HeaderPriority, else "normal". Not part of Digest either.
	Priority Priority `json:"priority,omitempty"`
}

// DecodeRunRequest decodes and validates a run request. Unknown fields,
// trailing data and wrong JSON types are refused. Every error is a
// *ValidationError (errors.Is(err, ErrInvalidRequest)). Raw JSON fields
// (input, tools, options) are returned compacted.
func DecodeRunRequest(data []byte) (RunRequest, error) {
	var r RunRequest
	if err := decodeStrict(data, &r, requestFieldSentinels); err != nil {
		return RunRequest{}, err
	}
	if err := checkExactKeys(data, requestFields, map[string]map[string]bool{"agent": agentFields}); err != nil {
		return RunRequest{}, err
	}
	r.compact()
	if err := r.Validate(); err != nil {
		return r, err
	}
	return r, nil
}

// DecodeRunMsg decodes a run request received on subject and checks that
// its run_id equals the subject's run id. On error the returned request
// holds whatever could be decoded; use n.RunIDFromSubject for the run id.
func DecodeRunMsg(subject string, data []byte, n Names) (RunRequest, error) {
	id, ok := n.RunIDFromSubject(subject)
	if !ok || subject != n.RunSubject(id) {
		return RunRequest{}, invalid("run_id", ErrBadRunID, "subject %q is not a run subject under prefix %q", subject, n.prefix())
	}
	r, err := DecodeRunRequest(data)
	if err != nil {
		return r, err
	}
	if r.RunID != id {
		return r, invalid("run_id", ErrBadRunID, "%q does not equal the subject's run id %q", r.RunID, id)
	}
	return r, nil
}

var requestFieldSentinels = map[string]error{
	"run_id":                       ErrBadRunID,
	"model":                        ErrBadModel,
	"agent":                        ErrBadAgent,
	"agent.name":                   ErrBadAgent,
	"agent.version":                ErrBadAgent,
	"input":                        ErrBadInput,
	"instructions":                 ErrMalformed,
	"tools":                        ErrBadTools,
	"metadata":                     ErrBadMetadata,
	"max_output_tokens":            ErrBadMaxOutputTokens,
	"timeout_seconds":              ErrBadTimeout,
	"cancel_on_disconnect_seconds": ErrBadCancelOnDisconnect,
	"input_timeout_seconds":        ErrBadTimeout,
	"options":                      ErrBadOptions,
	"fairness_key":                 ErrBadFairnessKey,
	"priority":                     ErrBadPriority,
}

var (
	requestFields = map[string]bool{
		"run_id": true, "model": true, "agent": true, "input": true, "instructions": true, "tools": true,
		"metadata": true, "max_output_tokens": true, "timeout_seconds": true, "cancel_on_disconnect_seconds": true,
		"input_timeout_seconds": true, "options": true, "fairness_key": true, "priority": true,
	}
	agentFields = map[string]bool{"name": true, "version": true}
)

// checkExactKeys refuses keys that encoding/json would match only
// case-insensitively ("Model") and keys given twice, in the top-level
// object and in the named nested objects. data is known to be valid JSON.
func checkExactKeys(data []byte, known map[string]bool, nested map[string]map[string]bool) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return invalid("body", ErrMalformed, "want a JSON object")
	}
	if err := scanKeys(data, "", known); err != nil {
		return err
	}
	for name, fields := range nested {
		if v, ok := top[name]; ok && isObject(v) {
			if err := scanKeys(v, name+".", fields); err != nil {
				return err
			}
		}
	}
	return nil
}

func scanKeys(obj []byte, path string, known map[string]bool) error {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil { // '{'
		return invalid("body", ErrMalformed, "want a JSON object")
	}
	seen := make(map[string]bool, len(known))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return invalid("body", ErrMalformed, "malformed JSON")
		}
		key, _ := tok.(string)
		field := path + truncate(key)
		if key == "" {
			field = "body"
		}
		if !known[key] {
			return invalid(field, ErrUnknownField, "unknown field %q (not part of the v1 contract; names are lowercase)", truncate(key))
		}
		if seen[key] {
			return invalid(field, ErrMalformed, "field given twice")
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return invalid(field, ErrMalformed, "malformed JSON")
		}
	}
	return nil
}

// decodeStrict decodes one JSON value into v, refusing unknown fields and
// trailing data, and turns decoder errors into *ValidationError.
func decodeStrict(data []byte, v any, sentinels map[string]error) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, sentinels)
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("body", ErrMalformed, "unexpected data after the JSON object")
	}
	return nil
}

func decodeError(err error, sentinels map[string]error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return invalid("body", ErrMalformed, "empty body, want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("body", ErrMalformed, "truncated JSON")
	case errors.As(err, &syn):
		return invalid("body", ErrMalformed, "malformed JSON at offset %d: %s", syn.Offset, syn.Error())
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return invalid("body", ErrMalformed, "want a JSON object, got %s", typ.Value)
		}
		sentinel := ErrMalformed
		top, _, _ := strings.Cut(field, ".")
		if s, ok := sentinels[field]; ok {
			sentinel = s
		} else if s, ok := sentinels[top]; ok {
			sentinel = s
		}
		return invalid(field, sentinel, "wrong JSON type: got %s, want %s", typ.Value, jsonTypeName(typ.Type.Kind().String()))
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		field := truncate(name)
		if field == "" {
			field = "body"
		}
		return invalid(field, ErrUnknownField, "unknown field %q (not part of the v1 contract)", truncate(name))
	}
	return invalid("body", ErrMalformed, "%s", strings.TrimPrefix(msg, "json: "))
}

func jsonTypeName(kind string) string {
	switch kind {
	case "string":
		return "string"
	case "int", "int64", "uint64", "int32":
		return "integer"
	case "map", "struct", "ptr":
		return "object"
	case "slice", "array":
		return "array"
	case "bool":
		return "boolean"
	}
	return kind
}

// compact rewrites the raw JSON fields in compact form.
func (r *RunRequest) compact() {
	r.Input = compactRaw(r.Input)
	for i := range r.Tools {
		r.Tools[i] = compactRaw(r.Tools[i])
	}
	for k, v := range r.Options {
		r.Options[k] = compactRaw(v)
	}
}

func compactRaw(m json.RawMessage) json.RawMessage {
	if len(m) == 0 {
		return m
	}
	var b bytes.Buffer
	if err := json.Compact(&b, m); err != nil {
		return m
	}
	return json.RawMessage(b.Bytes())
}

// Validate checks every rule of the v1 contract and returns the first
// violation as a *ValidationError.
func (r RunRequest) Validate() error {
	if r.RunID == "" {
		return invalid("run_id", ErrBadRunID, "required")
	}
	if !ValidRunID(r.RunID) {
		return invalid("run_id", ErrBadRunID, "%q must match [A-Za-z0-9_-]{1,64}", truncate(r.RunID))
	}
	switch {
	case r.Model != "" && r.Agent != nil:
		return invalid("model", ErrModelOrAgent, "set exactly one of model or agent, not both")
	case r.Model == "" && r.Agent == nil:
		return invalid("model", ErrModelOrAgent, "set exactly one of model (a deployment name) or agent {name, version?}")
	case r.Model != "":
		if reason := checkName(r.Model, true); reason != "" {
			return invalid("model", ErrBadModel, "%s", reason)
		}
	default:
		if reason := checkName(r.Agent.Name, true); reason != "" {
			return invalid("agent.name", ErrBadAgent, "%s", reason)
		}
		if reason := checkName(r.Agent.Version, false); reason != "" {
			return invalid("agent.version", ErrBadAgent, "%s", reason)
		}
	}
	if err := validateInput(r.Input); err != nil {
		return err
	}
	if r.Agent != nil {
		if err := r.validateAgentFields(); err != nil {
			return err
		}
	}
	for i, t := range r.Tools {
		if err := validateTool(i, t); err != nil {
			return err
		}
	}
	if err := validateMetadata(r.Metadata); err != nil {
		return err
	}
	if r.MaxOutputTokens < 0 || (r.MaxOutputTokens > 0 && r.MaxOutputTokens < MinMaxOutputTokens) {
		return invalid("max_output_tokens", ErrBadMaxOutputTokens, "%d must be 0 (no limit) or at least %d", r.MaxOutputTokens, MinMaxOutputTokens)
	}
	if r.TimeoutSeconds < 0 || r.TimeoutSeconds > MaxTimeoutSeconds {
		return invalid("timeout_seconds", ErrBadTimeout, "%d must be between 0 (worker default) and %d", r.TimeoutSeconds, MaxTimeoutSeconds)
	}
	if r.CancelOnDisconnectSeconds < 0 || r.CancelOnDisconnectSeconds > MaxTimeoutSeconds {
		return invalid("cancel_on_disconnect_seconds", ErrBadCancelOnDisconnect, "%d must be between 0 (off) and %d", r.CancelOnDisconnectSeconds, MaxTimeoutSeconds)
	}
	if r.InputTimeoutSeconds < 0 || r.InputTimeoutSeconds > MaxTimeoutSeconds {
		return invalid("input_timeout_seconds", ErrBadTimeout, "%d must be between 0 (none) and %d", r.InputTimeoutSeconds, MaxTimeoutSeconds)
	}
	if err := validateOptions(r.Options); err != nil {
		return err
	}
	if r.FairnessKey != "" {
		if reason := checkFairnessKey(r.FairnessKey); reason != "" {
			return invalid("fairness_key", ErrBadFairnessKey, "%s", reason)
		}
	}
	if r.Priority != "" && !r.Priority.Valid() {
		return invalid("priority", ErrBadPriority, "%s", checkPriority(string(r.Priority)))
	}
	return nil
}

// checkName checks model deployment names and agent names/versions:
// printable, no whitespace, at most MaxNameLen bytes.
func checkName(s string, required bool) string {
	if s == "" {
		if required {
			return "required"
		}
		return ""
	}
	if len(s) > MaxNameLen {
		return fmt.Sprintf("longer than %d bytes", MaxNameLen)
	}
	if !utf8.ValidString(s) {
		return "not valid UTF-8"
	}
	for _, c := range s {
		if unicode.IsSpace(c) || !unicode.IsPrint(c) {
			return fmt.Sprintf("%q contains whitespace or a control character", truncate(s))
		}
	}
	return ""
}

func validateInput(in json.RawMessage) error {
	trimmed := bytes.TrimSpace(in)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return invalid("input", ErrNoInput, "required: a non-empty string or a non-empty array of input items")
	}
	switch trimmed[0] {
	case '"':
		var s string
		if err := json.Unmarshal(trimmed, &s); err != nil {
			return invalid("input", ErrBadInput, "not a valid JSON string")
		}
		if strings.TrimSpace(s) == "" {
			return invalid("input", ErrNoInput, "the input string is empty")
		}
		return nil
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(trimmed, &items); err != nil {
			return invalid("input", ErrBadInput, "not a valid JSON array")
		}
		if len(items) == 0 {
			return invalid("input", ErrNoInput, "the input array is empty")
		}
		for i, it := range items {
			if !isObject(it) {
				return invalid(fmt.Sprintf("input[%d]", i), ErrBadInput, "each input item must be a JSON object")
			}
		}
		return nil
	}
	return invalid("input", ErrBadInput, "must be a string or an array of input items, got %s", jsonKind(trimmed))
}

// AgentRefusedOptions are the options Foundry refuses next to an agent
// reference: the agent definition owns them. Foundry answers 400
// invalid_payload "Not allowed when agent is specified." naming the field
// (microsoft/agent-framework issues #5130 for tools and #2573 for
// temperature and top_p; the same answer is reported for instructions, text
// and reasoning).
var AgentRefusedOptions = []string{"reasoning", "temperature", "text", "top_p"}

// agentConflictReason is the end of every ErrAgentConflict message.
const agentConflictReason = "the agent definition sets it, and Foundry refuses a request that names an agent and sets it too " +
	`(400 invalid_payload "Not allowed when agent is specified."); change it on the agent, or run a model instead`

// validateAgentFields refuses the fields a Foundry agent run may not set.
func (r RunRequest) validateAgentFields() error {
	if r.Instructions != "" {
		return invalid("instructions", ErrAgentConflict, "not allowed with agent: %s", agentConflictReason)
	}
	if len(r.Tools) > 0 {
		return invalid("tools", ErrAgentConflict, "not allowed with agent: %s", agentConflictReason)
	}
	for _, k := range AgentRefusedOptions {
		if _, ok := r.Options[k]; ok {
			return invalid("options."+k, ErrAgentConflict, "not allowed with agent: %s", agentConflictReason)
		}
	}
	return nil
}

// validateMCPApproval accepts every documented form of an MCP tool's
// require_approval: absent or null (Foundry's default, "always"),
// "always", "never", or a filter object {"always"?: F, "never"?: F} where F
// is {"tool_names"?: [names], "read_only"?: bool} (OpenAI API reference,
// MCP tool; Microsoft Learn, "Azure OpenAI Responses API", MCP approvals).
// A call that needs approval pauses the run until its caller answers.
func validateMCPApproval(field string, raw json.RawMessage) error {
	field += ".require_approval"
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var s string
	if raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		if s == "always" || s == "never" {
			return nil
		}
		return invalid(field, ErrMCPApproval, "%q is not one of \"always\" or \"never\" (or a filter object)", truncate(s))
	}
	if raw[0] != '{' {
		return invalid(field, ErrMCPApproval, "%s is not \"always\", \"never\" or a filter object", jsonKind(raw))
	}
	var filter map[string]json.RawMessage
	if json.Unmarshal(raw, &filter) != nil {
		return invalid(field, ErrMCPApproval, "not a valid filter object")
	}
	for _, k := range slices.Sorted(maps.Keys(filter)) {
		if k != "always" && k != "never" {
			return invalid(field+"."+truncate(k), ErrMCPApproval, "unknown key: a filter has \"always\" and \"never\"")
		}
		var f struct {
			ToolNames []string `json:"tool_names"`
			ReadOnly  *bool    `json:"read_only"`
		}
		dec := json.NewDecoder(bytes.NewReader(filter[k]))
		dec.DisallowUnknownFields()
		if !isObject(filter[k]) || dec.Decode(&f) != nil {
			return invalid(field+"."+k, ErrMCPApproval, "want {\"tool_names\": [names], \"read_only\": bool}")
		}
	}
	return nil
}

func validateTool(i int, t json.RawMessage) error {
	field := fmt.Sprintf("tools[%d]", i)
	if !isObject(t) {
		return invalid(field, ErrBadTools, "each tool must be a JSON object, got %s", jsonKind(bytes.TrimSpace(t)))
	}
	var head struct {
		Type            json.RawMessage `json:"type"`
		RequireApproval json.RawMessage `json:"require_approval"`
	}
	if err := json.Unmarshal(t, &head); err != nil {
		return invalid(field, ErrBadTools, "not a valid JSON object")
	}
	var typ string
	if len(head.Type) == 0 || json.Unmarshal(head.Type, &typ) != nil || strings.TrimSpace(typ) == "" {
		return invalid(field+".type", ErrBadTools, "required: a non-empty string such as \"mcp\"")
	}
	if typ == "mcp" {
		return validateMCPApproval(field, head.RequireApproval)
	}
	return nil
}

func validateMetadata(md map[string]string) error {
	if len(md) > MaxMetadataKeys {
		return invalid("metadata", ErrBadMetadata, "%d keys, at most %d allowed (foundryq adds %q)", len(md), MaxMetadataKeys, MetadataRunIDKey)
	}
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		field := "metadata." + truncate(k)
		switch {
		case k == "":
			return invalid("metadata", ErrBadMetadata, "empty key")
		case k == MetadataRunIDKey:
			return invalid(field, ErrBadMetadata, "key %q is reserved: foundryq sets it to the run id", MetadataRunIDKey)
		case utf8.RuneCountInString(k) > MaxMetadataKeyLen:
			return invalid(field, ErrBadMetadata, "key longer than %d characters", MaxMetadataKeyLen)
		case utf8.RuneCountInString(md[k]) > MaxMetadataValueLen:
			return invalid(field, ErrBadMetadata, "value longer than %d characters", MaxMetadataValueLen)
		}
	}
	return nil
}

func validateOptions(opts map[string]json.RawMessage) error {
	keys := make([]string, 0, len(opts))
	for k := range opts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		field := "options." + truncate(k)
		switch {
		case k == "":
			return invalid("options", ErrBadOptions, "empty key")
		case owned.Is(k):
			return invalid(field, ErrBadOptions, "%q is set by foundryq and cannot be overridden in options", k)
		case !json.Valid(opts[k]):
			return invalid(field, ErrBadOptions, "value is not valid JSON")
		}
	}
	return nil
}

func isObject(m json.RawMessage) bool {
	t := bytes.TrimSpace(m)
	return len(t) > 0 && t[0] == '{' && json.Valid(t)
}

func jsonKind(t []byte) string {
	if len(t) == 0 {
		return "nothing"
	}
	switch t[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// truncate shortens user-supplied text quoted in error messages.
func truncate(s string) string {
	if utf8.RuneCountInString(s) <= maxReportedFieldRune {
		return s
	}
	r := []rune(s)
	return string(r[:maxReportedFieldRune]) + "…"
}

// NewerFields returns the names of the fields of a run request (received
// on subject) that this version does not know, when they are its only
// fault: with them left out, the request is valid. A worker hands such a
// request back for a while instead of failing it, since a newer worker
// may know them (a rolling upgrade). It returns nil for a valid request,
// for one with any other fault, and for keys that are known names in
// another case ("Model"): no version knows those.
func NewerFields(subject string, data []byte, n Names) []string {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil
	}
	var unknown []string
	// strip deletes obj's unknown keys and returns the known ones with
	// them, to look for keys given twice.
	strip := func(obj map[string]json.RawMessage, path string, known map[string]bool) (map[string]bool, bool) {
		all := maps.Clone(known)
		for k := range obj {
			if known[k] {
				continue
			}
			for name := range known {
				if strings.EqualFold(k, name) {
					return nil, false
				}
			}
			unknown = append(unknown, path+truncate(k))
			all[k] = true
			delete(obj, k)
		}
		return all, true
	}
	topKeys, ok := strip(top, "", requestFields)
	if !ok {
		return nil
	}
	nested := map[string]map[string]bool{}
	if raw, ok := top["agent"]; ok && isObject(raw) {
		var agent map[string]json.RawMessage
		if json.Unmarshal(raw, &agent) != nil {
			return nil
		}
		if nested["agent"], ok = strip(agent, "agent.", agentFields); !ok {
			return nil
		}
		top["agent"], _ = json.Marshal(agent)
	}
	if len(unknown) == 0 || checkExactKeys(data, topKeys, nested) != nil {
		return nil
	}
	rest, err := json.Marshal(top)
	if err != nil {
		return nil
	}
	if _, err := DecodeRunMsg(subject, rest, n); err != nil {
		return nil
	}
	sort.Strings(unknown)
	return unknown
}
