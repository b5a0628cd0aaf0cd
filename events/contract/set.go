// Package contract checks real traffic against the wire contract's JSON
// Schemas (events/schema): a Set validates one message against its schema
// and, beyond what JSON Schema says, refuses a property the schema does not
// declare (the published schemas let readers ignore unknown fields; the
// tests must not), and records each (schema, property) pair it saw for the
// seen-properties check (FOUNDRYQ_SCHEMA_SEEN_DIR, tools/seencheck). A Tap
// validates every message a test sees on NATS.
package contract

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/foundryq/foundryq/events/schema"
)

// Set is a loaded set of schemas.
type Set struct {
	docs     map[string]map[string]any // file name (NAME.json) -> its JSON
	compiler *jsonschema.Compiler
	seen     *Recorder

	mu       sync.Mutex
	compiled map[string]*jsonschema.Schema // by URL, fragments included
}

// Load returns the embedded schemas, recording what they validate with
// DefaultRecorder: one Set for the process (a Set is safe for concurrent
// use; compiling the schemas takes tens of milliseconds).
func Load() (*Set, error) { return loadDefault() }

var loadDefault = sync.OnceValues(func() (*Set, error) { return LoadFS(schema.FS(), DefaultRecorder()) })

// LoadFS loads the schemas NAME.json of fsys (a test may change them),
// recording what it validates with rec (nil: nothing is recorded).
func LoadFS(fsys fs.FS, rec *Recorder) (*Set, error) {
	s := &Set{docs: map[string]map[string]any{}, compiled: map[string]*jsonschema.Schema{}, seen: rec}
	s.compiler = jsonschema.NewCompiler()
	s.compiler.DefaultDraft(jsonschema.Draft2020)
	s.compiler.AssertFormat()
	files, err := fs.Glob(fsys, "*.json")
	if err != nil {
		return nil, err
	}
	for _, file := range files {
		data, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("contract: schema %s: %w", file, err)
		}
		m, ok := doc.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("contract: schema %s: not an object", file)
		}
		s.docs[file] = m
		if err := s.compiler.AddResource(schema.BaseURL+file, doc); err != nil {
			return nil, fmt.Errorf("contract: schema %s: %w", file, err)
		}
	}
	for file := range s.docs {
		if _, err := s.compile(file, ""); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Set) compile(file, ptr string) (*jsonschema.Schema, error) {
	url := schema.BaseURL + file
	if ptr != "" {
		url += "#" + ptr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sch, ok := s.compiled[url]; ok {
		return sch, nil
	}
	sch, err := s.compiler.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("contract: compile %s: %w", url, err)
	}
	s.compiled[url] = sch
	return sch, nil
}

// ValidateJSON validates data against schema name (e.g. "run-request").
func (s *Set) ValidateJSON(name string, data []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s: not JSON: %w", name, err)
	}
	return s.Validate(name, inst)
}

// Validate validates inst (JSON decoded by jsonschema.UnmarshalJSON, or
// made of map[string]any, []any, string, bool, json.Number and nil)
// against schema name: the schema itself, then every object property must
// be declared by a schema that applies to it (unless that schema allows
// additional properties). Each declared property seen is recorded.
func (s *Set) Validate(name string, inst any) error {
	file := strings.TrimSuffix(name, ".json") + ".json"
	if _, ok := s.docs[file]; !ok {
		return fmt.Errorf("contract: no schema %q", name)
	}
	sch, err := s.compile(file, "")
	if err != nil {
		return err
	}
	if err := sch.Validate(inst); err != nil {
		return fmt.Errorf("%s: %s", name, brief(err))
	}
	w := walker{s: s}
	w.walk(loc{file, ""}, inst, "")
	if len(w.undeclared) > 0 {
		return fmt.Errorf("%s: properties the schema does not declare: %s", name, strings.Join(w.undeclared, ", "))
	}
	if s.seen != nil {
		s.seen.Add(w.seen...)
	}
	return nil
}

// loc is a schema: a file and a JSON pointer into it.
type loc struct{ file, ptr string }

func (l loc) String() string { return l.file + "#" + l.ptr }

func (l loc) child(tokens ...string) loc {
	for _, t := range tokens {
		l.ptr += "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(t)
	}
	return l
}

func (s *Set) node(l loc) map[string]any {
	var cur any = s.docs[l.file]
	if l.ptr != "" {
		for _, t := range strings.Split(l.ptr[1:], "/") {
			t = strings.NewReplacer("~1", "/", "~0", "~").Replace(t)
			switch c := cur.(type) {
			case map[string]any:
				cur = c[t]
			case []any:
				i := 0
				fmt.Sscan(t, &i)
				if i < 0 || i >= len(c) {
					return nil
				}
				cur = c[i]
			default:
				return nil
			}
		}
	}
	m, _ := cur.(map[string]any)
	return m
}

// resolve follows a $ref ("other.json#/ptr", "#/ptr" or "other.json").
func resolve(from loc, ref string) loc {
	file, ptr, _ := strings.Cut(ref, "#")
	if file == "" {
		file = from.file
	}
	file = strings.TrimPrefix(file, schema.BaseURL)
	return loc{file, ptr}
}

// matches reports whether inst is valid against the schema at l.
func (s *Set) matches(l loc, inst any) bool {
	sch, err := s.compile(l.file, l.ptr)
	return err == nil && sch.Validate(inst) == nil
}

type walker struct {
	s          *Set
	seen       []string
	undeclared []string
}

// walk checks the instance at path against the schema at l: every
// property of an object must be declared by one of the schemas that apply
// to it.
func (w *walker) walk(l loc, inst any, path string) {
	declared := map[string]bool{}
	var typed, open bool
	w.apply(l, inst, path, declared, &typed, &open, 0)
	obj, ok := inst.(map[string]any)
	if !ok || !typed || open {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if !declared[k] {
			w.undeclared = append(w.undeclared, path+"/"+k)
		}
	}
}

// apply applies the schema at l to inst (one level: properties are walked
// on their own), noting which properties it declares.
func (w *walker) apply(l loc, inst any, path string, declared map[string]bool, typed, open *bool, depth int) {
	n := w.s.node(l)
	if n == nil || depth > 32 {
		return
	}
	if ref, ok := n["$ref"].(string); ok {
		w.apply(resolve(l, ref), inst, path, declared, typed, open, depth+1)
	}
	for _, kw := range []string{"allOf", "oneOf", "anyOf"} {
		branches, _ := n[kw].([]any)
		for i := range branches {
			b := l.child(kw, fmt.Sprint(i))
			if kw == "allOf" || w.s.matches(b, inst) {
				w.apply(b, inst, path, declared, typed, open, depth+1)
			}
		}
	}
	switch v := inst.(type) {
	case map[string]any:
		props, _ := n["properties"].(map[string]any)
		if props != nil {
			*typed = true
		}
		for k, val := range v {
			if _, ok := props[k]; ok {
				declared[k] = true
				pl := l.child("properties", k)
				w.seen = append(w.seen, pl.String())
				w.walk(pl, val, path+"/"+k)
				continue
			}
			switch ap := n["additionalProperties"].(type) {
			case map[string]any:
				*open = true
				w.walk(l.child("additionalProperties"), val, path+"/"+k)
			case bool:
				*open = *open || ap
			}
		}
		if _, ok := n["patternProperties"]; ok {
			*open = true
		}
	case []any:
		if _, ok := n["items"].(map[string]any); ok {
			for i, el := range v {
				w.walk(l.child("items"), el, fmt.Sprintf("%s/%d", path, i))
			}
		}
	}
}

// Properties lists every property the schemas declare, as "FILE#POINTER"
// of its entry in a properties keyword (the form a Recorder records).
// Properties under not, if, then, else and propertyNames constrain rather
// than declare, and are left out.
func (s *Set) Properties() []string {
	var out []string
	var visit func(l loc, n map[string]any)
	visit = func(l loc, n map[string]any) {
		if props, ok := n["properties"].(map[string]any); ok {
			for k, v := range props {
				pl := l.child("properties", k)
				out = append(out, pl.String())
				if m, ok := v.(map[string]any); ok {
					visit(pl, m)
				}
			}
		}
		for _, kw := range []string{"$defs", "items", "additionalProperties"} {
			switch v := n[kw].(type) {
			case map[string]any:
				if kw == "$defs" {
					for k, d := range v {
						if m, ok := d.(map[string]any); ok {
							visit(l.child(kw, k), m)
						}
					}
				} else {
					visit(l.child(kw), v)
				}
			}
		}
		for _, kw := range []string{"allOf", "oneOf", "anyOf"} {
			branches, _ := n[kw].([]any)
			for i, b := range branches {
				if m, ok := b.(map[string]any); ok {
					visit(l.child(kw, fmt.Sprint(i)), m)
				}
			}
		}
	}
	for file, doc := range s.docs {
		visit(loc{file, ""}, doc)
	}
	slices.Sort(out)
	return out
}

// Names lists the schemas of the set (file names without .json).
func (s *Set) Names() []string {
	var out []string
	for file := range s.docs {
		out = append(out, strings.TrimSuffix(file, ".json"))
	}
	slices.Sort(out)
	return out
}

// brief is a validation error on one line: its innermost causes, those of
// a failed oneOf's branches whose type matched (or all of them).
func brief(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	var leaves []string
	var visit func(e *jsonschema.ValidationError)
	visit = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, fmt.Sprintf("at %q: %s", "/"+strings.Join(e.InstanceLocation, "/"), e.ErrorKind.LocalizedString(printer)))
			return
		}
		// In a oneOf over the event types every branch fails: skip the
		// branches of another type.
		var same []*jsonschema.ValidationError
		for _, c := range e.Causes {
			if !otherType(c) {
				same = append(same, c)
			}
		}
		if len(same) == 0 {
			same = e.Causes
		}
		for _, c := range same {
			visit(c)
		}
	}
	visit(ve)
	kept := leaves
	slices.Sort(kept)
	kept = slices.Compact(kept)
	if len(kept) > 8 {
		kept = append(kept[:8], "...")
	}
	return strings.Join(kept, "; ")
}

// otherType reports whether e is a branch that failed on /type's const.
func otherType(e *jsonschema.ValidationError) bool {
	if _, ok := e.ErrorKind.(*kind.Const); ok && len(e.InstanceLocation) == 1 && e.InstanceLocation[0] == "type" {
		return true
	}
	for _, c := range e.Causes {
		if otherType(c) {
			return true
		}
	}
	return false
}

var printer = message.NewPrinter(language.English)
