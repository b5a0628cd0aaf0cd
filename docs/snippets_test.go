package docs

import (
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
)

// A Go snippet in the README or docs/ is not kept in the Markdown alone: it
// is a piece of an example_test.go file, which `go test` compiles and runs
// (an Example with its Output), and the page shows that piece word for
// word. The checks below tie the two together.

// goBlock is one ```go fenced block of a page.
type goBlock struct {
	line int // of the opening fence
	text string
}

var fenceRE = regexp.MustCompile("^ {0,3}(```+|~~~+)\\s*([A-Za-z0-9_+-]*)")

// goBlocks returns the ```go (or ```golang) blocks of a Markdown page.
func goBlocks(src string) []goBlock {
	var blocks []goBlock
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		m := fenceRE.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		fence, lang := m[1], strings.ToLower(m[2])
		start := i
		var body []string
		for i++; i < len(lines); i++ {
			if strings.HasPrefix(strings.TrimLeft(lines[i], " "), fence) && strings.TrimSpace(strings.TrimLeft(lines[i], "`~")) == "" {
				break
			}
			body = append(body, lines[i])
		}
		if lang == "go" || lang == "golang" {
			blocks = append(blocks, goBlock{line: start + 1, text: strings.Join(body, "\n")})
		}
	}
	return blocks
}

// discardedErr matches an error (or any value) thrown away: `x, _ :=`,
// `_, _ =`, `_ = f()`.
var discardedErr = regexp.MustCompile(`(?m)(,\s*_\s*:?=)|(^\s*_\s*=)`)

// funcDecl matches a top-level function declaration, naming it.
var funcDecl = regexp.MustCompile(`(?m)^func ([A-Za-z_][A-Za-z0-9_]*)\(`)

// checkSnippet says what is wrong with one Go block of a page, given the
// example files of the repository (path → text), or "".
func checkSnippet(block string, examples map[string]string) string {
	if strings.TrimSpace(block) == "" {
		return "empty Go block"
	}
	if m := discardedErr.FindString(block); m != "" {
		return fmt.Sprintf("discards a value (%q): handle the error", strings.TrimSpace(m))
	}
	for path, src := range examples {
		if !strings.Contains(src, block) {
			continue
		}
		// A function the block declares must be run by an Example of the
		// file: declared once, called at least once more.
		for _, m := range funcDecl.FindAllStringSubmatch(block, -1) {
			if strings.Count(src, m[1]+"(") < 2 || !strings.Contains(src, "\nfunc Example") {
				return fmt.Sprintf("%s declares %s, which no example of %s runs", path, m[1], path)
			}
		}
		return ""
	}
	return "not found word for word in any example_test.go: put the code in an Example (with its Output) and show it from there"
}

// exampleFiles reads every example_test.go of the repository.
func exampleFiles(t *testing.T, repo fs.FS) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := fs.WalkDir(repo, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return fs.SkipDir
		}
		if !d.IsDir() && d.Name() == "example_test.go" {
			src, err := fs.ReadFile(repo, path)
			if err != nil {
				return err
			}
			files[path] = string(src)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no example_test.go found")
	}
	return files
}

// TestGoSnippets checks every Go block of the README and docs/: it is a
// piece of an example_test.go (so it compiles and runs in `go test`),
// shown word for word, and throws no error away.
func TestGoSnippets(t *testing.T) {
	repo := os.DirFS("..")
	examples := exampleFiles(t, repo)
	n := 0
	for _, name := range repoPages(t, repo) {
		src, err := fs.ReadFile(repo, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range goBlocks(string(src)) {
			n++
			if why := checkSnippet(b.text, examples); why != "" {
				t.Errorf("%s:%d: Go block: %s", name, b.line, why)
			}
		}
	}
	if n == 0 {
		t.Error("no Go block found: the README shows one (From Go)")
	}
}

var exampleNameRE = regexp.MustCompile("`(Example[A-Za-z0-9_]*)`")

// TestExampleNames checks that every `ExampleX` a page names is an
// Example function of the repository.
func TestExampleNames(t *testing.T) {
	repo := os.DirFS("..")
	examples := exampleFiles(t, repo)
	for _, name := range repoPages(t, repo) {
		src, err := fs.ReadFile(repo, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range exampleNameRE.FindAllStringSubmatch(string(src), -1) {
			found := false
			for _, ex := range examples {
				found = found || strings.Contains(ex, "\nfunc "+m[1]+"() {")
			}
			if !found {
				t.Errorf("%s names %s, which no example_test.go defines", name, m[1])
			}
		}
	}
}

func TestGoBlocks(t *testing.T) {
	page := "text\n\n```go\na := 1\n```\n\n```sh\nls\n```\n\n~~~golang\nb := 2\n\n```go\n~~~\n\n````go\nx\n```\ny\n````\n"
	got := goBlocks(page)
	want := []goBlock{{3, "a := 1"}, {11, "b := 2\n\n```go"}, {17, "x\n```\ny"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("goBlocks = %+v, want %+v", got, want)
	}
}

func TestCheckSnippet(t *testing.T) {
	examples := map[string]string{
		"events/example_test.go": "package events_test\n\nfunc run(x int) error {\n\treturn nil\n}\n\nfunc Example_run() {\n\t_ = run(1)\n}\n",
		"other/example_test.go":  "package other_test\n\nfunc lonely() {\n}\n",
	}
	for _, tt := range []struct{ name, block, want string }{
		{"a piece of an example", "func run(x int) error {\n\treturn nil\n}", ""},
		{"a line of it", "\treturn nil", ""},
		{"edited", "func run(x int) error {\n\treturn err\n}", "not found word for word"},
		{"indented with spaces", "func run(x int) error {\n    return nil\n}", "not found word for word"},
		{"error discarded", "nc, _ := events.Connect(url)", "discards a value"},
		{"blank assignment", "_ = w.Close()", "discards a value"},
		{"function no example runs", "func lonely() {\n}", "no example of other/example_test.go runs"},
		{"empty", "\n", "empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := checkSnippet(tt.block, examples)
			if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
				t.Fatalf("checkSnippet = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestExampleFiles(t *testing.T) {
	repo := fstest.MapFS{
		"events/example_test.go":          {Data: []byte("a")},
		"events/client_test.go":           {Data: []byte("b")},
		".git/x/example_test.go":          {Data: []byte("c")},
		"events/testdata/example_test.go": {Data: []byte("d")},
	}
	got := exampleFiles(t, repo)
	if len(got) != 1 || got["events/example_test.go"] != "a" {
		t.Fatalf("exampleFiles = %v", got)
	}
}
