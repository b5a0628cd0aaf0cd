package schema_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/events/schema"
	"github.com/foundryq/foundryq/gateway"
	"github.com/foundryq/foundryq/internal/testkit"
)

type asyncAPI struct {
	AsyncAPI string `yaml:"asyncapi"`
	Channels map[string]struct {
		Address    *string        `yaml:"address"`
		Parameters map[string]any `yaml:"parameters"`
		Messages   map[string]any `yaml:"messages"`
	} `yaml:"channels"`
	Operations map[string]struct {
		Action   string           `yaml:"action"`
		Security []map[string]any `yaml:"security"`
	} `yaml:"operations"`
}

func loadAsyncAPI(t *testing.T) (asyncAPI, map[string]any) {
	t.Helper()
	var doc asyncAPI
	if err := yaml.Unmarshal(schema.AsyncAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(schema.AsyncAPI(), &raw); err != nil {
		t.Fatal(err)
	}
	return doc, raw
}

// The subjects of events.Names (and the gateway's callback names), each
// built with its parameters in braces, as the AsyncAPI document writes
// them. Every Names method that returns a subject must be listed here, so
// that a new subject cannot go without its channel.
func contractSubjects(t *testing.T) []string {
	t.Helper()
	n := events.Names{Prefix: events.DefaultPrefix}
	args := map[string][]string{
		"RunSubject": {"{run_id}"}, "EventSubject": {"{run_id}"}, "CancelSubject": {"{run_id}"},
		"WatchSubject": {"{run_id}"}, "DeadSubject": {"{run_id}"}, "LiveSubject": {"{run_id}"},
		"NoticeSubject": {"{run_id}"}, "CancelRecordSubject": {"{run_id}"}, "InputSubject": {"{run_id}"}, "PositionSubject": {"{run_id}"},
		"InputRecordSubject": {"{run_id}", "{id}"}, "ParkedRequestSubject": {"{run_id}"},
		"ToolSubject": {"{name}"}, "ToolCancelSubject": {"{run_id}"},
		"LaneSubject": {"{priority}", "{key}", "{run_id}"},
	}
	var subjects []string
	v := reflect.ValueOf(n)
	for i := range v.NumMethod() {
		name := v.Type().Method(i).Name
		m := v.Method(i)
		mt := m.Type()
		if mt.NumOut() != 1 || mt.Out(0).Kind() != reflect.String || mt.NumIn() == 0 || mt.In(0).Kind() != reflect.String {
			continue // not a subject of a run: streams, bucket, wildcards, parsers
		}
		a, ok := args[name]
		if !ok {
			t.Errorf("events.Names.%s is not known to this test: add its channel to asyncapi.yaml and its parameters here", name)
			continue
		}
		in := make([]reflect.Value, len(a))
		for j, s := range a {
			in[j] = reflect.ValueOf(s).Convert(mt.In(j)) // a string type (events.Priority)
		}
		subjects = append(subjects, m.Call(in)[0].String())
	}
	cb, err := gateway.NewCallbackNames("")
	if err != nil {
		t.Fatal(err)
	}
	subjects = append(subjects, cb.Subject("{run_id}"), cb.DeadSubject("{run_id}"),
		"$KV."+n.Bucket()+".{run_id}", "$KV."+cb.Bucket+".{run_id}.{digest}")
	slices.Sort(subjects)
	return subjects
}

func TestAsyncAPISubjectsAreTheNames(t *testing.T) {
	doc, _ := loadAsyncAPI(t)
	if doc.AsyncAPI != "3.0.0" {
		t.Fatalf("asyncapi %q", doc.AsyncAPI)
	}
	var documented []string
	for key, ch := range doc.Channels {
		if ch.Address == nil {
			continue // a reply channel: the requester's inbox
		}
		documented = append(documented, *ch.Address)
		for _, p := range strings.Split(*ch.Address, ".") {
			if name, ok := strings.CutPrefix(p, "{"); ok {
				if _, ok := ch.Parameters[strings.TrimSuffix(name, "}")]; !ok {
					t.Errorf("channel %s: parameter %s not described", key, p)
				}
			}
		}
	}
	slices.Sort(documented)
	testkit.SameSet(t, documented, contractSubjects(t),
		"subject %s has no channel in asyncapi.yaml",
		"asyncapi.yaml has channel %s, which no events.Names (or gateway.CallbackNames) method makes")
}

// Every reference of the AsyncAPI document resolves: to a schema file of
// this directory, or within the document.
func TestAsyncAPIReferencesResolve(t *testing.T) {
	doc, raw := loadAsyncAPI(t)
	names := schema.Names()
	var refs int
	var visit func(path string, v any)
	visit = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				refs++
				if local, ok := strings.CutPrefix(ref, "#/"); ok {
					var cur any = raw
					for _, tok := range strings.Split(local, "/") {
						m, _ := cur.(map[string]any)
						cur = m[tok]
					}
					if cur == nil {
						t.Errorf("%s: %s does not resolve", path, ref)
					}
				} else if !slices.Contains(names, strings.TrimSuffix(ref, ".json")) {
					t.Errorf("%s: %s names no schema", path, ref)
				}
			}
			for k, e := range v {
				visit(path+"/"+k, e)
			}
		case []any:
			for i, e := range v {
				visit(path+"/"+string(rune('0'+i)), e)
			}
		}
	}
	visit("", raw)
	if refs < 50 {
		t.Errorf("only %d references", refs)
	}
	for key, op := range doc.Operations {
		if op.Action != "send" && op.Action != "receive" {
			t.Errorf("operation %s: action %q", key, op.Action)
		}
		if len(op.Security) == 0 {
			t.Errorf("operation %s names no role", key)
		}
	}
	// Every message schema is used by the document.
	for _, name := range names {
		if name != "common" && name != "run-event" && !strings.Contains(string(schema.AsyncAPI()), name+".json") {
			t.Errorf("schema %s is not referenced by asyncapi.yaml", name)
		}
	}
}
