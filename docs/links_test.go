package docs

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"unicode"
)

// pages are the Markdown files whose links are checked, relative to the
// repository root; every docs/*.md is added to them.
var pages = []string{"README.md", "CONTRIBUTING.md", "deploy/README.md"}

// maxReadmeLines bounds README.md: a newcomer reads it in five minutes; the
// rest belongs in docs/.
const maxReadmeLines = 300

func repoPages(t *testing.T, repo fs.FS) []string {
	t.Helper()
	docs, err := fs.Glob(repo, "docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md found")
	}
	return append(slices.Clone(pages), docs...)
}

// TestLinks checks every relative link and #anchor of the repository's
// Markdown pages: the file (or folder) exists, and an anchor matches a
// heading of the target file as GitHub makes it. http(s) links are not
// followed.
func TestLinks(t *testing.T) {
	repo := os.DirFS("..")
	for _, name := range repoPages(t, repo) {
		for _, p := range checkLinks(repo, name) {
			t.Error(p)
		}
	}
}

// TestContentsLists checks that each docs page opens with a contents list
// (before its first section) linking every ## and ### heading of the page,
// and nothing else.
func TestContentsLists(t *testing.T) {
	repo := os.DirFS("..")
	docs, _ := fs.Glob(repo, "docs/*.md")
	for _, name := range docs {
		src, err := fs.ReadFile(repo, name)
		if err != nil {
			t.Fatal(err)
		}
		text := string(src)
		first := strings.Index(text, "\n## ")
		if first < 0 {
			t.Errorf("%s: no ## section", name)
			continue
		}
		var listed []string
		for _, l := range findLinks(text[:first]) {
			if strings.HasPrefix(l.target, "#") {
				listed = append(listed, l.target[1:])
			}
		}
		var want []string
		for _, h := range headings(text) {
			if h.level == 2 || h.level == 3 {
				want = append(want, h.anchor)
			}
		}
		if !slices.Equal(listed, want) {
			t.Errorf("%s: the contents list links %q, the headings are %q", name, listed, want)
		}
	}
}

func TestReadmeIsShort(t *testing.T) {
	src, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail to a page in docs/", n, maxReadmeLines)
	}
}

// TestCheckLinks is the checker against good and broken pages.
func TestCheckLinks(t *testing.T) {
	repo := fstest.MapFS{
		"README.md": {Data: []byte("# Title\n\n## Quick start\n\n## Wire contract (v1)\n\n" +
			"### RunRequest (JSON on `foundryq.runs.<run_id>`)\n\n## Notes\n\n## Notes\n\n## Notes\n")},
		"docs/page.md":   {Data: []byte("# Page\n\nSetext heading\n--------------\n\n## Größe & *Maß*_x\n")},
		"deploy/app.yml": {Data: []byte("a: 1\n")},
		"img/plot.png":   {Data: []byte("png")},
	}
	tests := []struct {
		name, page string
		want       []string // substrings of the problems, one per problem; none: no problem
	}{
		{"relative file", "[x](../README.md)", nil},
		{"file and anchor", "[x](../README.md#quick-start)", nil},
		{"anchor on this page", "# Here\n\n[x](#here)", nil},
		{"anchor with code and punctuation", "[x](../README.md#runrequest-json-on-foundryqrunsrun_id)", nil},
		{"heading with a version", "[x](../README.md#wire-contract-v1)", nil},
		{"duplicate headings", "[a](../README.md#notes) [b](../README.md#notes-1) [c](../README.md#notes-2)", nil},
		{"setext heading", "[x](page.md#setext-heading)", nil},
		{"unicode and emphasis", "[x](page.md#größe--maß_x)", nil},
		{"folder", "[x](../deploy/)", nil},
		{"image", "![plot](../img/plot.png)", nil},
		{"link text over two lines", "see [the quick\nstart](../README.md#quick-start).", nil},
		{"title after the target", `[x](../README.md "the readme")`, nil},
		{"angle brackets", "[x](<../README.md>)", nil},
		{"absolute links are not checked", "[x](https://example.com/nowhere#x) [y](http://example.com) [z](mailto:a@example.com)", nil},
		{"links in code are not links", "```md\n[x](missing.md)\n```\n\n`[y](missing.md)` and ``[z](gone.md)``", nil},
		{"reference definition", "[x][r]\n\n[r]: ../README.md#notes", nil},

		{"missing file", "[x](missing.md)", []string{`docs/missing.md: no such file`}},
		{"missing file, wrong folder", "[x](README.md)", []string{"docs/README.md: no such file"}},
		{"missing image", "![plot](../img/nope.png)", []string{"img/nope.png: no such file"}},
		{"missing anchor", "[x](../README.md#quickstart)", []string{`no heading "quickstart"`}},
		{"anchor not lower case", "[x](../README.md#Quick-Start)", []string{`no heading "Quick-Start"`}},
		{"punctuation kept", "[x](../README.md#wire-contract-(v1))", []string{"no heading"}},
		{"one duplicate too many", "[x](../README.md#notes-3)", []string{`no heading "notes-3"`}},
		{"missing anchor on this page", "# Here\n\n[x](#there)", []string{`no heading "there"`}},
		{"anchor into a file that is not Markdown", "[x](../deploy/app.yml#a)", []string{"not a Markdown file"}},
		{"outside the repository", "[x](../../etc/passwd)", []string{"outside the repository"}},
		{"missing reference target", "[x][r]\n\n[r]: gone.md", []string{"docs/gone.md: no such file"}},
		{"two broken, line numbers", "ok\n[a](a.md)\n\n[b](../README.md#b)", []string{"docs/t.md:2: a.md", "docs/t.md:4: ../README.md#b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := fstest.MapFS{"docs/t.md": {Data: []byte(tt.page)}}
			for k, v := range repo {
				fsys[k] = v
			}
			got := checkLinks(fsys, "docs/t.md")
			if len(got) != len(tt.want) {
				t.Fatalf("problems %q, want %d matching %q", got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %q does not say %q", got[i], w)
				}
			}
		})
	}
}

func TestAnchor(t *testing.T) {
	for _, tt := range []struct{ heading, want string }{
		{"Quick start", "quick-start"},
		{"Authentication, tenants, CORS, limits", "authentication-tenants-cors-limits"},
		{"Run state (KV `foundryq-runs`, key `<run_id>`)", "run-state-kv-foundryq-runs-key-run_id"},
		{"JetStream storage: sizing and reserving it", "jetstream-storage-sizing-and-reserving-it"},
		{"Dependencies and why", "dependencies-and-why"},
		{"With the plain `nats` CLI", "with-the-plain-nats-cli"},
		{"See [the docs](docs/x.md) now", "see-the-docs-now"},
		{"A -- b", "a----b"},
	} {
		if got := anchor(tt.heading); got != tt.want {
			t.Errorf("anchor(%q) = %q, want %q", tt.heading, got, tt.want)
		}
	}
}

// checkLinks returns one line per broken relative link of the Markdown file
// name in repo: "name:line: target: why".
func checkLinks(repo fs.FS, name string) []string {
	src, err := fs.ReadFile(repo, name)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", name, err)}
	}
	var problems []string
	for _, l := range findLinks(string(src)) {
		if why := checkLink(repo, name, string(src), l.target); why != "" {
			problems = append(problems, fmt.Sprintf("%s:%d: %s: %s", name, l.line, l.target, why))
		}
	}
	return problems
}

// checkLink says what is wrong with one link target of the page name, or "".
func checkLink(repo fs.FS, name, src, target string) string {
	if isAbsolute(target) {
		return ""
	}
	file, frag, _ := strings.Cut(target, "#")
	file, err := url.PathUnescape(file)
	if err != nil {
		return err.Error()
	}
	targetSrc := src
	if file != "" {
		p := path.Join(path.Dir(name), file)
		if p == ".." || strings.HasPrefix(p, "../") {
			return "outside the repository"
		}
		if _, err := fs.Stat(repo, p); err != nil {
			return p + ": no such file"
		}
		if frag == "" {
			return ""
		}
		if !strings.HasSuffix(p, ".md") {
			return p + " is not a Markdown file: its anchors cannot be checked"
		}
		b, err := fs.ReadFile(repo, p)
		if err != nil {
			return err.Error()
		}
		targetSrc = string(b)
	}
	if frag == "" {
		return ""
	}
	for _, h := range headings(targetSrc) {
		if h.anchor == frag {
			return ""
		}
	}
	return fmt.Sprintf("no heading %q", frag)
}

var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

func isAbsolute(target string) bool {
	return scheme.MatchString(target) || strings.HasPrefix(target, "//")
}

type link struct {
	target string
	line   int
}

var (
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	codeSpan   = regexp.MustCompile("(?s)(`+)(?:[^`\n]|\n[^\n])*?`+")
)

// findLinks returns the inline links, images and reference definitions of a
// Markdown text, outside fenced code blocks and code spans.
func findLinks(src string) []link {
	text := blankCode(src)
	var links []link
	for _, re := range []*regexp.Regexp{inlineLink, refDef} {
		for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
			target := strings.TrimSuffix(strings.TrimPrefix(text[m[2]:m[3]], "<"), ">")
			links = append(links, link{target: target, line: 1 + strings.Count(text[:m[0]], "\n")})
		}
	}
	slices.SortStableFunc(links, func(a, b link) int { return a.line - b.line })
	return links
}

// blankCode replaces fenced code blocks and code spans with spaces, keeping
// every newline so that offsets still give line numbers.
func blankCode(src string) string {
	lines := strings.Split(src, "\n")
	fence := ""
	for i, l := range lines {
		trimmed := strings.TrimLeft(l, " ")
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			lines[i] = ""
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			lines[i] = ""
		}
	}
	text := strings.Join(lines, "\n")
	return codeSpan.ReplaceAllStringFunc(text, func(s string) string {
		// A code span closes with a run of backticks as long as its opening one.
		return strings.Map(func(r rune) rune {
			if r == '\n' {
				return r
			}
			return ' '
		}, s)
	})
}

type heading struct {
	level  int
	anchor string
}

var (
	atxHeading    = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$`)
	setextHeading = regexp.MustCompile(`^ {0,3}(=+|-+)\s*$`)
)

// headings returns the headings of a Markdown text, outside fenced code
// blocks, with their GitHub anchors: a repeated anchor gets -1, -2, ...
func headings(src string) []heading {
	var hs []heading
	seen := map[string]int{}
	add := func(level int, text string) {
		a := anchor(text)
		if n := seen[a]; n > 0 {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		hs = append(hs, heading{level: level, anchor: a})
	}
	fence := ""
	prev := ""
	for _, l := range strings.Split(src, "\n") {
		trimmed := strings.TrimLeft(l, " ")
		if fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")) {
			fence, prev = trimmed[:3], ""
			continue
		}
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if m := atxHeading.FindStringSubmatch(l); m != nil {
			add(len(m[1]), m[2])
			prev = ""
			continue
		}
		if m := setextHeading.FindStringSubmatch(l); m != nil && isParagraphLine(prev) {
			level := 1
			if m[1][0] == '-' {
				level = 2
			}
			add(level, strings.TrimSpace(prev))
			prev = ""
			continue
		}
		prev = l
	}
	return hs
}

// isParagraphLine reports whether a line can be the text of a setext heading.
func isParagraphLine(l string) bool {
	t := strings.TrimSpace(l)
	if t == "" || strings.HasPrefix(t, "|") || strings.HasPrefix(t, ">") {
		return false
	}
	return !listItem.MatchString(t)
}

var listItem = regexp.MustCompile(`^([-*+]|\d+[.)])\s`)

var mdLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// anchor is GitHub's anchor for a heading: the text as rendered (link text
// for links, no code backticks), lower case, every character but letters,
// digits, spaces, '-' and '_' removed, spaces turned into '-'.
func anchor(heading string) string {
	text := mdLink.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
