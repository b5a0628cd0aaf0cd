package docs

import (
	"io/fs"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go"
)

// libraryMessages are the texts of the library errors that
// troubleshooting.md quotes: the libraries print them, not our code.
var libraryMessages = []string{
	nats.ErrNoServers.Error(),
	nats.ErrAuthorization.Error(),
	syscall.EADDRINUSE.Error(),
}

var (
	messageLineRE = regexp.MustCompile(`(?m)^Message:((?:.*\n)*?)\n`) // the "Message:" paragraph
	codeSpanRE    = regexp.MustCompile("`([^`]+)`")
)

// quotedPieces returns the quoted pieces of a troubleshooting page: every
// code span of its "Message:" paragraphs, split at "…".
func quotedPieces(page string) []string {
	var pieces []string
	for _, para := range messageLineRE.FindAllStringSubmatch(page, -1) {
		for _, span := range codeSpanRE.FindAllStringSubmatch(para[1], -1) {
			for _, p := range strings.Split(span[1], "…") {
				if p = strings.TrimSpace(p); p != "" {
					pieces = append(pieces, p)
				}
			}
		}
	}
	return pieces
}

// goSources reads every non-test .go file of the repository.
func goSources(t *testing.T, repo fs.FS) []string {
	t.Helper()
	var srcs []string
	err := fs.WalkDir(repo, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return fs.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			src, err := fs.ReadFile(repo, path)
			if err != nil {
				return err
			}
			srcs = append(srcs, string(src))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return srcs
}

// missingPieces returns the pieces that occur in none of the sources.
func missingPieces(pieces, sources []string) []string {
	var missing []string
	for _, p := range pieces {
		found := false
		for _, s := range sources {
			if strings.Contains(s, p) {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, p)
		}
	}
	return missing
}

// TestTroubleshootingMessages checks that every message troubleshooting.md
// quotes still occurs in the code (or is a library's error text), so that
// the page cannot go on quoting a message that foundryq no longer prints.
func TestTroubleshootingMessages(t *testing.T) {
	page, err := os.ReadFile("troubleshooting.md")
	if err != nil {
		t.Fatal(err)
	}
	pieces := quotedPieces(string(page))
	if sections := strings.Count(string(page), "\n## "); len(pieces) < sections || sections < 10 {
		t.Fatalf("%d sections and %d quoted pieces: want ten errors or more, each with its message", sections, len(pieces))
	}
	sources := append(goSources(t, os.DirFS("..")), libraryMessages...)
	for _, p := range missingPieces(pieces, sources) {
		t.Errorf("troubleshooting.md quotes %q, which no Go source of the repository contains", p)
	}
}

func TestQuotedPieces(t *testing.T) {
	page := "# T\n\nMessage: `a … b`, `c`\nand `d`; exit code 5\n\nText with `not quoted`.\n\nMessage: `e`\n\n"
	got := quotedPieces(page)
	if strings.Join(got, "|") != "a|b|c|d|e" {
		t.Fatalf("quotedPieces = %q", got)
	}
	if m := missingPieces([]string{"run already queued", "run already  queued", "gone"},
		[]string{`errors.New("run already queued")`}); strings.Join(m, "|") != "run already  queued|gone" {
		t.Fatalf("missingPieces = %q", m)
	}
}
