package contract_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/events/schema"
	"github.com/foundryq/foundryq/gateway"
)

// jsonFields lists the JSON names of a struct type's fields.
func jsonFields(typ reflect.Type) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
		case f.Anonymous && name == "":
			out = append(out, jsonFields(f.Type)...)
		case name != "":
			out = append(out, name)
		case f.IsExported():
			out = append(out, f.Name)
		}
	}
	slices.Sort(out)
	return out
}

// schemaProps lists the properties declared at pointer in schema file, or,
// with pointer "event-*", by every event type's schema.
func schemaProps(t *testing.T, file, pointer string) []string {
	t.Helper()
	files := []string{file}
	if file == "event-*" {
		files = nil
		for _, n := range schema.Names() {
			if strings.HasPrefix(n, "event-") && n != "event-headers" {
				files = append(files, n)
			}
		}
	}
	var out []string
	for _, f := range files {
		data, err := schema.Get(f)
		if err != nil {
			t.Fatal(err)
		}
		var node map[string]any
		if err := json.Unmarshal(data, &node); err != nil {
			t.Fatal(err)
		}
		for _, tok := range strings.Split(strings.Trim(pointer, "/"), "/") {
			if tok != "" {
				node = node[tok].(map[string]any)
			}
		}
		for p := range node["properties"].(map[string]any) {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Every field of the Go types that travel on NATS is declared by its
// schema, and every property of the schema is a field: a field added in
// code without the schema (or the other way round) fails here even before
// a test sends it.
func TestGoTypesMatchSchemas(t *testing.T) {
	for _, tc := range []struct {
		typ           any
		file, pointer string
	}{
		{events.RunRequest{}, "run-request", ""},
		{events.AgentRef{}, "run-request", "/properties/agent"},
		{events.RunEvent{}, "event-*", ""},
		{events.Tool{}, "common", "/$defs/tool"},
		{events.Error{}, "common", "/$defs/error"},
		{events.Usage{}, "common", "/$defs/usage"},
		{events.InputItem{}, "common", "/$defs/input_item"},
		{events.ReceivedInput{}, "common", "/$defs/received_input"},
		{events.Step{}, "common", "/$defs/step"},
		{events.CancelRecord{}, "common", "/$defs/cancel_record"},
		{events.RunState{}, "run-state", ""},
		{events.CancelRequest{}, "cancel-request", ""},
		{events.CancelReply{}, "cancel-reply", ""},
		{events.InputAnswer{}, "input-answer", ""},
		{events.InputReply{}, "input-reply", ""},
		{events.QueuePosition{}, "queue-position", ""},
		{gateway.Registration{}, "callback-registration", ""},
		{gateway.Delivery{}, "callback-delivery", ""},
	} {
		typ := reflect.TypeOf(tc.typ)
		t.Run(typ.String(), func(t *testing.T) {
			code, sch := jsonFields(typ), schemaProps(t, tc.file, tc.pointer)
			for _, f := range code {
				if !slices.Contains(sch, f) {
					t.Errorf("%s has field %q, which schema %s%s does not declare", typ, f, tc.file, tc.pointer)
				}
			}
			for _, p := range sch {
				if !slices.Contains(code, p) {
					t.Errorf("schema %s%s declares %q, which %s does not have", tc.file, tc.pointer, p, typ)
				}
			}
		})
	}
}
