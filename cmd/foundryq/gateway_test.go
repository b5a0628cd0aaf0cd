package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/gateway"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

// checkGatewayServes wants the console at base and a run accepted at
// POST /v1/runs (with token, if not empty).
func checkGatewayServes(t *testing.T, base, token string) {
	t.Helper()
	hc := &http.Client{Timeout: 20 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "foundryq console") {
		t.Fatalf("GET %s: %d", base, resp.StatusCode)
	}
	req, _ := http.NewRequest("POST", base+"v1/runs", strings.NewReader(`{"model":"gpt-4o","input":"hi"}`))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /v1/runs: %d %s", resp.StatusCode, body)
	}
}

func TestGatewayCommand(t *testing.T) {
	ns, nc := natsembed.RunTestTCP(t)
	js := mustJetStream(t, nc)
	if _, err := consumer.Provision(context.Background(), js, events.Names{}, consumer.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCmd(t, context.Background(), "gateway", "--nats-url", ns.ClientURL()); code != 2 || !strings.Contains(stderr, "--tokens") {
		t.Fatalf("gateway without tokens: code %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCmd(t, context.Background(), "gateway", "--tokens", "secret-token"); code != 2 || !strings.Contains(stderr, "never the token itself") {
		t.Fatalf("gateway with a raw token: code %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCmd(t, context.Background(), "gateway", "--no-auth", "--addr", "0.0.0.0:0"); code != 2 || !strings.Contains(stderr, "open the API") {
		t.Fatalf("gateway --no-auth on all interfaces: code %d, stderr %q", code, stderr)
	}
	const token = "cmd-test-token"
	port := freePort(t)
	t.Setenv("FOUNDRYQ_GATEWAY_TOKENS", gateway.HashToken(token))
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var out testkit.Buffer
	go func() {
		done <- run(ctx, []string{"gateway", "--nats-url", ns.ClientURL(), "--addr", "127.0.0.1:" + strconv.Itoa(port),
			"--callbacks-secret", "0123456789abcdef0123"}, &out, &out)
	}()
	defer func() {
		stop()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("gateway exited %d: %s", code, out.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("gateway did not stop")
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "gateway listening") {
		if time.Now().After(deadline) {
			t.Fatalf("gateway did not start: %s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	checkGatewayServes(t, "http://127.0.0.1:"+strconv.Itoa(port)+"/", token)
	if strings.Contains(out.String(), token) {
		t.Fatal("the token appears in the logs")
	}
}

func mustJetStream(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// The gateway's secret settings are scrubbed like the others: --help
// shows no value, --print-config redacts it, and stderr scrubbing knows
// it (flag and environment).
func TestGatewaySecretsScrubbed(t *testing.T) {
	const secret = "cbSecretValue-7781-abcdef"
	code, stdout, stderr := runCmd(t, context.Background(), "gateway", "--tokens", gateway.HashToken("t"),
		"--callbacks-secret", secret, "--rate-limit", "5", "--callbacks-allow-cidr", "10.20.0.0/16", "--print-config")
	if code != 0 {
		t.Fatalf("--print-config: %d %s", code, stderr)
	}
	if strings.Contains(stdout+stderr, secret) {
		t.Fatalf("--print-config shows the callback secret:\n%s", stdout)
	}
	if !regexpMatch(t, `--callbacks-secret\s+FOUNDRYQ_GATEWAY_CALLBACKS_SECRET\s+\[redacted\]\s+flag`, stdout) ||
		!regexpMatch(t, `--rate-limit\s+FOUNDRYQ_GATEWAY_RATE_LIMIT\s+5\s+flag`, stdout) {
		t.Fatalf("--print-config:\n%s", stdout)
	}
	got := knownSecrets([]string{"gateway", "--callbacks-secret=" + secret}, func(k string) (string, bool) {
		return "env-" + secret, k == "FOUNDRYQ_GATEWAY_CALLBACKS_SECRET"
	})
	if !slices.Contains(got, secret) || !slices.Contains(got, "env-"+secret) {
		t.Fatalf("knownSecrets = %v", got)
	}
	t.Setenv("FOUNDRYQ_GATEWAY_CALLBACKS_SECRET", secret)
	code, stdout, _ = runCmd(t, context.Background(), "gateway", "--help")
	if code != 0 || strings.Contains(stdout, secret) || !strings.Contains(stdout, "env FOUNDRYQ_GATEWAY_CALLBACKS_SECRET (a secret") {
		t.Fatalf("--help: %d\n%s", code, stdout)
	}
}

// Bad values of the new settings are usage errors that name them.
func TestGatewayFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--rate-limit", "0"}, "--rate-limit"},
		{[]string{"--rate-limit", "fast"}, "--rate-limit"},
		{[]string{"--callbacks-allow-cidr", "10.0.0.1"}, "--callbacks-allow-cidr"},
		{[]string{"--no-auth", "--no-auth-any-addr", "--addr", "0.0.0.0:0"}, "AllowedHosts"},
		{[]string{"--max-streams-per-token", "-1"}, "MaxStreamsPerToken"},
		{[]string{"--callbacks-key-files", "/nonexistent/key"}, "callback_secret_files[0]"},
	} {
		args := append([]string{"gateway", "--tokens", gateway.HashToken("t"), "--print-config"}, c.args...)
		if c.args[0] == "--no-auth" {
			args = append([]string{"gateway", "--print-config"}, c.args...)
		}
		code, _, stderr := runCmd(t, context.Background(), args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: code %d, stderr %q", c.args, code, stderr)
		}
	}
}

func regexpMatch(t *testing.T, re, s string) bool {
	t.Helper()
	return regexp.MustCompile(re).MatchString(s)
}
