package devstack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The floors of the module, from the ground up, and which way a package
// may import (its non-test imports, directly or through other packages of
// the module; tests may import anything):
//
//	internal/*                   the ground floor: helpers that import nothing of the product
//	events, foundry              the wire contract and the Foundry client: internal/* only
//	events/schema                the contract's schemas: nothing of the module
//	events/contract              checks of traffic against them: events, events/schema, internal/*
//	foundry/foundrytest          the emulator: foundry, internal/*
//	consumer                     the worker: events, foundry, internal/*
//	gateway                      the HTTP face: events, events/schema, foundry, internal/*
//	tools                        function tools served over NATS: events, internal/*
//	devstack                     the dev/test harness: consumer, events, foundry, foundrytest, internal/*
//	cmd/foundryq/internal/bench  the benchmark: events, foundry, foundrytest, tools, internal/*
//	cmd/...                      the command: anything
//
// So only cmd and devstack (and tests) import consumer. A package with no
// rule fails the test until it is given one here.
var layers = []layer{
	{"cmd/foundryq/internal/bench", []string{"events", "foundry", "foundry/foundrytest", "tools", "internal/..."}},
	{"cmd/...", []string{"..."}},
	{"devstack/...", []string{"consumer", "events", "foundry", "foundry/foundrytest", "internal/..."}},
	{"gateway/...", []string{"events", "events/schema", "foundry", "internal/..."}},
	{"consumer", []string{"events", "foundry", "internal/..."}},
	{"tools", []string{"events", "internal/..."}},
	{"events/schema", []string{}},                                                                   // the contract's JSON Schemas and AsyncAPI document, embedded
	{"events/contract/...", []string{"events", "events/schema", "events/contract", "internal/..."}}, // the tests' checks of traffic against them
	{"events", []string{"internal/..."}},
	{"foundry/conformance", []string{"foundry", "foundry/foundrytest", "internal/..."}},
	{"foundry/foundrytest", []string{"foundry", "internal/..."}},
	{"foundry", []string{"internal/..."}},
	{"internal/...", []string{"internal/..."}},
	{"deploy", []string{"internal/..."}},            // the deployment's tests; its package holds only a doc comment
	{"deploy/nats/guard", []string{"internal/..."}}, // the NATS image's entrypoint
	{"deploy/nats/routecerts", []string{}},          // makes the cluster's route certificates (standard library only)
	{"docs", nil},                                   // the documentation's link test; its package holds only a doc comment
}

// layer is one rule: the packages that match from (module-relative; "x/..."
// is x and everything under it) may reach only the module's packages that
// match one of to.
type layer struct {
	from string
	to   []string
}

// listedPackage is what the check reads of `go list -json`.
type listedPackage struct {
	ImportPath string
	Imports    []string // non-test imports
}

// TestImportDirection reads every package of the module with `go list
// -json ./...` and fails on each non-test import that runs against the
// floors above, printing the import chain that does.
func TestImportDirection(t *testing.T) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Module", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var module string
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			listedPackage
			Module struct{ Path string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		module = p.Module.Path
		pkgs = append(pkgs, p.listedPackage)
	}
	if module == "" || len(pkgs) < 10 {
		t.Fatalf("go list found %d packages of module %q", len(pkgs), module)
	}
	for _, v := range checkLayers(module, pkgs) {
		t.Error(v)
	}
}

// checkLayers returns one line per package that reaches, through the
// non-test imports of pkgs, a package of module its layer does not allow
// (with the shortest import chain that does), and one per package no layer
// covers. Imports from outside the module are not checked.
func checkLayers(module string, pkgs []listedPackage) []string {
	imports := map[string][]string{} // module-relative path -> its module imports, relative
	rel := func(path string) (string, bool) {
		if path == module {
			return ".", true
		}
		r, ok := strings.CutPrefix(path, module+"/")
		return r, ok
	}
	for _, p := range pkgs {
		from, ok := rel(p.ImportPath)
		if !ok {
			continue
		}
		imports[from] = nil
		for _, imp := range p.Imports {
			if to, ok := rel(imp); ok {
				imports[from] = append(imports[from], to)
			}
		}
	}
	froms := make([]string, 0, len(imports))
	for from := range imports {
		froms = append(froms, from)
	}
	slices.Sort(froms)
	var violations []string
	for _, from := range froms {
		l, ok := layerOf(from)
		if !ok {
			violations = append(violations, fmt.Sprintf("%s: no layer covers this package (add one to layers in devstack/layers_test.go)", from))
			continue
		}
		// Breadth first, so that the chain printed is a shortest one.
		via := map[string]string{from: ""}
		queue := []string{from}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			for _, imp := range imports[p] {
				if _, seen := via[imp]; seen {
					continue
				}
				via[imp] = p
				if l.allows(imp) {
					queue = append(queue, imp)
					continue
				}
				// Not further: what imp imports is imp's own account.
				chain := []string{imp}
				for q := p; q != ""; q = via[q] {
					chain = append(chain, q)
				}
				slices.Reverse(chain)
				violations = append(violations, fmt.Sprintf("%s imports %s (%s may import only %s): %s",
					from, imp, l.from, strings.Join(l.to, ", "), strings.Join(chain, " → ")))
			}
		}
	}
	return violations
}

// layerOf returns the first layer whose from matches path.
func layerOf(path string) (layer, bool) {
	for _, l := range layers {
		if matchPath(l.from, path) {
			return l, true
		}
	}
	return layer{}, false
}

func (l layer) allows(path string) bool {
	return slices.ContainsFunc(l.to, func(pattern string) bool { return matchPath(pattern, path) })
}

// matchPath reports whether the module-relative path matches pattern: "..."
// matches everything, "x/..." x and everything under it, "x" only x.
func matchPath(pattern, path string) bool {
	if pattern == "..." {
		return true
	}
	if dir, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == dir || strings.HasPrefix(path, dir+"/")
	}
	return path == pattern
}

// checkLayers finds what runs the wrong way, directly or through other
// packages, with the chain, and nothing else.
func TestCheckLayers(t *testing.T) {
	const m = "example.com/q"
	pkg := func(path string, imports ...string) listedPackage {
		p := listedPackage{ImportPath: m + "/" + path}
		for _, imp := range imports {
			if std, ok := strings.CutPrefix(imp, "std:"); ok {
				imp = std
			} else if !strings.Contains(imp, ".") { // a package of the module
				imp = m + "/" + imp
			}
			p.Imports = append(p.Imports, imp)
		}
		return p
	}
	// The floors as they should be, with outside imports (not checked).
	good := []listedPackage{
		pkg("internal/retry", "std:time"),
		pkg("internal/tracing", "go.opentelemetry.io/otel"),
		pkg("events", "internal/retry", "github.com/nats-io/nats.go"),
		pkg("foundry", "internal/retry"),
		pkg("foundry/foundrytest", "foundry"),
		pkg("consumer", "events", "foundry", "internal/retry"),
		pkg("gateway", "events", "internal/tracing"),
		pkg("devstack", "consumer", "events", "foundry/foundrytest"),
		pkg("devstack/chaos"), // test files only
		pkg("cmd/foundryq/internal/bench", "events", "foundry/foundrytest"),
		pkg("cmd/foundryq", "consumer", "gateway", "devstack", "cmd/foundryq/internal/bench"),
		pkg("deploy"),
	}
	with := func(replace ...listedPackage) []listedPackage {
		out := slices.Clone(good)
		for _, r := range replace {
			i := slices.IndexFunc(out, func(p listedPackage) bool { return p.ImportPath == r.ImportPath })
			if i < 0 {
				out = append(out, r)
			} else {
				out[i] = r
			}
		}
		return out
	}
	tests := []struct {
		name string
		pkgs []listedPackage
		want []string
	}{
		{"the floors as they are", good, nil},
		{"events imports consumer", with(pkg("events", "consumer"), pkg("gateway/x", "events")), []string{
			// The bench and the gateway reach consumer through events.
			"cmd/foundryq/internal/bench imports consumer (cmd/foundryq/internal/bench may import only events, foundry, foundry/foundrytest, tools, internal/...): cmd/foundryq/internal/bench → events → consumer",
			"events imports consumer (events may import only internal/...): events → consumer",
			"gateway imports consumer (gateway/... may import only events, events/schema, foundry, internal/...): gateway → events → consumer",
			"gateway/x imports consumer (gateway/... may import only events, events/schema, foundry, internal/...): gateway/x → events → consumer",
		}},
		{"the gateway imports consumer", with(pkg("gateway", "consumer")), []string{
			"gateway imports consumer (gateway/... may import only events, events/schema, foundry, internal/...): gateway → consumer",
		}},
		{"the bench imports consumer, though under cmd", with(pkg("cmd/foundryq/internal/bench", "consumer")), []string{
			"cmd/foundryq/internal/bench imports consumer (cmd/foundryq/internal/bench may import only events, foundry, foundry/foundrytest, tools, internal/...): cmd/foundryq/internal/bench → consumer",
		}},
		{"foundry imports events", with(pkg("foundry", "events")), []string{
			"foundry imports events (foundry may import only internal/...): foundry → events",
			"foundry/foundrytest imports events (foundry/foundrytest may import only foundry, internal/...): foundry/foundrytest → foundry → events",
		}},
		{"a helper imports the product", with(pkg("internal/tracing", "events")), []string{
			"internal/tracing imports events (internal/... may import only internal/...): internal/tracing → events",
		}},
		{"the harness imports the gateway", with(pkg("devstack", "gateway")), []string{
			"devstack imports gateway (devstack/... may import only consumer, events, foundry, foundry/foundrytest, internal/...): devstack → gateway",
		}},
		{"a package no layer covers", with(pkg("tools/gen", "events")), []string{
			"tools/gen: no layer covers this package (add one to layers in devstack/layers_test.go)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkLayers(m, tt.pkgs)
			if !slices.Equal(got, tt.want) {
				t.Errorf("got\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(tt.want, "\n\t"))
			}
		})
	}
}
