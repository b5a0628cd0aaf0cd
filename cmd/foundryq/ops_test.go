package main

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

// get returns the status and body of url, or 0 if it cannot be fetched.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitHTTP polls url until its status is code and its body contains want.
func waitHTTP(t *testing.T, url string, code int, want string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, body := get(t, url)
		if got == code && strings.Contains(body, want) {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %q, want %d with %q", url, got, body, code, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A worker's /readyz: 200 once it has provisioned and pulls, 503 with a
// one-line reason while NATS is down (/healthz too), 200 again after.
func TestWorkerReadyz(t *testing.T) {
	ns, err := natsembed.Start(natsembed.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	emu := foundrytest.NewServer(foundrytest.Config{APIKey: "k"})
	defer emu.Close()
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var wout, werr testkit.Buffer
	go func() {
		done <- run(ctx, []string{"worker", "--nats-url", ns.ClientURL(), "--foundry-endpoint", emu.BaseURL(), "--foundry-api-key", "k",
			"--http-addr", addr, "--log-level", "error"}, &wout, &werr)
	}()
	defer func() {
		stop()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("worker exited %d: %s", code, werr.String())
			}
		case <-time.After(60 * time.Second):
			t.Error("worker did not stop")
		}
	}()

	waitHTTP(t, "http://"+addr+"/readyz", http.StatusOK, "ok")
	ns.Stop()
	body := waitHTTP(t, "http://"+addr+"/readyz", http.StatusServiceUnavailable, "not ready: nats: ")
	if strings.Count(strings.TrimSpace(body), "\n") != 0 {
		t.Errorf("/readyz reason is not one line: %q", body)
	}
	waitHTTP(t, "http://"+addr+"/healthz", http.StatusServiceUnavailable, "nats: ")
	if err := ns.Restart(); err != nil {
		t.Fatal(err)
	}
	waitHTTP(t, "http://"+addr+"/readyz", http.StatusOK, "ok")
}
