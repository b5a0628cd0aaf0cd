package main

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

// A worker whose Foundry key is wrong says so at start and on /readyz
// (503 "not ready: upstream: ... 401 ..."); --check-upstream=false skips
// the check and the worker is ready.
func TestWorkerChecksUpstream(t *testing.T) {
	ns := natsembed.StartT(t, natsembed.Config{StoreDir: t.TempDir()})
	emu := foundrytest.NewServer(foundrytest.Config{APIKey: "k"})
	defer emu.Close()

	startWorker := func(extra ...string) (string, *testkit.Buffer) {
		t.Helper()
		addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
		return addr, runUntilCleanup(t, append([]string{"worker", "--nats-url", ns.ClientURL(), "--foundry-endpoint", emu.BaseURL(),
			"--foundry-api-key", "wrong", "--http-addr", addr, "--log-level", "error"}, extra...)...)
	}

	addr, werr := startWorker()
	body := testkit.WaitHTTP(t, time.Minute, "http://"+addr+"/readyz", http.StatusServiceUnavailable, "not ready: upstream: ")
	if !strings.Contains(body, "401") || strings.Count(strings.TrimSpace(body), "\n") != 0 {
		t.Errorf("/readyz = %q, want the 401 on one line", body)
	}
	testkit.Eventually(t, 30*time.Second, "the failed check logged", func() bool {
		return strings.Contains(werr.String(), "Foundry endpoint check failed")
	})

	skip, _ := startWorker("--check-upstream=false")
	testkit.WaitHTTP(t, time.Minute, "http://"+skip+"/readyz", http.StatusOK, "ok")
}

// dev checks its Foundry endpoint as worker does: a wrong key makes dev's
// /readyz say "not ready: upstream: ... 401" (the emulator dev starts
// itself passes the check: TestDevModeWithTheCLI waits for ready);
// --check-upstream=false skips it.
func TestDevChecksUpstream(t *testing.T) {
	emu := foundrytest.NewServer(foundrytest.Config{APIKey: "k"})
	defer emu.Close()
	startDev := func(extra ...string) (string, *testkit.Buffer) {
		t.Helper()
		addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
		return addr, runUntilCleanup(t, append([]string{"dev", "--nats-port", "0", "--foundry-endpoint", emu.BaseURL(), "--foundry-api-key", "wrong",
			"--http-addr", addr, "--gateway-addr", "", "--log-level", "error"}, extra...)...)
	}
	addr, derr := startDev()
	if body := testkit.WaitHTTP(t, time.Minute, "http://"+addr+"/readyz", http.StatusServiceUnavailable, "not ready: upstream: "); !strings.Contains(body, "401") {
		t.Errorf("dev's /readyz = %q, want the 401", body)
	}
	testkit.Eventually(t, 30*time.Second, "the failed check logged", func() bool {
		return strings.Contains(derr.String(), "Foundry endpoint check failed")
	})
	skip, _ := startDev("--check-upstream=false")
	testkit.WaitHTTP(t, time.Minute, "http://"+skip+"/readyz", http.StatusOK, "ok")
}

// runUntilCleanup runs foundryq with args until the test ends, then
// interrupts it and expects exit 0; it returns what it writes to stderr.
func runUntilCleanup(t *testing.T, args ...string) *testkit.Buffer {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stdout, stderr testkit.Buffer
	go func() { done <- run(ctx, args, &stdout, &stderr) }()
	t.Cleanup(func() {
		stop()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("%s exited %d: %s", args[0], code, stderr.String())
			}
		case <-time.After(60 * time.Second):
			t.Errorf("%s did not stop", args[0])
		}
	})
	return &stderr
}
