package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// TestMain builds the foundryq binary once for the chaos run (only when
// FOUNDRYQ_CHAOS asks for one: the default tests run no subprocess) and
// checks that no test leaves a goroutine behind.
func TestMain(m *testing.M) {
	if _, ok := chaosModes[os.Getenv("FOUNDRYQ_CHAOS")]; ok {
		dir, err := os.MkdirTemp("", "foundryq-chaos-*")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		foundryqBin = filepath.Join(dir, "foundryq")
		build := exec.Command("go", "build", "-o", foundryqBin, "github.com/foundryq/foundryq/cmd/foundryq")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build foundryq:", err)
			os.Exit(1)
		}
		code := m.Run()
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}
