package foundrytest

import (
	"strings"
	"testing"
)

func TestParseCreate(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("v", 513)
	many := `{`
	for i := 0; i < 17; i++ {
		if i > 0 {
			many += ","
		}
		many += `"k` + strings.Repeat("x", i) + `":"v"`
	}
	many += `}`
	for _, tc := range []struct {
		name, body string
		param      string // "" for success
		code       string
	}{
		{"minimal", `{"model":"m"}`, "", ""},
		{"unknown fields are ignored", `{"model":"m","temperature":0.2,"reasoning":{"effort":"low"},"x":[1]}`, "", ""},
		{"agent_reference", `{"agent_reference":{"type":"agent_reference","name":"a"},"input":[]}`, "", ""},
		{"agent (deprecated name)", `{"agent":{"type":"agent_reference","name":"a","version":"1"}}`, "agent", "invalid_payload"},
		{"agent with metadata", `{"agent_reference":{"name":"a"},"metadata":{"k":"v"},"max_output_tokens":64,"store":true,"input":"x"}`, "", ""},
		{"agent with instructions", `{"agent_reference":{"name":"a"},"instructions":"be brief"}`, "instructions", "invalid_payload"},
		{"agent with tools", `{"agent_reference":{"name":"a"},"tools":[{"type":"mcp","server_label":"x"}]}`, "tools", "invalid_payload"},
		{"agent with text", `{"agent_reference":{"name":"a"},"text":{"format":{"type":"text"}}}`, "text", "invalid_payload"},
		{"agent with reasoning", `{"agent_reference":{"name":"a"},"reasoning":{"effort":"low"}}`, "reasoning", "invalid_payload"},
		{"agent with null instructions", `{"agent_reference":{"name":"a"},"instructions":null}`, "", ""},
		{"agent with temperature and top_p", `{"agent_reference":{"name":"a"},"temperature":0.2,"top_p":1}`, "", "invalid_payload"},
		{"function without name", `{"model":"m","tools":[{"type":"function"}]}`, "tools[0].name", "missing_required_parameter"},
		{"too many tools", `{"model":"m","tools":[` + strings.TrimSuffix(strings.Repeat(`{"type":"web_search"},`, 129), ",") + `]}`, "tools", "array_above_max_length"},
		{"nulls are absent", `{"model":"m","instructions":null,"tools":null,"metadata":null,"max_output_tokens":null,"stream":null}`, "", ""},
		{"no model", `{"input":"x"}`, "model", "missing_required_parameter"},
		{"empty model", `{"model":""}`, "model", "invalid_value"},
		{"model and agent", `{"model":"m","agent_reference":{"name":"a"}}`, "model", "invalid_value"},
		{"two agent fields", `{"agent":{"name":"a"},"agent_reference":{"name":"a"}}`, "agent", "invalid_value"},
		{"model number", `{"model":4}`, "model", "invalid_type"},
		{"agent not object", `{"agent_reference":"a"}`, "agent_reference", "invalid_type"},
		{"agent without name", `{"agent_reference":{"type":"agent_reference"}}`, "agent_reference.name", "missing_required_parameter"},
		{"agent wrong type", `{"agent_reference":{"type":"model","name":"a"}}`, "agent_reference.type", "invalid_value"},
		{"agent version number", `{"agent_reference":{"name":"a","version":2}}`, "agent_reference.version", "invalid_type"},
		{"input object", `{"model":"m","input":{}}`, "input", "invalid_type"},
		{"instructions array", `{"model":"m","instructions":[]}`, "instructions", "invalid_type"},
		{"tools object", `{"model":"m","tools":{}}`, "tools", "invalid_type"},
		{"tool string", `{"model":"m","tools":["mcp"]}`, "tools[0]", "invalid_type"},
		{"tool without type", `{"model":"m","tools":[{}]}`, "tools[0].type", "missing_required_parameter"},
		{"mcp without label", `{"model":"m","tools":[{"type":"mcp"}]}`, "tools[0].server_label", "missing_required_parameter"},
		{"stream string", `{"model":"m","stream":"true"}`, "stream", "invalid_type"},
		{"store number", `{"model":"m","store":1}`, "store", "invalid_type"},
		{"background without store", `{"model":"m","background":true,"store":false}`, "background", "invalid_value"},
		{"metadata array", `{"model":"m","metadata":[]}`, "metadata", "invalid_type"},
		{"metadata number value", `{"model":"m","metadata":{"a":1}}`, "metadata.a", "invalid_type"},
		{"metadata too many", `{"model":"m","metadata":` + many + `}`, "metadata", "object_above_max_properties"},
		{"metadata long value", `{"model":"m","metadata":{"a":"` + long + `"}}`, "metadata.a", "string_above_max_length"},
		{"metadata long key", `{"model":"m","metadata":{"` + strings.Repeat("k", 65) + `":"v"}}`, "metadata", "string_above_max_length"},
		{"max_output_tokens small", `{"model":"m","max_output_tokens":15}`, "max_output_tokens", "integer_below_min_value"},
		{"max_output_tokens decimal", `{"model":"m","max_output_tokens":16.5}`, "max_output_tokens", "invalid_type"},
		{"max_output_tokens string", `{"model":"m","max_output_tokens":"16"}`, "max_output_tokens", "invalid_type"},
		{"not an object", `"x"`, "", "parse"},
		{"null", `null`, "", "parse"},
		{"garbage", `{`, "", "parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, aerr := parseCreate([]byte(tc.body))
			switch {
			case tc.code == "" && aerr != nil:
				t.Fatalf("unexpected error %v", aerr)
			case tc.code == "":
				if req.model == "" && req.agentField == "" {
					t.Fatal("neither model nor agent")
				}
			case aerr == nil:
				t.Fatalf("accepted, want error on %q", tc.param)
			case aerr.status != 400 || aerr.param != tc.param || (tc.code != "parse" && aerr.code != tc.code):
				t.Fatalf("got %d param %q code %q (%s), want param %q code %q", aerr.status, aerr.param, aerr.code, aerr.message, tc.param, tc.code)
			}
		})
	}
}

func TestParseCreateDefaultsAndTools(t *testing.T) {
	t.Parallel()
	req, aerr := parseCreate([]byte(`{"model":"m","tools":[{"type":"web_search"},
		{"type":"mcp","server_label":"first","allowed_tools":{"tool_names":["lookup"]}},{"type":"mcp","server_label":"second"}]}`))
	if aerr != nil {
		t.Fatal(aerr)
	}
	if !req.store || req.background || req.stream || len(req.tools) != 3 || len(req.mcpServers) != 2 ||
		req.call == nil || req.call.label != "first" || req.call.name != "lookup" || !req.call.approval {
		t.Fatalf("%+v", req)
	}
	if s := req.mcpServers[1]; s.label != "second" || len(s.tools) != 1 || s.tools[0] != defaultToolName {
		t.Fatalf("second server %+v", s)
	}
}

// TestAgentFieldRefusals checks the bodies of Foundry's refusals: one
// conflicting field names it, several get details, the old "agent" field is
// deprecated unless the emulator is told to accept it.
func TestAgentFieldRefusals(t *testing.T) {
	t.Parallel()
	_, aerr := parseCreate([]byte(`{"agent_reference":{"name":"a"},"tools":[{"type":"mcp","server_label":"x"}]}`))
	if aerr == nil || aerr.message != "Not allowed when agent is specified." || aerr.param != "tools" ||
		aerr.typ != "invalid_request_error" || aerr.details == nil || len(aerr.details) != 0 {
		t.Fatalf("tools: %+v", aerr)
	}
	_, aerr = parseCreate([]byte(`{"agent_reference":{"name":"a"},"temperature":0.2,"top_p":1}`))
	if aerr == nil || aerr.message != "Invalid payload" || aerr.param != "" || len(aerr.details) != 2 ||
		aerr.details[0].Param != "temperature" || aerr.details[1].Param != "top_p" || aerr.details[1].Message != "Not allowed when agent is specified." {
		t.Fatalf("several: %+v", aerr)
	}
	_, aerr = parseCreate([]byte(`{"agent":{"type":"agent_reference","name":"a"}}`))
	if aerr == nil || aerr.message != "The 'agent' property is deprecated. Use 'agent_reference' instead." || aerr.param != "agent" {
		t.Fatalf("agent: %+v", aerr)
	}
	req, aerr := parseCreateOpts([]byte(`{"agent":{"type":"agent_reference","name":"a"}}`), parseOptions{acceptAgentField: true})
	if aerr != nil || req.agentField != "agent" || req.agentName != "a" {
		t.Fatalf("accepted agent: %+v %v", req, aerr)
	}
}

func TestNeedsApproval(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]bool{
		``: true, `null`: true, `"always"`: true, `"never"`: false, `"Never"`: true,
		`{"never":{"tool_names":["lookup"]}}`: false, `{"never":{"tool_names":["other"]}}`: true,
		`{"always":{"tool_names":["lookup"]}}`: true, `{"never":{"read_only":true}}`: true,
	} {
		if got := needsApproval([]byte(raw), "lookup"); got != want {
			t.Errorf("require_approval %s: needsApproval = %v, want %v", raw, got, want)
		}
	}
}
