package consumer

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Who may settle a job, and who may end a run without one, read from the
// package's source: a job is acked, nakked or termed only in run.settle,
// and a terminal event is published outside run.end only on the paths
// endings.go lists (endJobless, and the repairs run.end makes). A call
// added anywhere else fails here, until it is justified and listed.
func TestJobSettledOnlyInSettle(t *testing.T) {
	calls := callSites(t, ".")
	allowed := []struct {
		callee  string   // a function, or a method by its name alone
		callers []string // "Type.method" or "function"; nil: no call at all
		why     string
	}{
		// The job's settlements (jetstream.Msg).
		{"DoubleAck", []string{"run.settle"}, "settle is the one place that acks a job"},
		{"Ack", []string{"Worker.moveToLanes"}, "a job is acked with DoubleAck, in settle; an intake message once its copy is in its lane (lanes.go)"},
		{"AckSync", nil, "a job is acked with DoubleAck, in settle"},
		{"Nak", nil, "a job is nakked with NakWithDelay, in settle"},
		{"NakWithDelay", []string{"run.settle", "Worker.moveToLanes"}, "settle is the one place that naks a job; an intake message not moved to its lane is handed back (lanes.go)"},
		{"Term", nil, "a job is termed with TermWithReason, in settle"},
		{"TermWithReason", []string{"run.settle"}, "settle is the one place that terms a job"},
		{"settle", []string{"run.end"}, "every ending goes through end"},
		// A queued job that no worker fetched is deleted, not settled.
		{"jobStream.DeleteMsg", []string{"Worker.cancelNotTaken"}, "a run no worker has taken, cancelled (in the intake or its lane)"},
		// Terminal events published outside run.end.
		{"publishEnd", []string{"Worker.endJobless", "Worker.publishEndLater", "run.repairEnd", "run.repairPause"}, "the job-less ends (and their retry) and the repairs"},
		{"publishEndLater", []string{"Worker.endJobless"}, "the retry of a job-less end's event"},
		{"endJobless", []string{"Worker.cancelNotTaken", "Worker.endWaiting"}, "the two ends of a run whose job no worker holds"},
		{"repair", []string{"run.end"}, "repairs are made by end, before it settles the job"},
		{"repairEnd", []string{"run.repair"}, "repairs are made by end"},
		{"repairPause", []string{"run.repair"}, "repairs are made by end"},
	}
	for _, a := range allowed {
		got := calls[a.callee]
		for _, c := range got {
			if !slices.Contains(a.callers, c) {
				t.Errorf("%s calls %s: only %q may (%s); if this place is justified, list it here and in endings.go", c, a.callee, a.callers, a.why)
			}
		}
		for _, c := range a.callers {
			if !slices.Contains(got, c) {
				t.Errorf("%s no longer calls %s: update this list (and endings.go)", c, a.callee)
			}
		}
	}
}

// TestCallSites checks the scan against a source written for it.
func TestCallSites(t *testing.T) {
	src := `package p

func (r *run) settle()      { r.msg.DoubleAck(ctx); r.msg.Term() }
func (w *Worker) drop()     { w.res.Runs.DeleteMsg(ctx, 1); w.res.Events.DeleteMsg(ctx, 2) }
func helper()               { go func() { publishEnd() }() }
func (r *run) end(e ending) { r.settle(); r.settle() }
`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\n\nfunc x() { m.Ack() }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := callSites(t, dir)
	want := map[string][]string{
		"DoubleAck":        {"run.settle"},
		"Term":             {"run.settle"},
		"Runs.DeleteMsg":   {"Worker.drop"},
		"Events.DeleteMsg": {"Worker.drop"},
		"DeleteMsg":        {"Worker.drop"},
		"publishEnd":       {"helper"},
		"settle":           {"run.end"},
	}
	for callee, callers := range want {
		if !slices.Equal(got[callee], callers) {
			t.Errorf("callers of %s: %q, want %q", callee, got[callee], callers)
		}
	}
	if got["Ack"] != nil {
		t.Errorf("a test file was read: %q", got["Ack"])
	}
}

// callSites maps each function or method called in the non-test Go files
// of dir to the functions that call it ("Type.method", or the function's
// name), each once. A method call is listed under its name, and also
// under the last field of its receiver and its name ("Runs.DeleteMsg").
func callSites(t *testing.T, dir string) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string][]string{}
	add := func(callee, caller string) {
		if !slices.Contains(calls[callee], caller) {
			calls[callee] = append(calls[callee], caller)
		}
	}
	fset := token.NewFileSet()
	n := 0
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		n++
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			caller := fn.Name.Name
			if fn.Recv != nil && len(fn.Recv.List) == 1 {
				caller = strings.TrimPrefix(exprString(fn.Recv.List[0].Type), "*") + "." + caller
			}
			ast.Inspect(fn.Body, func(node ast.Node) bool {
				call, ok := node.(*ast.CallExpr)
				if !ok {
					return true
				}
				switch fun := call.Fun.(type) {
				case *ast.Ident:
					add(fun.Name, caller)
				case *ast.SelectorExpr:
					add(fun.Sel.Name, caller)
					switch x := fun.X.(type) {
					case *ast.SelectorExpr:
						add(x.Sel.Name+"."+fun.Sel.Name, caller)
					case *ast.Ident:
						add(x.Name+"."+fun.Sel.Name, caller)
					}
				}
				return true
			})
		}
	}
	if n == 0 {
		t.Fatalf("no Go file in %s", dir)
	}
	return calls
}
