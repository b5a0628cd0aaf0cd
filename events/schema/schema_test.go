package schema_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/foundryq/foundryq/events/schema"
)

// TestSchemasCompile checks that every schema is a valid draft 2020-12
// schema whose $id is its URL, and that every $ref resolves.
func TestSchemasCompile(t *testing.T) {
	names := schema.Names()
	if len(names) < 20 {
		t.Fatalf("only %d schemas: %v", len(names), names)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	for _, name := range names {
		data, err := schema.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if id := doc.(map[string]any)["$id"]; id != schema.URL(name) {
			t.Errorf("%s: $id %v, want %s", name, id, schema.URL(name))
		}
		if s := doc.(map[string]any)["$schema"]; s != "https://json-schema.org/draft/2020-12/schema" {
			t.Errorf("%s: $schema %v", name, s)
		}
		if err := c.AddResource(schema.URL(name), doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for _, name := range names {
		if _, err := c.Compile(schema.URL(name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestGet(t *testing.T) {
	for _, name := range []string{"run-request", "run-request.json"} {
		data, err := schema.Get(name)
		if err != nil || !json.Valid(data) {
			t.Fatalf("Get(%q): %v", name, err)
		}
	}
	for _, name := range []string{"", "nope", "../schema/run-request", "run-request.yaml"} {
		if _, err := schema.Get(name); err == nil || !strings.Contains(err.Error(), "no schema") {
			t.Errorf("Get(%q): %v, want no schema", name, err)
		}
	}
}
