package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/testkit"
	"github.com/foundryq/foundryq/internal/tlstest"
)

// TestEmulatorFlags: the emulator's settings for issue 8 reach its Config.
func TestEmulatorFlags(t *testing.T) {
	t.Parallel()
	f := newFlags("emulator", "emulator [flags]")
	ef := addEmulatorFlags(f, 0)
	if err := f.parse([]string{"--emulator-accept-agent-field", "--emulator-keepalive", "250ms"}, nil); err != nil {
		t.Fatal(err)
	}
	cfg := ef.config(zerolog.Nop())
	if !cfg.AcceptDeprecatedAgentField || cfg.KeepaliveInterval != 250*time.Millisecond {
		t.Fatalf("config = %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	def := addEmulatorFlags(newFlags("emulator", ""), 0).config(zerolog.Nop())
	if def.AcceptDeprecatedAgentField || def.KeepaliveInterval != 30*time.Second {
		t.Fatalf("defaults = %+v", def)
	}
}

// TestEmulatorTLS: with --tls-cert and --tls-key the emulator serves HTTPS
// and a client that trusts the CA gets HTTP/2 (ALPN) and a whole stream;
// --plain-addr serves the same emulator over plain HTTP/1.1. The two
// settings go together.
func TestEmulatorTLS(t *testing.T) {
	certs := tlstest.New(t)
	ports := testkit.FreePorts(t, 2)
	addr, plainAddr := "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1])
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var out, errOut testkit.Buffer
	go func() {
		done <- run(ctx, []string{"emulator", "--addr", addr, "--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey,
			"--plain-addr", plainAddr, "--emulator-api-key", "k", "--log-level", "error"}, &out, &errOut)
	}()
	defer func() {
		stop()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("emulator exited %d: %s", code, errOut.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("emulator did not stop")
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "over plain HTTP") {
		if time.Now().After(deadline) {
			t.Fatalf("emulator not serving: %q %q", out.String(), errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if want := "serving https://" + addr + "/openai/v1/"; !strings.Contains(out.String(), want) {
		t.Fatalf("output %q, want %q", out.String(), want)
	}
	pem, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	stream := func(base string) (proto string, events int) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/openai/v1/responses",
			strings.NewReader(`{"model":"m","input":"hi","stream":true,"metadata":{"emu_tokens":"5"}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Api-Key", "k")
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "response.completed") {
			t.Fatalf("%s: %d, %v: %s", base, resp.StatusCode, err, body)
		}
		return resp.Proto, strings.Count(string(body), "event: response.output_text.delta")
	}
	if proto, n := stream("https://" + addr); proto != "HTTP/2.0" || n != 5 {
		t.Fatalf("over HTTPS: %s, %d deltas; want HTTP/2.0, 5", proto, n)
	}
	if proto, n := stream("http://" + plainAddr); proto != "HTTP/1.1" || n != 5 {
		t.Fatalf("over plain HTTP: %s, %d deltas; want HTTP/1.1, 5", proto, n)
	}
	// One emulator behind both: its stats count both requests.
	var st foundrytest.Stats
	if err := json.Unmarshal([]byte(testkit.WaitHTTP(t, time.Minute, "http://"+plainAddr+"/_emulator/stats", 200, "requests_http2")), &st); err != nil {
		t.Fatal(err)
	}
	if st.ResponsesCreated != 2 || st.RequestsHTTP2 != 1 || st.RequestsHTTP1 != 1 {
		t.Fatalf("stats: %d created, %d over HTTP/2, %d over HTTP/1", st.ResponsesCreated, st.RequestsHTTP2, st.RequestsHTTP1)
	}

	for name, tc := range map[string]struct {
		args []string
		env  string
		want string
	}{
		"a certificate without its key":       {[]string{"--tls-cert", certs.ServerCert}, "", "go together"},
		"a key without its certificate":       {nil, certs.ServerKey, "go together"},
		"a key that is not the certificate's": {[]string{"--tls-cert", certs.ServerCert, "--tls-key", certs.ClientKey}, "", "load TLS certificate"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("FOUNDRYQ_EMULATOR_TLS_KEY", tc.env)
			args := append([]string{"emulator", "--addr", "127.0.0.1:0"}, tc.args...)
			code, _, stderr := runCmd(t, context.Background(), args...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
		})
	}
}
