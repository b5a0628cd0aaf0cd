package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/foundry/conformance"
)

// foundryq conformance: the emulator alone prints every case's row and
// exits 0; an endpoint that answers nothing the service would makes it
// exit 1 and ask for the table; a missing model is a usage error.
func TestConformanceCommand(t *testing.T) {
	t.Setenv(conformance.EnvEndpoint, "")
	t.Setenv(conformance.EnvModel, "")
	t.Setenv(conformance.EnvAPIKey, "")
	t.Setenv(conformance.EnvAgent, "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	code, stdout, stderr := runCmd(t, ctx, "conformance")
	if code != exitOK {
		t.Fatalf("emulator only: code %d, stderr %q", code, stderr)
	}
	if !strings.HasPrefix(stdout, "| behaviour | emulator | endpoint | same/different |\n") ||
		strings.Count(stdout, "\n") != len(conformance.Cases)+2 ||
		!strings.Contains(stdout, "| cancel: a completed response | 400 invalid_request_error \"Cannot cancel a completed response\" | not run | no endpoint |") {
		t.Errorf("table:\n%s", stdout)
	}
	if !strings.Contains(stderr, conformance.EnvEndpoint) {
		t.Errorf("stderr does not say how to add an endpoint: %q", stderr)
	}

	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "upstream gone", http.StatusBadGateway)
	}))
	defer broken.Close()
	t.Setenv(conformance.EnvAPIKey, "k")
	code, stdout, stderr = runCmd(t, ctx, "conformance", "--endpoint", broken.URL+"/openai/v1", "--model", "m", "--agent", "helper")
	if code != exitError || !strings.Contains(stderr, "please report the table") {
		t.Errorf("broken endpoint: code %d, stderr %q", code, stderr)
	}
	// --agent: the agent run case runs on the endpoint too.
	if !strings.Contains(stdout, "| agent run with instructions | 400 invalid_request_error code=invalid_payload param=instructions \"Not allowed when agent is specified\" | 502 (not an error object) | DIFFERENT |") {
		t.Errorf("broken endpoint table, agent run row:\n%s", stdout)
	}
	if !strings.Contains(stdout, "| unknown response id | GET 404 invalid_request_error; cancel 404 invalid_request_error | GET 502 (not an error object); cancel 502 (not an error object) | DIFFERENT |") {
		t.Errorf("broken endpoint table:\n%s", stdout)
	}

	if code, _, stderr := runCmd(t, ctx, "conformance", "--endpoint", broken.URL+"/openai/v1"); code != exitUsage || !strings.Contains(stderr, conformance.EnvModel) {
		t.Errorf("no model: code %d, stderr %q", code, stderr)
	}
}
