package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/internal/testkit"
)

// devWithConfig runs dev with the deploy config and returns its exit code
// and what it printed; it must end by itself (a config error).
func devWithConfig(t *testing.T, args ...string) (int, string) {
	t.Helper()
	p := testkit.FreePorts(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr testkit.Buffer
	code := run(ctx, append([]string{"dev", "--nats-config", filepath.Join("..", "..", "deploy", "nats", "nats-server.conf"),
		"--nats-user", "worker", "--nats-password", "wpw", "--nats-port", strconv.Itoa(p[0]),
		"--emulator-addr", "127.0.0.1:" + strconv.Itoa(p[1]), "--http-addr", "", "--gateway-addr", ""}, args...), &stdout, &stderr)
	if ctx.Err() != nil {
		t.Fatalf("dev ran until the deadline: %s", stderr.String())
	}
	return code, stdout.String() + stderr.String()
}

// dev --nats-config with a password variable unset, or set but empty,
// exits with an error that says which, instead of panicking or starting
// a server with a password-less user.
func TestDevNATSConfigErrors(t *testing.T) {
	t.Run("unset", func(t *testing.T) {
		t.Setenv("WORKER_PASSWORD", "wpw")
		t.Setenv("CLIENT_PASSWORD", "cpw")
		t.Setenv("TOOLS_PASSWORD", "tpw")
		unsetenv(t, "GATEWAY_PASSWORD")
		code, out := devWithConfig(t)
		if code == 0 || !strings.Contains(out, "GATEWAY_PASSWORD") || strings.Contains(out, "panic") {
			t.Fatalf("exit %d, output:\n%s\nwant an error naming GATEWAY_PASSWORD", code, out)
		}
	})
	t.Run("empty", func(t *testing.T) {
		t.Setenv("WORKER_PASSWORD", "wpw")
		t.Setenv("CLIENT_PASSWORD", "")
		t.Setenv("GATEWAY_PASSWORD", "gpw")
		t.Setenv("TOOLS_PASSWORD", "tpw")
		code, out := devWithConfig(t)
		if code == 0 || !strings.Contains(out, "password is empty") || strings.Contains(out, "running") {
			t.Fatalf("exit %d, output:\n%s\nwant an error about the empty password", code, out)
		}
	})
}

// unsetenv unsets key for the test (restored after it).
func unsetenv(t *testing.T, key string) {
	t.Helper()
	t.Setenv(key, "")
	if err := os.Unsetenv(key); err != nil {
		t.Fatal(err)
	}
}

// dev --nats-config runs the gateway as the config's gateway user when
// given its password: a run submitted over HTTP completes, with the
// least-privileged roles of deploy/nats/nats-server.conf throughout.
func TestDevNATSConfigRunsTheGateway(t *testing.T) {
	t.Setenv("WORKER_PASSWORD", "wpw")
	t.Setenv("CLIENT_PASSWORD", "cpw")
	t.Setenv("GATEWAY_PASSWORD", "gpw")
	t.Setenv("TOOLS_PASSWORD", "tpw")
	t.Setenv("FOUNDRY_ENDPOINT", "")
	p := testkit.FreePorts(t, 2)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stdout, stderr testkit.Buffer
	go func() {
		done <- run(ctx, []string{"dev", "--nats-config", filepath.Join("..", "..", "deploy", "nats", "nats-server.conf"),
			"--nats-user", "worker", "--nats-password", "wpw", "--gateway-nats-password", "gpw", "--gateway-addr", "127.0.0.1:0",
			"--nats-port", strconv.Itoa(p[0]), "--emulator-addr", "127.0.0.1:" + strconv.Itoa(p[1]),
			"--http-addr", "", "--emulator-token-delay", "1ms"}, &stdout, &stderr)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("dev exited %d: %s", code, stderr.String())
			}
		case <-time.After(60 * time.Second):
			t.Error("dev did not stop")
		}
	})
	console := regexp.MustCompile(`Console:\s+(http://\S+)/ `)
	var base string
	testkit.Eventually(t, 60*time.Second, "dev's console line", func() bool {
		if m := console.FindStringSubmatch(stdout.String()); m != nil {
			base = m[1]
			return true
		}
		select {
		case code := <-done:
			done <- code
			t.Fatalf("dev exited %d: %s %s", code, stdout.String(), stderr.String())
		default:
		}
		return false
	})
	resp, err := http.Post(base+"/v1/runs", "application/json", strings.NewReader(`{"run_id":"dev-gw","model":"m","input":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST /v1/runs: %d", resp.StatusCode)
	}
	testkit.Eventually(t, 60*time.Second, "run dev-gw completed", func() bool {
		resp, err := http.Get(base + "/v1/runs/dev-gw")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `"status":"completed"`)
	})
	if strings.Contains(stderr.String(), "Permissions Violation") {
		t.Fatalf("a permission was refused: %s", stderr.String())
	}
}
