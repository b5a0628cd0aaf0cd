package main

import (
	"context"
	"io"
	"net/http"
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
