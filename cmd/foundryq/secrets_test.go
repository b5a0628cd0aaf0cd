package main

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foundryq/foundryq/internal/testkit"
)

// outputs collects everything a CLI session printed, to grep it.
type outputs struct {
	mu   sync.Mutex
	all  []string
	name []string
}

func (o *outputs) add(name string, texts ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, t := range texts {
		o.all = append(o.all, t)
		o.name = append(o.name, name)
	}
}

// cli runs a command in process and records its output.
func (o *outputs) cli(t *testing.T, ctx context.Context, name string, args ...string) (int, string, string) {
	t.Helper()
	code, stdout, stderr := runCmd(t, ctx, args...)
	o.add(name, stdout, stderr)
	return code, stdout, stderr
}

// TestNoSecretInAnyOutput runs a whole dev session with authentication (the
// deploy config), an API key and NATS passwords, drives submit, watch,
// cancel and runs as the client user, provokes the errors that quote
// URLs, asks every command for --help with the secrets in the
// environment, and greps everything printed (stdout, stderr, debug logs)
// for the secrets.
func TestNoSecretInAnyOutput(t *testing.T) {
	const (
		workerPW = "wpwSecret7731"
		clientPW = "cpwSecret9917"
		apiKey   = "keySecret4242"
	)
	secretsList := []string{workerPW, clientPW, apiKey}
	t.Setenv("WORKER_PASSWORD", workerPW) // read by the config file
	t.Setenv("CLIENT_PASSWORD", clientPW)
	t.Setenv("GATEWAY_PASSWORD", "gpwSecret5519")
	t.Setenv("TOOLS_PASSWORD", "tpwSecret5519")
	t.Setenv("FOUNDRY_ENDPOINT", "")
	var out outputs

	p := testkit.FreePorts(t, 2)
	natsPort, emuPort := p[0], p[1]
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var devOut, devErr testkit.Buffer
	go func() {
		done <- run(ctx, []string{"dev", "--nats-config", filepath.Join("..", "..", "deploy", "nats", "nats-server.conf"),
			"--nats-user", "worker", "--nats-password", workerPW, "--emulator-api-key", apiKey,
			"--nats-port", strconv.Itoa(natsPort), "--emulator-addr", "127.0.0.1:" + strconv.Itoa(emuPort),
			"--http-addr", "", "--workers", "1", "--emulator-token-delay", "1ms", "--log-level", "debug"}, &devOut, &devErr)
	}()
	stopped := false
	stopDev := func() {
		if stopped {
			return
		}
		stopped = true
		stop()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("dev exited %d: %s", code, devErr.String())
			}
		case <-time.After(60 * time.Second):
			t.Error("dev did not stop")
		}
		out.add("dev", devOut.String(), devErr.String())
	}
	defer stopDev()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(devOut.String(), "foundryq dev is running") {
		if time.Now().After(deadline) {
			t.Fatalf("dev did not start: %s %s", devOut.String(), devErr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	natsURL := "nats://client:" + clientPW + "@127.0.0.1:" + strconv.Itoa(natsPort)
	cctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	// The client commands work as the least-privileged client user.
	if code, stdout, stderr := out.cli(t, cctx, "submit", "submit", "--nats-url", natsURL, "--model", "m", "--input", "hi", "--run-id", "sec-1", "--watch"); code != 0 || !strings.Contains(stderr, "run completed") {
		t.Fatalf("submit --watch as client: code %d\n%s\n%s", code, stdout, stderr)
	}
	if code, _, stderr := out.cli(t, cctx, "submit", "submit", "--nats-url", natsURL, "--model", "m", "--input", "slow", "--run-id", "sec-2", "--metadata", "emu_tokens=100000", "--metadata", "emu_token_ms=20"); code != 0 {
		t.Fatalf("submit: %d %s", code, stderr)
	}
	watched := make(chan int, 1)
	go func() {
		code, _, _ := out.cli(t, cctx, "watch", "watch", "--nats-url", natsURL, "sec-2")
		watched <- code
	}()
	waitRunning(t, cctx, &out, natsURL, "sec-2")
	if code, stdout, stderr := out.cli(t, cctx, "cancel", "cancel", "--nats-url", natsURL, "sec-2"); code != 0 || !strings.Contains(stdout, "cancelling") {
		t.Fatalf("cancel as client: %d %s %s", code, stdout, stderr)
	}
	if code := <-watched; code != exitCancelled {
		t.Fatalf("watch of the cancelled run exited %d, want %d", code, exitCancelled)
	}
	if code, stdout, stderr := out.cli(t, cctx, "runs", "runs", "--nats-url", natsURL); code != 0 || !strings.Contains(stdout, "sec-1") || !strings.Contains(stdout, "sec-2") {
		t.Fatalf("runs as client: %d %s %s", code, stdout, stderr)
	}
	if code, stdout, stderr := out.cli(t, cctx, "runs", "runs", "--nats-url", natsURL, "--json", "sec-1"); code != 0 || !strings.Contains(stdout, `"completed"`) {
		t.Fatalf("runs sec-1 as client: %d %s %s", code, stdout, stderr)
	}

	// Errors that quote the URL or the credentials.
	badURLs := map[string]string{
		"wrong password":   "nats://client:" + workerPW + "@127.0.0.1:" + strconv.Itoa(natsPort),
		"no server":        "nats://client:" + clientPW + "@127.0.0.1:1",
		"unparseable":      "nats://client:" + clientPW + "@ho st:4222",
		"token":            "nats://" + clientPW + "@127.0.0.1:1",
		"escaped password": "nats://client:" + url.QueryEscape(clientPW+"/x") + "@127.0.0.1:1",
	}
	for name, u := range badURLs {
		for _, cmd := range [][]string{{"submit", "--model", "m", "--input", "x"}, {"watch", "r1"}, {"cancel", "r1"}, {"runs"}} {
			args := append([]string{cmd[0], "--nats-url", u}, cmd[1:]...)
			if code, _, stderr := out.cli(t, cctx, cmd[0]+" "+name, args...); code == 0 {
				t.Errorf("%s with %s succeeded: %s", cmd[0], name, stderr)
			}
		}
	}
	for name, args := range map[string][]string{
		"worker over http":          {"worker", "--foundry-endpoint", "http://foundry.example.com/openai/v1/", "--foundry-api-key", apiKey, "--nats-url", natsURL},
		"worker with a bad URL":     {"worker", "--foundry-endpoint", "https://u:" + apiKey + "@foundry example.com/", "--nats-url", natsURL},
		"worker, no NATS":           {"worker", "--foundry-endpoint", "https://foundry.example.com/openai/v1/", "--foundry-api-key", apiKey, "--nats-url", "nats://worker:" + workerPW + "@ho st:1"},
		"password without user":     {"runs", "--nats-password", workerPW},
		"bad flag after a password": {"submit", "--nats-url", natsURL, "--nats-password", workerPW, "--nope"},
	} {
		if code, _, _ := out.cli(t, cctx, name, args...); code == 0 {
			t.Errorf("%s succeeded", name)
		}
	}

	// --help of every command, with the secrets in the environment.
	t.Setenv("NATS_URL", natsURL)
	t.Setenv("NATS_PASSWORD", workerPW)
	t.Setenv("FOUNDRY_API_KEY", apiKey)
	t.Setenv("FOUNDRYQ_EMULATOR_API_KEY", apiKey)
	for name := range commands {
		out.cli(t, cctx, name+" --help", name, "--help")
	}
	out.cli(t, cctx, "usage", "--help")

	stopDev()
	for i, text := range out.all {
		for _, s := range secretsList {
			for _, form := range []string{s, url.QueryEscape(s + "/x")} {
				if strings.Contains(text, form) {
					t.Errorf("output of %s shows a secret (%s):\n%s", out.name[i], form, text)
				}
			}
		}
	}
	if !strings.Contains(strings.Join(out.all, "\n"), "REDACTED") {
		t.Error("no output names a redacted credential: were the error paths reached?")
	}
	if _, err := os.Stat(filepath.Join("..", "..", "deploy", "nats", "nats-server.conf")); err != nil {
		t.Fatal(err)
	}
}

// waitRunning waits until the run's state says a worker runs it.
func waitRunning(t *testing.T, ctx context.Context, out *outputs, natsURL, runID string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, stdout, _ := out.cli(t, ctx, "runs "+runID, "runs", "--nats-url", natsURL, "--json", runID)
		if strings.Contains(stdout, `"response_id"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s did not start: %s", runID, stdout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
