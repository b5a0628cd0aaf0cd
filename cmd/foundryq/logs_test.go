package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/internal/testkit"
)

func consoleLogger(t *testing.T) logFlags {
	t.Helper()
	f := newFlags("x", "x")
	lf := addLogFlags(f, "console")
	if err := f.parse(nil, nil); err != nil {
		t.Fatal(err)
	}
	return lf
}

// Console logs are coloured on a terminal only: into a file or a pipe
// they are plain text.
func TestConsoleLogsColourOnlyOnATerminal(t *testing.T) {
	t.Setenv("NO_COLOR", "")
	t.Setenv("TERM", "xterm")
	lf := consoleLogger(t)
	var plain testkit.Buffer
	log, err := lf.logger(&plain)
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Str("run_id", "r1").Msg("hello")
	if strings.Contains(plain.String(), "\x1b[") || !strings.Contains(plain.String(), "run_id=r1") {
		t.Fatalf("console log into a buffer: %q, want no colour codes", plain.String())
	}
	var tty testkit.Buffer
	if log, err = lf.logger(terminalWriter{&tty}); err != nil {
		t.Fatal(err)
	}
	log.Info().Msg("hello")
	if !strings.Contains(tty.String(), "\x1b[") {
		t.Fatalf("console log on a terminal: %q, want colour", tty.String())
	}
	t.Setenv("NO_COLOR", "1")
	var noColour testkit.Buffer
	log, _ = lf.logger(terminalWriter{&noColour})
	log.Info().Msg("hello")
	if strings.Contains(noColour.String(), "\x1b[") {
		t.Fatalf("NO_COLOR set: %q, want no colour", noColour.String())
	}
	// run marks stderr as a terminal only when it is one: a file is not.
	fh, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, ok := markTerminal(fh, fh).(terminalWriter); ok {
		t.Fatal("a file is taken for a terminal")
	}
}

// Durations in console logs carry their unit (took=1.5s), as they do not
// in zerolog's console writer (took=1500); JSON keeps numbers in ms.
func TestConsoleLogDurationsHaveUnits(t *testing.T) {
	lf := consoleLogger(t)
	var out testkit.Buffer
	log, err := lf.logger(&out)
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Dur("took", 1500*time.Millisecond).Dur("since_submit", 2*time.Minute+3*time.Second).
		Dur("retry_in", 250*time.Millisecond).Int("attempt", 2).Msg("run ended")
	for _, want := range []string{"took=1.5s", "since_submit=2m3s", "retry_in=250ms", "attempt=2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("console log %q lacks %q", out.String(), want)
		}
	}
	*lf.format = "json"
	var js bytes.Buffer
	if log, err = lf.logger(&js); err != nil {
		t.Fatal(err)
	}
	log.Info().Dur("took", 1500*time.Millisecond).Msg("x")
	if !strings.Contains(js.String(), `"took":1500`) {
		t.Fatalf("json log %q: want took in ms", js.String())
	}
}

// Every duration field the project logs (zerolog's Dur) is one the
// console writer gives a unit, unless the name also carries a number
// that is not a duration.
func TestConsoleDurationFieldsCoverTheCode(t *testing.T) {
	dur := regexp.MustCompile(`\.Dur\("([a-z_]+)"`)
	found := map[string]bool{}
	err := filepath.WalkDir(filepath.Join("..", ".."), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range dur.FindAllStringSubmatch(string(src), -1) {
			found[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) == 0 {
		t.Fatal("no Dur fields found: is the walk in the repository?")
	}
	for name := range found {
		if !consoleDurationFields[name] && !ambiguousDurationFields[name] {
			t.Errorf("duration field %q is logged without a unit in console logs: add it to consoleDurationFields", name)
		}
	}
}
