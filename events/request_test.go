package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/foundryq/foundryq/events"
)

func TestDecodeRunRequest(t *testing.T) {
	t.Parallel()
	meta := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf(`"k%d":"v"`, i)
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	tests := []struct {
		name  string
		body  string
		is    error  // nil: valid
		field string // field named by the error
	}{
		{"minimal model", `{"run_id":"r1","model":"gpt","input":"hi"}`, nil, ""},
		{"agent with version", `{"run_id":"r1","agent":{"name":"helper","version":"3"},"input":"hi"}`, nil, ""},
		{"full", `{"run_id":"r-1_x","model":"gpt","input":[{"role":"user","content":"hi"}],"instructions":"be brief",
			"tools":[{"type":"mcp","server_label":"x","server_url":"https://x","require_approval":"never"}],"metadata":{"team":"a"},
			"max_output_tokens":16,"timeout_seconds":86400,"cancel_on_disconnect_seconds":30,
			"options":{"temperature":0.2,"reasoning":{"effort":"low"},"previous_response_id":"resp_1"}}`, nil, ""},
		{"15 metadata keys", `{"run_id":"r1","model":"m","input":"x","metadata":` + meta(15) + `}`, nil, ""},

		{"empty body", ``, events.ErrMalformed, "body"},
		{"not JSON", `{"run_id":`, events.ErrMalformed, "body"},
		{"syntax error", `{"run_id" "r1"}`, events.ErrMalformed, "body"},
		{"array body", `[1]`, events.ErrMalformed, "body"},
		{"trailing data", `{"run_id":"r1","model":"m","input":"x"} {}`, events.ErrMalformed, "body"},
		{"unknown field", `{"run_id":"r1","model":"m","input":"x","temperature":1}`, events.ErrUnknownField, "temperature"},
		{"field in capitals", `{"run_id":"r1","MODEL":"m","input":"x"}`, events.ErrUnknownField, "MODEL"},
		{"field given twice", `{"run_id":"r1","model":"m","model":"n","input":"x"}`, events.ErrMalformed, "model"},
		{"agent field in capitals", `{"run_id":"r1","agent":{"Name":"a"},"input":"x"}`, events.ErrUnknownField, "agent.Name"},
		{"unknown agent field", `{"run_id":"r1","agent":{"name":"a","id":"x"},"input":"x"}`, events.ErrUnknownField, "id"},

		{"no run_id", `{"model":"m","input":"x"}`, events.ErrBadRunID, "run_id"},
		{"run_id with dot", `{"run_id":"a.b","model":"m","input":"x"}`, events.ErrBadRunID, "run_id"},
		{"run_id too long", `{"run_id":"` + strings.Repeat("a", 65) + `","model":"m","input":"x"}`, events.ErrBadRunID, "run_id"},
		{"run_id number", `{"run_id":5,"model":"m","input":"x"}`, events.ErrBadRunID, "run_id"},

		{"neither model nor agent", `{"run_id":"r1","input":"x"}`, events.ErrModelOrAgent, "model"},
		{"both model and agent", `{"run_id":"r1","model":"m","agent":{"name":"a"},"input":"x"}`, events.ErrModelOrAgent, "model"},
		{"model with space", `{"run_id":"r1","model":"gpt 4","input":"x"}`, events.ErrBadModel, "model"},
		{"agent without name", `{"run_id":"r1","agent":{"version":"1"},"input":"x"}`, events.ErrBadAgent, "agent.name"},
		{"agent bad version", `{"run_id":"r1","agent":{"name":"a","version":"1\n"},"input":"x"}`, events.ErrBadAgent, "agent.version"},
		{"agent not object", `{"run_id":"r1","agent":"a","input":"x"}`, events.ErrBadAgent, "agent"},

		{"no input", `{"run_id":"r1","model":"m"}`, events.ErrNoInput, "input"},
		{"null input", `{"run_id":"r1","model":"m","input":null}`, events.ErrNoInput, "input"},
		{"empty input string", `{"run_id":"r1","model":"m","input":"  "}`, events.ErrNoInput, "input"},
		{"empty input array", `{"run_id":"r1","model":"m","input":[]}`, events.ErrNoInput, "input"},
		{"input number", `{"run_id":"r1","model":"m","input":3}`, events.ErrBadInput, "input"},
		{"input object", `{"run_id":"r1","model":"m","input":{"a":1}}`, events.ErrBadInput, "input"},
		{"input item not object", `{"run_id":"r1","model":"m","input":[{"role":"user"},"x"]}`, events.ErrBadInput, "input[1]"},

		{"tools not array", `{"run_id":"r1","model":"m","input":"x","tools":{"type":"mcp"}}`, events.ErrBadTools, "tools"},
		{"tool not object", `{"run_id":"r1","model":"m","input":"x","tools":["mcp"]}`, events.ErrBadTools, "tools[0]"},
		{"tool without type", `{"run_id":"r1","model":"m","input":"x","tools":[{"type":"function","name":"g"},{"name":"f"}]}`, events.ErrBadTools, "tools[1].type"},
		{"tool type not string", `{"run_id":"r1","model":"m","input":"x","tools":[{"type":1}]}`, events.ErrBadTools, "tools[0].type"},

		{"16 metadata keys", `{"run_id":"r1","model":"m","input":"x","metadata":` + meta(16) + `}`, events.ErrBadMetadata, "metadata"},
		{"metadata run_id", `{"run_id":"r1","model":"m","input":"x","metadata":{"run_id":"r1"}}`, events.ErrBadMetadata, "metadata.run_id"},
		{"metadata long key", `{"run_id":"r1","model":"m","input":"x","metadata":{"` + strings.Repeat("k", 65) + `":"v"}}`, events.ErrBadMetadata, "metadata." + strings.Repeat("k", 64) + "…"},
		{"metadata long value", `{"run_id":"r1","model":"m","input":"x","metadata":{"k":"` + strings.Repeat("v", 513) + `"}}`, events.ErrBadMetadata, "metadata.k"},
		{"metadata empty key", `{"run_id":"r1","model":"m","input":"x","metadata":{"":"v"}}`, events.ErrBadMetadata, "metadata"},
		{"metadata number value", `{"run_id":"r1","model":"m","input":"x","metadata":{"k":1}}`, events.ErrBadMetadata, "metadata"},

		{"max_output_tokens 15", `{"run_id":"r1","model":"m","input":"x","max_output_tokens":15}`, events.ErrBadMaxOutputTokens, "max_output_tokens"},
		{"max_output_tokens negative", `{"run_id":"r1","model":"m","input":"x","max_output_tokens":-1}`, events.ErrBadMaxOutputTokens, "max_output_tokens"},
		{"max_output_tokens float", `{"run_id":"r1","model":"m","input":"x","max_output_tokens":1.5}`, events.ErrBadMaxOutputTokens, "max_output_tokens"},
		{"timeout negative", `{"run_id":"r1","model":"m","input":"x","timeout_seconds":-1}`, events.ErrBadTimeout, "timeout_seconds"},
		{"timeout too long", `{"run_id":"r1","model":"m","input":"x","timeout_seconds":86401}`, events.ErrBadTimeout, "timeout_seconds"},
		{"disconnect negative", `{"run_id":"r1","model":"m","input":"x","cancel_on_disconnect_seconds":-5}`, events.ErrBadCancelOnDisconnect, "cancel_on_disconnect_seconds"},
		{"disconnect too long", `{"run_id":"r1","model":"m","input":"x","cancel_on_disconnect_seconds":100000}`, events.ErrBadCancelOnDisconnect, "cancel_on_disconnect_seconds"},

		{"fairness key and priority", `{"run_id":"r1","model":"m","input":"x","fairness_key":"team-A_1","priority":"high"}`, nil, ""},
		{"fairness key 64", `{"run_id":"r1","model":"m","input":"x","fairness_key":"` + strings.Repeat("k", 64) + `"}`, nil, ""},
		{"fairness key 65", `{"run_id":"r1","model":"m","input":"x","fairness_key":"` + strings.Repeat("k", 65) + `"}`, events.ErrBadFairnessKey, "fairness_key"},
		{"fairness key with dot", `{"run_id":"r1","model":"m","input":"x","fairness_key":"a.b"}`, events.ErrBadFairnessKey, "fairness_key"},
		{"fairness key number", `{"run_id":"r1","model":"m","input":"x","fairness_key":7}`, events.ErrBadFairnessKey, "fairness_key"},
		{"priority unknown", `{"run_id":"r1","model":"m","input":"x","priority":"urgent"}`, events.ErrBadPriority, "priority"},
		{"priority in capitals", `{"run_id":"r1","model":"m","input":"x","priority":"HIGH"}`, events.ErrBadPriority, "priority"},
		{"priority number", `{"run_id":"r1","model":"m","input":"x","priority":1}`, events.ErrBadPriority, "priority"},

		{"options not object", `{"run_id":"r1","model":"m","input":"x","options":[1]}`, events.ErrBadOptions, "options"},
		{"options stream", `{"run_id":"r1","model":"m","input":"x","options":{"stream":false}}`, events.ErrBadOptions, "options.stream"},
		{"options model", `{"run_id":"r1","model":"m","input":"x","options":{"model":"other"}}`, events.ErrBadOptions, "options.model"},
		{"options agent_reference", `{"run_id":"r1","model":"m","input":"x","options":{"agent_reference":{}}}`, events.ErrBadOptions, "options.agent_reference"},
		{"options empty key", `{"run_id":"r1","model":"m","input":"x","options":{"":1}}`, events.ErrBadOptions, "options"},

		// A Foundry agent brings its own instructions, tools and model settings:
		// Foundry refuses them with 400 invalid_payload "Not allowed when agent is specified."
		{"agent with metadata and options", `{"run_id":"r1","agent":{"name":"a"},"input":"x","metadata":{"k":"v"},"max_output_tokens":64,"options":{"previous_response_id":"resp_1"}}`, nil, ""},
		{"agent with instructions", `{"run_id":"r1","agent":{"name":"a"},"input":"x","instructions":"be brief"}`, events.ErrAgentConflict, "instructions"},
		{"agent with tools", `{"run_id":"r1","agent":{"name":"a"},"input":"x","tools":[{"type":"mcp","server_label":"x","server_url":"https://x","require_approval":"never"}]}`, events.ErrAgentConflict, "tools"},
		{"agent with options.text", `{"run_id":"r1","agent":{"name":"a"},"input":"x","options":{"text":{"format":{"type":"text"}}}}`, events.ErrAgentConflict, "options.text"},
		{"agent with options.reasoning", `{"run_id":"r1","agent":{"name":"a"},"input":"x","options":{"reasoning":{"effort":"low"}}}`, events.ErrAgentConflict, "options.reasoning"},
		{"agent with options.temperature", `{"run_id":"r1","agent":{"name":"a"},"input":"x","options":{"temperature":0.1}}`, events.ErrAgentConflict, "options.temperature"},
		{"agent with options.top_p", `{"run_id":"r1","agent":{"name":"a"},"input":"x","options":{"top_p":0.5}}`, events.ErrAgentConflict, "options.top_p"},
		{"model with options.text and reasoning", `{"run_id":"r1","model":"m","input":"x","instructions":"i","options":{"text":{"format":{"type":"text"}},"reasoning":{"effort":"low"}}}`, nil, ""},

		// Every documented form of require_approval is accepted: a call that
		// needs approval pauses the run until its caller answers.
		{"mcp never", `{"run_id":"r1","model":"m","input":"x","tools":[{"type":"function","name":"f"},{"type":"mcp","server_label":"x","server_url":"https://x","require_approval":"never"}]}`, nil, ""},
		{"mcp without require_approval", `{"run_id":"r1","model":"m","input":"x","tools":[{"type":"mcp","server_label":"x","server_url":"https://x"}]}`, nil, ""},
		{"mcp always", `{"run_id":"r1","model":"m","input":"x","tools":[{"type":"mcp","server_label":"x","require_approval":"always"}]}`, nil, ""},
		{"mcp approval filter", `{"run_id":"r1","model":"m","input":"x","tools":[{"type":"mcp","server_label":"x","require_approval":{"never":{"tool_names":["a"]},"always":{"read_only":false}}}]}`, nil, ""},
		{"mcp approval null", `{"run_id":"r1","model":"m","input":"x","tools":[{"type":"mcp","server_label":"x","require_approval":null}]}`, nil, ""},
		{"mcp Never", `{"run_id":"r1","model":"m","input":"x","tools":[{"type":"mcp","server_label":"x","require_approval":"Never"}]}`, events.ErrMCPApproval, "tools[0].require_approval"},
		{"mcp approval number", `{"run_id":"r1","model":"m","input":"x","tools":[{"type":"mcp","server_label":"x","require_approval":1}]}`, events.ErrMCPApproval, "tools[0].require_approval"},
		{"mcp approval filter key", `{"run_id":"r1","model":"m","input":"x","tools":[{"type":"mcp","server_label":"x","require_approval":{"sometimes":{}}}]}`, events.ErrMCPApproval, "tools[0].require_approval.sometimes"},
		{"mcp approval filter field", `{"run_id":"r1","model":"m","input":"x","tools":[{"type":"mcp","server_label":"x","require_approval":{"never":{"names":["a"]}}}]}`, events.ErrMCPApproval, "tools[0].require_approval.never"},
		{"second mcp tool", `{"run_id":"r1","model":"m","input":"x","tools":[{"type":"mcp","server_label":"x","require_approval":"never"},{"type":"mcp","server_label":"y","require_approval":"often"}]}`, events.ErrMCPApproval, "tools[1].require_approval"},
		{"input timeout", `{"run_id":"r1","model":"m","input":"x","input_timeout_seconds":600}`, nil, ""},
		{"negative input timeout", `{"run_id":"r1","model":"m","input":"x","input_timeout_seconds":-1}`, events.ErrBadTimeout, "input_timeout_seconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := events.DecodeRunRequest([]byte(tt.body))
			if tt.is == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if req.RunID == "" {
					t.Fatal("no run id decoded")
				}
				return
			}
			if !errors.Is(err, tt.is) {
				t.Fatalf("err = %v, want errors.Is %v", err, tt.is)
			}
			if !errors.Is(err, events.ErrInvalidRequest) {
				t.Errorf("err %v is not ErrInvalidRequest", err)
			}
			var ve *events.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("err %T is not a *ValidationError", err)
			}
			if ve.Field != tt.field {
				t.Errorf("Field = %q, want %q (err: %v)", ve.Field, tt.field, err)
			}
			if ve.Reason == "" || !strings.HasPrefix(err.Error(), "invalid run request: "+tt.field+": ") {
				t.Errorf("message %q does not name the field %q and a reason", err.Error(), tt.field)
			}
		})
	}
}

func TestValidateConstructed(t *testing.T) {
	t.Parallel()
	r := validRequest("r1")
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	r.Options = map[string]json.RawMessage{"temperature": json.RawMessage("{bad")}
	if err := r.Validate(); !errors.Is(err, events.ErrBadOptions) {
		t.Errorf("invalid option JSON: %v", err)
	}
	r = validRequest("r1")
	r.Input = nil
	if err := r.Validate(); !errors.Is(err, events.ErrNoInput) {
		t.Errorf("nil input: %v", err)
	}
}

func TestDecodeRunRequestCompacts(t *testing.T) {
	t.Parallel()
	req, err := events.DecodeRunRequest([]byte(`{"run_id":"r1","model":"m","input":[ {"role" : "user"} ],"tools":[ {"type": "mcp", "require_approval": "never"} ],"options":{"t": [1, 2]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(req.Input) != `[{"role":"user"}]` || string(req.Tools[0]) != `{"type":"mcp","require_approval":"never"}` || string(req.Options["t"]) != `[1,2]` {
		t.Errorf("not compacted: %s %s %s", req.Input, req.Tools[0], req.Options["t"])
	}
}

func TestDecodeRunMsg(t *testing.T) {
	t.Parallel()
	n := events.Names{}
	body := []byte(`{"run_id":"r1","model":"m","input":"x"}`)
	if _, err := events.DecodeRunMsg("foundryq.runs.r1", body, n); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"foundryq.runs.r2", "foundryq.events.r1", "other.runs.r1"} {
		_, err := events.DecodeRunMsg(subj, body, n)
		var ve *events.ValidationError
		if !errors.Is(err, events.ErrBadRunID) || !errors.As(err, &ve) || ve.Field != "run_id" {
			t.Errorf("subject %s: err = %v, want a run_id error", subj, err)
		}
	}
	// A bad body on a good subject reports the body's problem.
	if _, err := events.DecodeRunMsg("foundryq.runs.r1", []byte(`{"run_id":"r1","input":"x"}`), n); !errors.Is(err, events.ErrModelOrAgent) {
		t.Errorf("err = %v", err)
	}
}

func FuzzDecodeRunRequest(f *testing.F) {
	for _, s := range []string{
		`{"run_id":"r1","model":"gpt","input":"hi"}`,
		`{"run_id":"r1","agent":{"name":"a","version":"1"},"input":[{"role":"user","content":"<b>"}],"tools":[{"type":"mcp"}],"metadata":{"a":"b"},"max_output_tokens":32,"timeout_seconds":5,"cancel_on_disconnect_seconds":5,"options":{"temperature":0.5}}`,
		`{"run_id":"r1","model":"m","input":"x","options":{"stream":true}}`,
		`{"run_id":"a.b"}`, `[]`, `null`, `{"input":null}`, `{"RUN_ID":"r1","model":"m","input":"\u00e9"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r1, err := events.DecodeRunRequest(data)
		if err != nil {
			var ve *events.ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, events.ErrInvalidRequest) || ve.Field == "" || ve.Err == nil {
				t.Fatalf("error is not a complete *ValidationError: %#v", err)
			}
			return
		}
		enc1, err := json.Marshal(r1)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		r2, err := events.DecodeRunRequest(enc1)
		if err != nil {
			t.Fatalf("valid request fails after re-encoding: %v\n%s", err, enc1)
		}
		enc2, err := json.Marshal(r2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(enc1, enc2) {
			t.Fatalf("re-encoding is not stable:\n%s\n%s", enc1, enc2)
		}
		if r1.RunID != r2.RunID || r1.Model != r2.Model || !reflect.DeepEqual(r1.Agent, r2.Agent) ||
			r1.MaxOutputTokens != r2.MaxOutputTokens || !reflect.DeepEqual(r1.Metadata, r2.Metadata) || len(r1.Tools) != len(r2.Tools) {
			t.Fatalf("decoded requests differ:\n%+v\n%+v", r1, r2)
		}
	})
}

// TestRuleMessagesSayWhy checks that the agent and MCP rules explain
// themselves: a user who sees the error must learn what to change.
func TestRuleMessagesSayWhy(t *testing.T) {
	t.Parallel()
	for body, want := range map[string][]string{
		`{"run_id":"r1","agent":{"name":"a"},"input":"x","tools":[{"type":"function","name":"f"}]}`:       {"agent", "Not allowed when agent is specified"},
		`{"run_id":"r1","agent":{"name":"a"},"input":"x","options":{"reasoning":{}}}`:                     {"agent", "Not allowed when agent is specified"},
		`{"run_id":"r1","model":"m","input":"x","tools":[{"type":"mcp","require_approval":"sometimes"}]}`: {`"always"`, `"never"`, "filter"},
		`{"run_id":"r1","model":"m","input":"x","tools":[{"type":"mcp","require_approval":{"x":{}}}]}`:    {`"always"`, `"never"`},
	} {
		_, err := events.DecodeRunRequest([]byte(body))
		if err == nil {
			t.Errorf("%s: accepted", body)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: message %q does not mention %q", body, err, w)
			}
		}
	}
}

// ErrMCPApproval names the rule it now checks (one of the documented forms
// of require_approval), not the old one (only "never" accepted).
func TestMCPApprovalSentinelNamesTheRule(t *testing.T) {
	if got := events.ErrMCPApproval.Error(); got != "bad require_approval" {
		t.Fatalf("ErrMCPApproval says %q, want %q", got, "bad require_approval")
	}
}
