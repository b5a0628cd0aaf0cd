package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
)

// The worker against the emulator behaving as the Azure service does:
// defaults where the service does it by default, directives where it
// depends on load or on the account.

func agentRequest(runID, agent string, md map[string]string) events.RunRequest {
	return events.RunRequest{RunID: runID, Agent: &events.AgentRef{Name: agent}, Input: json.RawMessage(`"hello there"`), Metadata: md}
}

// publishRaw publishes a run request as a producer that bypasses the
// client's validation would.
func (e *env) publishRaw(req events.RunRequest) {
	e.t.Helper()
	data, err := json.Marshal(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.js.Publish(context.Background(), "foundryq.runs."+req.RunID, data); err != nil {
		e.t.Fatal(err)
	}
}

// An agent run that sets what an agent owns (tools, instructions, text or
// reasoning options) is refused before Foundry is called, as
// invalid_request, instead of being sent, refused and dead-lettered as
// upstream_error.
func TestAgentRunsRefuseAgentFields(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "agent"})
	for i, mutate := range []func(*events.RunRequest){
		func(r *events.RunRequest) { r.Instructions = "be brief" },
		func(r *events.RunRequest) {
			r.Tools = []json.RawMessage{json.RawMessage(`{"type":"mcp","server_label":"x","server_url":"https://x","require_approval":"never"}`)}
		},
		func(r *events.RunRequest) {
			r.Options = map[string]json.RawMessage{"reasoning": json.RawMessage(`{"effort":"low"}`)}
		},
	} {
		req := agentRequest(fmt.Sprintf("ag-%d", i), "support", nil)
		mutate(&req)
		if err := req.Validate(); !errors.Is(err, events.ErrAgentConflict) {
			t.Fatalf("%d: Validate = %v, want ErrAgentConflict", i, err)
		}
		e.publishRaw(req)
		last := checkWellFormed(t, e.collect(req.RunID, 10*time.Second))
		if last.Type != events.TypeRunFailed || last.Error.Code != events.CodeInvalidRequest {
			t.Fatalf("%d: run ended %s %+v", i, last.Type, last.Error)
		}
		if n := len(e.emu.CreateRequests(req.RunID)); n != 0 {
			t.Fatalf("%d: %d creates reached Foundry", i, n)
		}
	}
}

// A hosted agent ignores background: run.started says so, the run still
// completes on its stream, a cancel closes the stream (Foundry cannot cancel
// it, and GET never reports its end: unconfirmed), and a broken stream is
// not re-attached to for ever.
func TestHostedAgentRunsInTheForeground(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "hosted", ForegroundPollTimeout: time.Second})

	e.submit(agentRequest("ha-1", "hosted-helper", map[string]string{"emu_tokens": "10"}))
	evs := e.collect("ha-1", 10*time.Second)
	if last := checkWellFormed(t, evs); last.Type != events.TypeRunCompleted {
		t.Fatalf("run ended %s %+v", last.Type, last.Error)
	}
	if evs[0].Type != events.TypeRunStarted || evs[0].Background == nil || *evs[0].Background {
		t.Fatalf("run.started %+v, want background false", evs[0])
	}
	if got, want := text(evs), e.emulatorText("ha-1"); got != want {
		t.Fatal("text differs from the emulator's")
	}

	e.submit(agentRequest("ha-2", "hosted-helper", map[string]string{"emu_tokens": "400", "emu_token_ms": "20"}))
	e.waitEvent("ha-2", events.TypeTextDelta, 10*time.Second)
	e.cancel("ha-2")
	last := checkWellFormed(t, e.collect("ha-2", 15*time.Second))
	if last.Type != events.TypeRunCancelled || last.UpstreamStatus != events.UpstreamUnconfirmed {
		t.Fatalf("cancelled foreground run ended %s, upstream %q", last.Type, last.UpstreamStatus)
	}

	e.submit(agentRequest("ha-3", "hosted-helper", map[string]string{"emu_tokens": "400", "emu_token_ms": "20", "emu_drop_after": "5"}))
	last = checkWellFormed(t, e.collect("ha-3", 20*time.Second))
	if last.Type != events.TypeRunFailed || last.Error.Code != events.CodeStreamLost {
		t.Fatalf("broken foreground run ended %s %+v, want stream_lost", last.Type, last.Error)
	}
}

// Keepalives before a late response.created are read through; the run
// completes with every token.
func TestKeepalivesBeforeTheResponse(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "ka", CancelConfirmTimeout: 200 * time.Millisecond})
	e.submit(request("ka-1", map[string]string{"emu_created_ms": "1500", "emu_keepalive_ms": "100"}))
	evs := e.collect("ka-1", 15*time.Second)
	if last := checkWellFormed(t, evs); last.Type != events.TypeRunCompleted {
		t.Fatalf("run ended %s", last.Type)
	}
	if got, want := text(evs), e.emulatorText("ka-1"); got != want {
		t.Fatal("text differs from the emulator's")
	}
}

// Right after a streamed create Azure answers 404 for the response for a
// while: a cancel then is not "not found", it is retried until Foundry
// knows the response, and the response is cancelled.
func TestNotFoundRightAfterTheCreate(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.twoWorkers(consumer.Config{CancelConfirmTimeout: 10 * time.Second})
	e.submit(request("nf-1", map[string]string{"emu_get_404_ms": "2000", "emu_tokens": "400", "emu_token_ms": "20"}))
	e.waitEvent("nf-1", events.TypeRunStarted, 10*time.Second)
	e.cancel("nf-1")
	last := checkWellFormed(t, e.collect("nf-1", 20*time.Second))
	if last.Type != events.TypeRunCancelled || last.UpstreamStatus != "cancelled" {
		t.Fatalf("run ended %s, upstream %q; want cancelled/cancelled", last.Type, last.UpstreamStatus)
	}
	if recs := e.emu.Records("nf-1"); len(recs) != 1 || recs[0].Status != "cancelled" {
		t.Fatalf("emulator: %+v", recs)
	}
}

// An error event in a background stream does not say the response stopped:
// the worker asks Foundry and follows the response to its real end.
func TestErrorEventIsNotTheEnd(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "ee"})
	e.submit(request("ee-1", map[string]string{"emu_error_after": "6", "emu_tokens": "40", "emu_token_ms": "10"}))
	evs := e.collect("ee-1", 20*time.Second)
	if last := checkWellFormed(t, evs); last.Type != events.TypeRunCompleted {
		t.Fatalf("run ended %s %+v after an error event, want run.completed", last.Type, last.Error)
	}
	if got, want := text(evs), e.emulatorText("ee-1"); got != want {
		t.Fatalf("text after an error event:\n got %q\nwant %q", got, want)
	}

	e.submit(request("ee-2", map[string]string{"emu_error_after": "6", "emu_error_fail": "1", "emu_fail_code": "server_error"}))
	last := checkWellFormed(t, e.collect("ee-2", 20*time.Second))
	if last.Type != events.TypeRunFailed || last.Error.Code != "server_error" {
		t.Fatalf("run ended %s %+v, want Foundry's failure", last.Type, last.Error)
	}
}

// response.failed with a transient code is reported with retryable true
// (a new run is worth submitting); a permanent one with retryable false.
func TestFailureCodesSayWhetherToRetry(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "fcode"})
	for code, want := range map[string]bool{"rate_limit_exceeded": true, "server_error": true, "invalid_prompt": false} {
		id := "fcode-" + strings.ReplaceAll(code, "_", "-")
		e.submit(request(id, map[string]string{"emu_fail_after": "3", "emu_fail_code": code}))
		last := checkWellFormed(t, e.collect(id, 10*time.Second))
		if last.Type != events.TypeRunFailed || last.Error.Code != code || last.Error.Retryable == nil || *last.Error.Retryable != want {
			t.Fatalf("%s: run ended %s %+v, want retryable %v", code, last.Type, last.Error, want)
		}
		if n := e.responses(id); n != 1 {
			t.Fatalf("%s: %d responses", code, n)
		}
	}
}

// A 429 storm does not burn the runs' failure budgets: every run completes,
// none counts a failure, and the worker holds back its creates while the
// service asks it to wait instead of sending every one to be refused.
func TestRateLimitStormDrains(t *testing.T) {
	t.Parallel()
	e := setup(t, withProvision(consumer.ProvisionConfig{MaxDeliver: 2}))
	e.startWorker(consumer.Config{WorkerID: "storm", Concurrency: 16})
	if _, err := consumer.Provision(context.Background(), e.js, events.Names{}, e.prov); err != nil {
		t.Fatal(err)
	}
	e.emu.Throttle(3*time.Second, 500*time.Millisecond)
	const n = 40
	for i := range n {
		e.submit(request(fmt.Sprintf("storm-%d", i), map[string]string{"emu_tokens": "3"}))
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("storm-%d", i)
			evs, err := collectErr(e.client, id, 60*time.Second)
			if err != nil {
				errs <- err
				return
			}
			if last := evs[len(evs)-1]; last.Type != events.TypeRunCompleted {
				errs <- fmt.Errorf("%s ended %s %+v", id, last.Type, last.Error)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range n {
		if st := e.state(fmt.Sprintf("storm-%d", i)); st.Failures != 0 {
			t.Errorf("storm-%d: %d failures counted for 429s", i, st.Failures)
		}
	}
	// Without the limiter every run retries on its own every 500ms through
	// the 3s storm (some 240 refused creates); with it, only the first wave
	// and one probe per wait are refused.
	if got := e.emu.Stats().CreatesThrottled; got > n+16 {
		t.Errorf("%d creates refused with 429: the worker did not hold back", got)
	}
}

// failingCredential never yields a token.
type failingCredential struct{}

func (failingCredential) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{}, errors.New("AADSTS700016: application not found in the directory")
}

// A token that cannot be had is an auth error, said clearly, not a network
// error retried until the budget is spent.
func TestTokenFailureIsAnAuthError(t *testing.T) {
	t.Parallel()
	e := setup(t)
	up, err := foundry.New(foundry.Config{BaseURL: e.emu.BaseURL(), Credential: failingCredential{}, HTTPClient: &http.Client{}})
	if err != nil {
		t.Fatal(err)
	}
	e.up = up
	e.startWorker(consumer.Config{WorkerID: "auth", RetryDelay: 50 * time.Millisecond})
	e.submit(request("auth-1", nil))
	last := checkWellFormed(t, e.collect("auth-1", 10*time.Second))
	if last.Type != events.TypeRunFailed || last.Error.Code != events.CodeAuthError || !strings.Contains(last.Error.Message, "AADSTS700016") {
		t.Fatalf("run ended %s %+v, want auth_error with the credential's message", last.Type, last.Error)
	}
	if st := e.state("auth-1"); st.Attempt != 1 {
		t.Fatalf("the run took %d attempts, want 1", st.Attempt)
	}
}

// Foundry's error details (which field was wrong) reach the user.
func TestErrorDetailsReachTheUser(t *testing.T) {
	t.Parallel()
	e := setup(t)
	up, err := foundry.New(foundry.Config{BaseURL: e.emu.BaseURL(), APIKey: "test-key", AgentField: "agent", HTTPClient: &http.Client{}})
	if err != nil {
		t.Fatal(err)
	}
	e.up = up
	e.startWorker(consumer.Config{WorkerID: "det"})
	e.submit(agentRequest("det-1", "support", nil))
	last := checkWellFormed(t, e.collect("det-1", 10*time.Second))
	if last.Type != events.TypeRunFailed || last.Error.Code != events.CodeUpstreamError ||
		!strings.Contains(last.Error.Message, "agent_reference") || !strings.Contains(last.Error.Message, "agent") {
		t.Fatalf("run ended %s %+v, want the service's refusal naming the field", last.Type, last.Error)
	}
}
