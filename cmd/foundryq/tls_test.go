package main

import (
	"context"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
	"github.com/foundryq/foundryq/internal/tlstest"
)

// TestTLSFlags runs a worker and the client commands over mutual TLS
// against deploy/nats/nats-server-tls.conf, with certificates made here.
func TestTLSFlags(t *testing.T) {
	certs := tlstest.New(t)
	conf := certs.ServerConfig(t, filepath.Join("..", "..", "deploy", "nats"), "nats-server-tls.conf")
	t.Setenv("WORKER_PASSWORD", "workerpw4")
	t.Setenv("CLIENT_PASSWORD", "clientpw4")
	t.Setenv("GATEWAY_PASSWORD", "gatewaypw4")
	t.Setenv("TOOLS_PASSWORD", "toolspw4")
	t.Setenv("JETSTREAM_KEY", "jskey4")
	ns := natsembed.StartT(t, natsembed.Config{ConfigFile: conf})
	hostPort := strings.TrimPrefix(ns.ClientURL(), "tls://")
	emu := foundrytest.NewServer(foundrytest.Config{APIKey: "tls-emu-key", DefaultTokenDelay: time.Millisecond})
	t.Cleanup(emu.Close)
	tlsArgs := []string{"--nats-tls-ca", certs.CA, "--nats-tls-cert", certs.ClientCert, "--nats-tls-key", certs.ClientKey}

	opsAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	args := append([]string{"worker", "--nats-url", "tls://" + hostPort, "--nats-user", "worker", "--nats-password", "workerpw4",
		"--foundry-endpoint", emu.BaseURL(), "--foundry-api-key", "tls-emu-key", "--http-addr", opsAddr, "--log-level", "warn"}, tlsArgs...)
	_, werr := startCommand(t, args...)

	clientURL := "tls://client:clientpw4@" + hostPort
	cctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	// The worker provisions the bucket at start: runs succeeds from then on.
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, _, stderr := runCmd(t, cctx, append([]string{"runs", "--nats-url", clientURL}, tlsArgs...)...)
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs over TLS kept failing: %s (worker: %s)", stderr, werr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The worker's readiness check needs no right beyond the worker role's.
	testkit.WaitHTTP(t, time.Minute, "http://"+opsAddr+"/readyz", http.StatusOK, "ok")
	code, stdout, stderr := runCmd(t, cctx, append([]string{"submit", "--nats-url", clientURL, "--model", "m", "--input", "hi", "--run-id", "tls-1", "--watch"}, tlsArgs...)...)
	if code != 0 || !strings.Contains(stderr, "run completed") {
		t.Fatalf("submit --watch over TLS: %d\n%s\n%s", code, stdout, stderr)
	}

	for name, tc := range map[string]struct {
		args []string
		code int
	}{
		"no CA":                         {[]string{"--nats-tls-cert", certs.ClientCert, "--nats-tls-key", certs.ClientKey}, exitNATS},
		"no client certificate":         {[]string{"--nats-tls-ca", certs.CA}, exitNATS},
		"a certificate without its key": {[]string{"--nats-tls-ca", certs.CA, "--nats-tls-cert", certs.ClientCert}, 2},
	} {
		code, _, stderr := runCmd(t, cctx, append([]string{"runs", "--nats-url", clientURL}, tc.args...)...)
		if code != tc.code || strings.Contains(stderr, "clientpw4") {
			t.Errorf("%s: exit %d (want %d): %s", name, code, tc.code, stderr)
		}
	}
}
