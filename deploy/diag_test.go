package deploy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// What the container tests print when they fail: the steps that led to the
// failure (step), every container's output (run, and the compose project's
// logs in the cluster test), and the state of NATS and the emulator
// (dumpOnFailure).

// step logs the step a test starts, with the wall-clock time: a failure's
// log then reads as the list of steps done, the failing one last, and the
// times line up with the containers' timestamped output.
func step(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Logf("step %s: %s", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// dumpOnFailure registers a cleanup that, if t failed, logs the body of
// each URL (monitoring endpoints, the emulator's stats), read at that time.
func dumpOnFailure(t *testing.T, urls ...string) {
	t.Helper()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, url := range urls {
			t.Logf("--- GET %s:\n%s", url, fetch(url))
		}
	})
}

// fetch returns the body of url (at most 64 KiB) or the error.
func fetch(url string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return fmt.Sprintf("%s: read: %v", resp.Status, err)
	}
	return resp.Status + "\n" + string(body)
}
