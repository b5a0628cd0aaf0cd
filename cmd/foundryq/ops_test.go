package main

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

// A worker's /readyz: 200 once it has provisioned and pulls, 503 with a
// one-line reason while NATS is down (/healthz too), 200 again after.
func TestWorkerReadyz(t *testing.T) {
	ns := natsembed.StartT(t, natsembed.Config{StoreDir: t.TempDir()})
	emu := foundrytest.NewServer(foundrytest.Config{APIKey: "k"})
	t.Cleanup(emu.Close)
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))

	startCommand(t, "worker", "--nats-url", ns.ClientURL(), "--foundry-endpoint", emu.BaseURL(), "--foundry-api-key", "k",
		"--http-addr", addr, "--log-level", "error")

	testkit.WaitHTTP(t, time.Minute, "http://"+addr+"/readyz", http.StatusOK, "ok")
	ns.Stop()
	body := testkit.WaitHTTP(t, time.Minute, "http://"+addr+"/readyz", http.StatusServiceUnavailable, "not ready: nats: ")
	if strings.Count(strings.TrimSpace(body), "\n") != 0 {
		t.Errorf("/readyz reason is not one line: %q", body)
	}
	testkit.WaitHTTP(t, time.Minute, "http://"+addr+"/healthz", http.StatusServiceUnavailable, "nats: ")
	if err := ns.Restart(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitHTTP(t, time.Minute, "http://"+addr+"/readyz", http.StatusOK, "ok")
}
