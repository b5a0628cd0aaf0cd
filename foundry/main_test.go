package foundry

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind (streams closed,
// AfterFuncs stopped, emulators shut down).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
