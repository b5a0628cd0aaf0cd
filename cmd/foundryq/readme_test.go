package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The README installs the binary before it lists the exit codes, says
// what go run does to them, uses the binary wherever it shows one, and
// quotes the port-in-use message as the code writes it.
func TestReadmeExitCodesAndInstall(t *testing.T) {
	t.Parallel()
	src := readme(t)
	install := strings.Index(src, "go install ./cmd/foundryq")
	codes := strings.Index(src, "Exit codes")
	if install < 0 || codes < 0 || install > codes || install > strings.Index(src, "## Using it") {
		t.Fatalf("README: go install ./cmd/foundryq at %d, want it in the quick start, before the exit codes (at %d)", install, codes)
	}
	if !strings.Contains(src, "`go run` prints a non-zero exit as `exit status 4` and itself exits **1**") {
		t.Error("README does not say what go run does to exit codes")
	}
	for _, line := range strings.Split(src, "\n") {
		if strings.Contains(line, "$?") && strings.Contains(line, "go run") {
			t.Errorf("README shows an exit code of go run: %q", line)
		}
	}
	msg := "foundryq: dev: " + listenError{addr: "127.0.0.1:4222", setting: devNATSPortSetting, err: syscall.EADDRINUSE}.Error()
	if !strings.Contains(src, "`"+msg+"`") {
		t.Errorf("README does not quote the message %q", msg)
	}
	if !strings.Contains(src, "Chromium") {
		t.Error("README does not say the browser test needs Chromium")
	}
}

// readmeSSEOpening is the first line of the README's SSE sample, with
// its run id (a placeholder) replaced by runID.
func readmeSSEOpening(t *testing.T, runID string) string {
	t.Helper()
	_, after, ok := strings.Cut(readme(t), "curl -sN $G/v1/runs/$RUN/events\n")
	if !ok {
		t.Fatal("README has no SSE sample")
	}
	first, _, _ := strings.Cut(after, "\n")
	return strings.ReplaceAll(strings.TrimPrefix(first, "# "), "run_kq3...", runID)
}
