package consumer

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The drawn lifecycle (docs/lifecycle.md) names exactly the transitions of
// lifecycle.go: a transition added without being drawn, or a drawn one
// that no longer exists, fails.
func TestLifecycleIsDrawn(t *testing.T) {
	code := transitions(t, "lifecycle.go")
	drawn := drawnTransitions(t, "../docs/lifecycle.md")
	for _, name := range code {
		if !slices.Contains(drawn, name) {
			t.Errorf("transition %s (lifecycle.go) is not drawn in docs/lifecycle.md", name)
		}
	}
	for _, name := range drawn {
		if !slices.Contains(code, name) {
			t.Errorf("docs/lifecycle.md draws %s, which is not a transition of lifecycle.go", name)
		}
	}
}

// transitions are the functions of file that take a *events.RunState first
// and return an error, or that return a record (events.RunState).
func transitions(t *testing.T, file string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || fn.Type.Results == nil || len(fn.Type.Results.List) != 1 {
			continue
		}
		result := exprString(fn.Type.Results.List[0].Type)
		params := fn.Type.Params.List
		switch {
		case result == "events.RunState":
			names = append(names, fn.Name.Name)
		case result == "error" && len(params) > 0 && exprString(params[0].Type) == "*events.RunState":
			names = append(names, fn.Name.Name)
		}
	}
	if len(names) == 0 {
		t.Fatalf("no transitions found in %s", file)
	}
	return names
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.StarExpr:
		return "*" + exprString(e.X)
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	}
	return ""
}

// drawnTransitions are the labels of the arrows of the Mermaid state
// diagram in page.
func drawnTransitions(t *testing.T, page string) []string {
	t.Helper()
	data, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	_, diagram, ok := strings.Cut(string(data), "```mermaid\n")
	if diagram, _, ok = strings.Cut(diagram, "```"); !ok {
		t.Fatalf("%s has no mermaid diagram", page)
	}
	arrow := regexp.MustCompile(`^\s*\S+\s*-->\s*\S+\s*:\s*(.+)$`)
	var names []string
	for _, line := range strings.Split(diagram, "\n") {
		m := arrow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, n := range strings.Split(m[1], ",") {
			if n = strings.TrimSpace(n); !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s: no labelled arrows in the diagram", page)
	}
	return names
}
