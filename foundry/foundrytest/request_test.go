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
		{"agent (preview name)", `{"agent":{"type":"agent_reference","name":"a","version":"1"}}`, "", ""},
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
	if !req.store || req.background || req.stream || req.serverLabel != "first" || req.toolName != "lookup" || len(req.tools) != 3 {
		t.Fatalf("%+v", req)
	}
}
