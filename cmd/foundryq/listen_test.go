package main

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/internal/testkit"
)

// occupy listens on a free loopback port for the test and returns it.
func occupy(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// Every listener of dev, worker, gateway and emulator, when its port is
// taken: the command ends at once, exit 1, with one line that names the
// port and the flag and variable to change; no panic, no wait.
func TestStartupPortInUse(t *testing.T) {
	t.Setenv("FOUNDRY_ENDPOINT", "")
	addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	// dev with every port free but the one the case occupies.
	dev := func(t *testing.T, which string, busy int) []string {
		p := testkit.FreePorts(t, 4)
		ports := map[string]string{"nats": strconv.Itoa(p[0]), "emu": addr(p[1]), "ops": addr(p[2]), "gw": addr(p[3])}
		if which == "nats" {
			ports[which] = strconv.Itoa(busy)
		} else {
			ports[which] = addr(busy)
		}
		return []string{"dev", "--nats-port", ports["nats"], "--emulator-addr", ports["emu"], "--http-addr", ports["ops"], "--gateway-addr", ports["gw"]}
	}
	cases := []struct {
		name    string
		args    func(t *testing.T, busy int) []string
		setting string
	}{
		{"dev nats", func(t *testing.T, busy int) []string { return dev(t, "nats", busy) }, "(--nats-port / FOUNDRYQ_DEV_NATS_PORT)"},
		{"dev emulator", func(t *testing.T, busy int) []string { return dev(t, "emu", busy) }, "(--emulator-addr / FOUNDRYQ_EMULATOR_ADDR)"},
		{"dev metrics", func(t *testing.T, busy int) []string { return dev(t, "ops", busy) }, "(--http-addr / FOUNDRYQ_HTTP_ADDR)"},
		{"dev gateway", func(t *testing.T, busy int) []string { return dev(t, "gw", busy) }, "(--gateway-addr / FOUNDRYQ_DEV_GATEWAY_ADDR)"},
		{"worker metrics", func(t *testing.T, busy int) []string {
			return []string{"worker", "--nats-url", "nats://" + addr(testkit.FreePorts(t, 1)[0]), "--foundry-endpoint", "http://127.0.0.1:1/openai/v1/",
				"--foundry-api-key", "k", "--http-addr", addr(busy)}
		}, "(--http-addr / FOUNDRYQ_HTTP_ADDR)"},
		{"gateway", func(t *testing.T, busy int) []string {
			return []string{"gateway", "--no-auth", "--nats-url", "nats://" + addr(testkit.FreePorts(t, 1)[0]), "--addr", addr(busy)}
		}, "(--addr / FOUNDRYQ_GATEWAY_ADDR)"},
		{"emulator", func(t *testing.T, busy int) []string { return []string{"emulator", "--addr", addr(busy)} }, "(--addr / FOUNDRYQ_EMULATOR_ADDR)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			busy := occupy(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			code, stdout, stderr := runCmd(t, ctx, c.args(t, busy)...)
			if ctx.Err() != nil {
				t.Fatalf("still running after %s: stderr %q", time.Since(start), stderr)
			}
			want := "port " + strconv.Itoa(busy) + " on 127.0.0.1 is in use " + c.setting
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			if code != exitError || len(lines) != 1 || !strings.Contains(stderr, want) || strings.Contains(stdout, "running") {
				t.Fatalf("exit %d, stdout %q, stderr %q\nwant exit 1 and one line with %q", code, stdout, stderr, want)
			}
		})
	}
}

// A listen failure other than a port in use names the address and the
// setting too; errors that are not listen failures pass unchanged.
func TestListenErrors(t *testing.T) {
	t.Parallel()
	s := setting{"addr", "X_ADDR"}
	// 192.0.2.0/24 (TEST-NET-1) is never an address of this machine.
	err := checkFree("192.0.2.1:0", s)
	if err == nil || !strings.HasPrefix(err.Error(), "cannot listen on 192.0.2.1:0 (--addr / X_ADDR): bind: ") {
		t.Fatalf("checkFree of an address not here: %v", err)
	}
	other := context.DeadlineExceeded
	if got := asListenError(other, "127.0.0.1:1", s); got != other {
		t.Fatalf("asListenError(%v) = %v, want it unchanged", other, got)
	}
	if got := asListenError(nil, "127.0.0.1:1", s); got != nil {
		t.Fatalf("asListenError(nil) = %v", got)
	}
}

// dev's hints reach this dev: --nats-url unless on the default URL, with
// the client user under --nats-config.
func TestDevHints(t *testing.T) {
	t.Parallel()
	if h := devHints(devClientURL("nats://127.0.0.1:4222", false)); strings.Contains(h, "--nats-url") || !strings.Contains(h, "go run ./cmd/foundryq watch slow1\n") {
		t.Fatalf("default port: %s", h)
	}
	h := devHints(devClientURL("nats://127.0.0.1:4333", false))
	for _, line := range strings.Split(h, "\n") {
		if strings.HasPrefix(line, "  go run") && !strings.Contains(line, " --nats-url nats://127.0.0.1:4333") {
			t.Errorf("hint without dev's URL: %q", line)
		}
	}
	if h := devHints(devClientURL("nats://127.0.0.1:4222", true)); !strings.Contains(h, "runs --nats-url nats://client:PASSWORD@127.0.0.1:4222\n") {
		t.Fatalf("with --nats-config: %s", h)
	}
}

// shellWords splits a hint line as a shell would: words, "quoted" words.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	quoted, inWord := false, false
	for _, r := range line {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
			}
			inWord = false
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}
