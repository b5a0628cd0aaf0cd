package conformance

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The agent case runs on a real endpoint only with an agent named
// (FOUNDRYQ_CONFORMANCE_AGENT); the emulator names its own.
func TestAgentCaseNeedsAnAgent(t *testing.T) {
	t.Setenv(EnvEndpoint, "https://res.services.ai.azure.com/api/projects/p/openai/v1/")
	t.Setenv(EnvModel, "m")
	t.Setenv(EnvAPIKey, "k")
	t.Setenv(EnvAgent, "")
	ep, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := caseAgentInstructions.Applies(ep); ok || !strings.Contains(why, EnvAgent) {
		t.Errorf("without an agent: runs %t (%s), want not run, naming %s", ok, why, EnvAgent)
	}
	if ok, _ := caseRetrieve.Applies(ep); !ok {
		t.Error("a case that needs no agent is not run without one")
	}
	t.Setenv(EnvAgent, " helper ")
	if ep, err = FromEnv(); err != nil {
		t.Fatal(err)
	}
	if ok, why := caseAgentInstructions.Applies(ep); !ok || ep.agent != "helper" {
		t.Errorf("with agent %q: runs %t (%s)", ep.agent, ok, why)
	}
	emu := startEmulator(t)
	if ok, why := caseAgentInstructions.Applies(emu.Endpoint); !ok {
		t.Errorf("not run on the emulator: %s", why)
	}
}

// The emulator's side of the 404 window is really one: with
// emu_get_404_ms the GET right after the stream answers 404 (an error
// object) at least once before the 200.
func TestNotFoundWindowOnTheEmulator(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t)
	obs, notFound, err := emu.getAfterStream(ctxT(t))
	if err != nil || obs != caseNotFoundWindow.Want || notFound == 0 {
		t.Fatalf("observed %q after %d 404s (%v), want %q after at least one", obs, notFound, err, caseNotFoundWindow.Want)
	}
}

// Services that get these two cases nearly right fail them: a 404 window
// that never closes, a 404 that is not an error object, a GET answering
// something else; an agent run refused for another field, with another
// code or message, or for an unknown agent. The same stub answering as
// the service does passes them.
func TestAgentAndWindowCasesCatchNearMisses(t *testing.T) {
	t.Parallel()
	stream := "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0," +
		"\"response\":{\"id\":\"resp_near\",\"status\":\"queued\",\"background\":true}}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":1," +
		"\"response\":{\"id\":\"resp_near\",\"status\":\"completed\",\"background\":true,\"output\":[]}}\n\n"
	errorObject := func(code, param, message string) string {
		return fmt.Sprintf(`{"error":{"message":%q,"type":"invalid_request_error","param":%q,"code":%q,"details":[]}}`, message, param, code)
	}
	notFound := errorObject("", "", "Response with id 'resp_near' not found.")
	for _, tt := range []struct {
		name string
		c    Case
		// get answers the n-th GET (from 1); create a create.
		get    func(n int64) (int, string)
		create func() (int, string)
		right  bool
	}{
		{name: "right: 404 twice, then 200", c: caseNotFoundWindow, right: true, get: func(n int64) (int, string) {
			if n <= 2 {
				return 404, notFound
			}
			return 200, `{"id":"resp_near","object":"response","status":"completed"}`
		}},
		{name: "right: agent refused", c: caseAgentInstructions, right: true, create: func() (int, string) {
			return 400, errorObject("invalid_payload", "instructions", "Not allowed when agent is specified.")
		}},
		{name: "404 for ever", c: caseNotFoundWindow, get: func(int64) (int, string) { return 404, notFound }},
		{name: "404 without a body", c: caseNotFoundWindow, get: func(n int64) (int, string) {
			if n == 1 {
				return 404, ""
			}
			return 200, `{"id":"resp_near","object":"response","status":"completed"}`
		}},
		{name: "404 of a gateway", c: caseNotFoundWindow, get: func(n int64) (int, string) {
			if n == 1 {
				return 404, `{"statusCode":404,"message":"Resource not found"}`
			}
			return 200, `{"id":"resp_near","object":"response","status":"completed"}`
		}},
		{name: "GET 500", c: caseNotFoundWindow, get: func(int64) (int, string) { return 500, errorObject("server_error", "", "Oops.") }},
		{name: "agent: another field", c: caseAgentInstructions, create: func() (int, string) {
			return 400, errorObject("invalid_payload", "model", "Not allowed when agent is specified.")
		}},
		{name: "agent: another code", c: caseAgentInstructions, create: func() (int, string) {
			return 400, errorObject("invalid_value", "instructions", "Not allowed when agent is specified.")
		}},
		{name: "agent: another message", c: caseAgentInstructions, create: func() (int, string) {
			return 400, errorObject("invalid_payload", "instructions", "Invalid payload")
		}},
		{name: "agent: not found", c: caseAgentInstructions, create: func() (int, string) {
			return 404, errorObject("not_found", "agent_reference", "Agent 'a' not found.")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var gets atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				switch {
				case req.Method == http.MethodPost && tt.create != nil:
					status, body := tt.create()
					w.WriteHeader(status)
					fmt.Fprint(w, body)
				case req.Method == http.MethodPost:
					w.Header().Set("Content-Type", "text/event-stream")
					fmt.Fprint(w, stream)
				default:
					status, body := tt.get(gets.Add(1))
					w.WriteHeader(status)
					fmt.Fprint(w, body)
				}
			}))
			t.Cleanup(srv.Close)
			e, err := New(Config{BaseURL: srv.URL + "/openai/v1", Model: "m", Agent: "a", APIKey: "k"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(e.hc.CloseIdleConnections)
			e.notFoundGrace = 3 * time.Second
			r := RunCase(ctxT(t), e, tt.c)
			t.Logf("%s: %s %v", tt.c.Name, r.Observed, r.Err)
			switch {
			case r.NotRun != "" || r.Err != nil:
				t.Errorf("%s: %+v", tt.c.Name, r)
			case tt.right && r.Observed != tt.c.Want:
				t.Errorf("%s: %q, want %q", tt.c.Name, r.Observed, tt.c.Want)
			case !tt.right && r.Observed == tt.c.Want:
				t.Errorf("%s: the near miss passes (%q)", tt.c.Name, r.Observed)
			}
		})
	}
}
