package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/internal/testkit"
)

func TestMain(m *testing.M) {
	if os.Getenv(benchChildEnv) == "1" {
		// A process of foundryq bench (TestBenchQuickJSON): be foundryq.
		main()
	}
	goleak.VerifyTestMain(m)
}

func runCmd(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut testkit.Buffer
	code := run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsageAndHelp(t *testing.T) {
	ctx := context.Background()
	if code, _, stderr := runCmd(t, ctx, "nope"); code != 2 || !strings.Contains(stderr, `unknown command "nope"`) {
		t.Fatalf("unknown command: code %d, stderr %q", code, stderr)
	}
	for name := range commands {
		code, stdout, _ := runCmd(t, ctx, name, "--help")
		if code != 0 || !strings.Contains(stdout, "Usage: foundryq "+name) {
			t.Errorf("%s --help: code %d, output %q", name, code, stdout)
		}
	}
	_, stdout, _ := runCmd(t, ctx, "worker", "--help")
	for _, want := range []string{"--nats-url", "NATS_URL", "nats://127.0.0.1:4222", "--foundry-endpoint", "FOUNDRY_ENDPOINT", "--foundry-api-key", "FOUNDRY_API_KEY", "--concurrency", "64"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("worker --help does not mention %q", want)
		}
	}
	if code, _, stderr := runCmd(t, ctx, "worker", "--concurrency", "x"); code != 2 || !strings.Contains(stderr, "concurrency") {
		t.Errorf("bad flag: code %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCmd(t, ctx, "worker"); code != 2 || !strings.Contains(stderr, "FOUNDRY_ENDPOINT") {
		t.Errorf("worker without endpoint: code %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCmd(t, ctx, "submit", "--input", "hi"); code != 2 || !strings.Contains(stderr, "model") {
		t.Errorf("submit without model or agent: code %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCmd(t, ctx, "cancel", "bad id!"); code != 2 || !strings.Contains(stderr, "run id") {
		t.Errorf("cancel with a bad id: code %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCmd(t, ctx, "watch", "--nats-url", "nats://127.0.0.1:"+strconv.Itoa(freePort(t)), "r1"); code != exitNATS || !strings.Contains(stderr, "is a server running") {
		t.Errorf("watch with no NATS: code %d, stderr %q", code, stderr)
	}
}

func TestFlagsFromEnvironment(t *testing.T) {
	t.Setenv("FOUNDRYQ_CONCURRENCY", "7")
	f := newFlags("x", "x")
	n := f.Int("concurrency", "FOUNDRYQ_CONCURRENCY", 64, "")
	if err := f.parse(nil, &bytes.Buffer{}); err != nil || *n != 7 {
		t.Fatalf("env value: %d, %v", *n, err)
	}
	f = newFlags("x", "x")
	n = f.Int("concurrency", "FOUNDRYQ_CONCURRENCY", 64, "")
	if err := f.parse([]string{"--concurrency", "9"}, &bytes.Buffer{}); err != nil || *n != 9 {
		t.Fatalf("flag over env: %d, %v", *n, err)
	}
	t.Setenv("FOUNDRYQ_CONCURRENCY", "lots")
	f = newFlags("x", "x")
	f.Int("concurrency", "FOUNDRYQ_CONCURRENCY", 64, "")
	if err := f.parse(nil, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "FOUNDRYQ_CONCURRENCY") {
		t.Fatalf("bad env value: %v", err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	return testkit.FreePorts(t, 1)[0]
}

// The README's first command, end to end: dev mode, then submit --watch,
// a slow run cancelled with the cancel command, runs, and exit codes.
func TestDevModeWithTheCLI(t *testing.T) {
	p := testkit.FreePorts(t, 4)
	natsPort, emuPort, gwPort, opsPort := p[0], p[1], p[2], p[3]
	t.Setenv("FOUNDRY_ENDPOINT", "") // the emulator, whatever the caller's environment
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var devOut, devErr testkit.Buffer
	go func() {
		done <- run(ctx, []string{"dev", "--nats-port", strconv.Itoa(natsPort), "--emulator-addr", "127.0.0.1:" + strconv.Itoa(emuPort),
			"--http-addr", "127.0.0.1:" + strconv.Itoa(opsPort), "--gateway-addr", "127.0.0.1:" + strconv.Itoa(gwPort),
			"--workers", "2", "--emulator-token-delay", "1ms", "--log-level", "warn"}, &devOut, &devErr)
	}()
	defer func() {
		stop()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("dev exited %d: %s", code, devErr.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("dev did not stop")
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(devOut.String(), "foundryq dev is running") {
		if time.Now().After(deadline) {
			t.Fatalf("dev did not start: %s %s", devOut.String(), devErr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	natsURL := "nats://127.0.0.1:" + strconv.Itoa(natsPort)
	cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	consoleURL := "http://127.0.0.1:" + strconv.Itoa(gwPort) + "/"
	if !strings.Contains(devOut.String(), "Console:  "+consoleURL) {
		t.Fatalf("dev does not print the console URL %s:\n%s", consoleURL, devOut.String())
	}
	checkGatewayServes(t, consoleURL, "")
	// The banner's first hint, as printed, reaches this dev.
	var hint []string
	for _, line := range strings.Split(devOut.String(), "\n") {
		if w := shellWords(line); len(w) > 3 && w[0] == "go" && w[3] == "submit" {
			hint = w[3:]
			break
		}
	}
	if code, _, stderr := runCmd(t, cctx, hint...); code != 0 || !strings.Contains(stderr, "run completed") {
		t.Fatalf("dev's hint %q: code %d, stderr %q\n%s", hint, code, stderr, devOut.String())
	}
	// dev's /readyz: both workers ready.
	testkit.WaitHTTP(t, time.Minute, "http://127.0.0.1:"+strconv.Itoa(opsPort)+"/readyz", http.StatusOK, "ok")

	code, stdout, stderr := runCmd(t, cctx, "submit", "--nats-url", natsURL, "--model", "gpt-4o", "--input", "hello", "--run-id", "cli-1", "--watch")
	if code != 0 || !strings.HasPrefix(stdout, "cli-1\n") || len(strings.TrimSpace(stdout)) < len("cli-1")+10 || !strings.Contains(stderr, "run completed") {
		t.Fatalf("submit --watch: code %d\nstdout %q\nstderr %q", code, stdout, stderr)
	}
	// The README's SSE sample opens as the gateway's stream does.
	sse := httpGet(t, cctx, consoleURL+"v1/runs/cli-1/events")
	if first, _, _ := strings.Cut(sse, "\n"); first != readmeSSEOpening(t, "cli-1") {
		t.Fatalf("the event stream opens with %q; the README shows %q", first, readmeSSEOpening(t, "cli-1"))
	}
	code, stdout, _ = runCmd(t, cctx, "submit", "--nats-url", natsURL, "--model", "gpt-4o", "--input", "slow", "--run-id", "cli-2",
		"--metadata", "emu_tokens=100000", "--metadata", "emu_token_ms=20")
	if code != 0 || stdout != "cli-2\n" {
		t.Fatalf("submit: code %d, stdout %q", code, stdout)
	}
	watched := make(chan [3]string, 1)
	go func() {
		code, stdout, stderr := runCmd(t, cctx, "watch", "--nats-url", natsURL, "cli-2")
		watched <- [3]string{strconv.Itoa(code), stdout, stderr}
	}()
	time.Sleep(500 * time.Millisecond)
	code, stdout, _ = runCmd(t, cctx, "cancel", "--nats-url", natsURL, "cli-2")
	if code != 0 || !strings.Contains(stdout, "cancelling") {
		t.Fatalf("cancel: code %d, stdout %q", code, stdout)
	}
	w := <-watched
	if w[0] != strconv.Itoa(exitCancelled) || !strings.Contains(w[2], "run cancelled: a cancel was requested; Foundry status: cancelled") {
		t.Fatalf("watch of a cancelled run: code %s, stderr %q", w[0], w[2])
	}
	if code, stdout, _ := runCmd(t, cctx, "cancel", "--nats-url", natsURL, "no-such-run"); code != exitNotFound || !strings.Contains(stdout, "not found") {
		t.Fatalf("cancel of an unknown run: code %d, stdout %q", code, stdout)
	}
	if code, _, stderr := runCmd(t, cctx, "runs", "--nats-url", natsURL, "no-such-run"); code != exitNotFound || !strings.Contains(stderr, "no such run") {
		t.Fatalf("runs of an unknown run: code %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCmd(t, cctx, "submit", "--nats-url", natsURL, "--model", "gpt-4o", "--input", "fail", "--run-id", "cli-3",
		"--metadata", "emu_fail_after=3", "--watch")
	if code != exitFailed || !strings.Contains(stderr, "failed") {
		t.Fatalf("submit --watch of a failing run: code %d, stderr %q", code, stderr)
	}
	// An incomplete run did not finish its work: exit 3 too.
	code, _, stderr = runCmd(t, cctx, "submit", "--nats-url", natsURL, "--model", "gpt-4o", "--input", "filtered", "--run-id", "cli-4",
		"--metadata", "emu_content_filter=incomplete", "--watch")
	if code != exitFailed || !strings.Contains(stderr, "run incomplete (content_filter)") {
		t.Fatalf("submit --watch of an incomplete run: code %d, stderr %q", code, stderr)
	}
	// The same request again is a retry: the existing run, not an error.
	code, stdout, stderr = runCmd(t, cctx, "submit", "--nats-url", natsURL, "--model", "gpt-4o", "--input", "fail", "--run-id", "cli-3",
		"--metadata", "emu_fail_after=3")
	if code != exitOK || stdout != "cli-3\n" || !strings.Contains(stderr, "already ran this request") {
		t.Fatalf("resubmit: code %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, stdout, _ := runCmd(t, cctx, "runs", "--nats-url", natsURL); code != 0 || !strings.Contains(stdout, "cli-1") || !strings.Contains(stdout, "cancelled") {
		t.Fatalf("runs: code %d, stdout %q", code, stdout)
	}
}

// With --workers 0, dev still runs until interrupted (NATS and the emulator
// serve external workers).
func TestDevWithoutWorkersKeepsRunning(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var out testkit.Buffer
	go func() {
		done <- run(ctx, []string{"dev", "--workers", "0", "--nats-port", "0",
			"--emulator-addr", "127.0.0.1:0", "--http-addr", "", "--gateway-addr", "", "--log-level", "error"}, &out, &out)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "foundryq dev is running") {
		if time.Now().After(deadline) {
			t.Fatalf("dev did not start: %s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case code := <-done:
		t.Fatalf("dev --workers 0 exited by itself with %d", code)
	case <-time.After(500 * time.Millisecond):
	}
	stop()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("dev exited %d: %s", code, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("dev did not stop")
	}
}

func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("demo takes a few seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code, stdout, stderr := runCmd(t, ctx, "demo", "--tool-time", "1s")
	if code != 0 {
		t.Fatalf("demo exited %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"server-side status of", ": cancelled", "tool calls completed after the cancel:   0", "tokens generated after the cancel:       0",
		"waits for approval of lookup_customer", "[step 2 started", "One run, two responses",
		"5. A function tool served over NATS by this process", "[tool get_weather started]", "[cancel sent while get_weather runs",
		"[the service's ctx ended", "tools: the worker cancelled the call", "[run cancelled: a cancel was requested"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, stdout)
		}
	}
	// The served tool's step: its ctx ended well before the call's 1 s.
	if m := regexp.MustCompile(`\[the service's ctx ended ([0-9.]+(?:µs|ms|s)) after the cancel was sent`).FindStringSubmatch(stdout); m == nil {
		t.Errorf("no time from the cancel to the service's ctx:\n%s", stdout)
	} else if d, err := time.ParseDuration(m[1]); err != nil || d >= time.Second {
		t.Errorf("the service's ctx ended %s after the cancel", m[1])
	}
}

// The demo's served tool step says so, instead of waiting, when the
// worker does not call served tools and asks the run's caller instead.
func TestDemoServedToolNotCalled(t *testing.T) {
	stack := devstack.StartT(t, devstack.Config{Workers: 1, Worker: consumer.Config{DisableServedTools: true}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out testkit.Buffer
	err := demoServedTool(ctx, stack, time.Second, &out, func(string, ...any) {})
	if err == nil || !strings.Contains(err.Error(), "asked the caller for the output of get_weather") {
		t.Fatalf("demo step: %v\n%s", err, out.String())
	}
}

// httpGet returns the body of a GET of url (an event stream of an ended
// run ends by itself).
func httpGet(t *testing.T, ctx context.Context, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(body)
}

// startCommand runs foundryq with args until the test ends, then stops it
// (as a signal would) and fails the test unless it exited 0 within a
// minute; it returns the command's stdout and stderr.
func startCommand(t *testing.T, args ...string) (stdout, stderr *testkit.Buffer) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	stdout, stderr = new(testkit.Buffer), new(testkit.Buffer)
	go func() { done <- run(ctx, args, stdout, stderr) }()
	t.Cleanup(func() {
		stop()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("foundryq %s exited %d: %s", args[0], code, stderr.String())
			}
		case <-time.After(60 * time.Second):
			t.Errorf("foundryq %s did not stop", args[0])
		}
	})
	return stdout, stderr
}
