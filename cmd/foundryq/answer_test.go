package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

// A run that asks, answered from the command line: watch shows what it
// asks and how to answer, approve answers, the run completes; a second
// answer is told the first stands, an unknown run id says so.
func TestApproveWithTheCLI(t *testing.T) {
	s := devstack.StartT(t, devstack.Config{Workers: 1, NATS: natsembed.Config{Host: "127.0.0.1", StoreDir: t.TempDir()}})
	natsURL := s.NATS.ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tool := `{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp","allowed_tools":["lookup"]}`
	if code, _, stderr := runCmd(t, ctx, "submit", "--nats-url", natsURL, "--model", "gpt-4o", "--input", "hi", "--run-id", "cli-ask",
		"--tool", tool, "--metadata", "emu_tool_ms=10"); code != exitOK {
		t.Fatalf("submit: %d %s", code, stderr)
	}
	var asked events.InputItem
	testkit.Eventually(t, 30*time.Second, "the run to wait for an answer", func() bool {
		_, stdout, _ := runCmd(t, ctx, "runs", "--nats-url", natsURL, "--json", "cli-ask")
		var out struct{ State events.RunState }
		if json.Unmarshal([]byte(stdout), &out) != nil || out.State.Status != events.StatusWaiting || len(out.State.Asked) != 1 {
			return false
		}
		asked = out.State.Asked[0]
		return true
	})
	code, stdout, _ := runCmd(t, ctx, "approve", "--nats-url", natsURL, "cli-ask", asked.ID)
	if code != exitOK || !strings.Contains(stdout, "accepted") {
		t.Fatalf("approve: %d %q", code, stdout)
	}
	code, _, stderr := runCmd(t, ctx, "watch", "--nats-url", natsURL, "cli-ask")
	if code != exitOK || !strings.Contains(stderr, "waits for approval of lookup on MCP server crm") ||
		!strings.Contains(stderr, "answer: foundryq approve cli-ask "+asked.ID) || !strings.Contains(stderr, "[step 2 started") {
		t.Fatalf("watch: %d %q", code, stderr)
	}
	if code, stdout, _ := runCmd(t, ctx, "approve", "--nats-url", natsURL, "--deny", "cli-ask", asked.ID); code != exitFailed || !strings.Contains(stdout, "has ended") {
		t.Fatalf("approve after the end: %d %q", code, stdout)
	}
	if code, _, stderr := runCmd(t, ctx, "output", "--nats-url", natsURL, "cli-ask", "call_1"); code != exitUsage || !strings.Contains(stderr, "--output is required") {
		t.Fatalf("output without --output: %d %q", code, stderr)
	}
	if code, _, stderr := runCmd(t, ctx, "approve", "--nats-url", natsURL, "cli-ask"); code != exitUsage || !strings.Contains(stderr, "RUN_ID and the ID") {
		t.Fatalf("approve without an id: %d %q", code, stderr)
	}
	if code, stdout, _ := runCmd(t, ctx, "approve", "--nats-url", natsURL, "no-such-run", "mcpr_1"); code != exitNotFound || !strings.Contains(stdout, "no such run") {
		t.Fatalf("approve of an unknown run: %d %q", code, stdout)
	}
}

// foundryq output answers function calls of a live waiting run, with the
// output inline (--output JSON) and from a file (--output @FILE); foundryq
// approve --deny --reason denies an approval of another: each answer
// reaches Foundry in the next step's create, and both runs complete.
func TestOutputAndDenyWithTheCLI(t *testing.T) {
	s := devstack.StartT(t, devstack.Config{Workers: 1, NATS: natsembed.Config{Host: "127.0.0.1", StoreDir: t.TempDir()}})
	natsURL := s.NATS.ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	fn := `{"type":"function","name":"get_weather"}`
	mcp := `{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp","allowed_tools":["lookup"]}`
	for _, sub := range [][]string{
		{"--run-id", "cli-output", "--tool", fn, "--metadata", "emu_tool_ms=5", "--metadata", "emu_function_calls=2"},
		{"--run-id", "cli-deny", "--tool", mcp, "--metadata", "emu_tool_ms=5"},
	} {
		args := append([]string{"submit", "--nats-url", natsURL, "--model", "gpt-4o", "--input", "hi"}, sub...)
		if code, _, stderr := runCmd(t, ctx, args...); code != exitOK {
			t.Fatalf("submit %v: %d %s", sub, code, stderr)
		}
	}
	waitAsked := func(runID string, n int) []events.InputItem {
		t.Helper()
		var asked []events.InputItem
		testkit.Eventually(t, 30*time.Second, "run "+runID+" to wait for answers", func() bool {
			_, stdout, _ := runCmd(t, ctx, "runs", "--nats-url", natsURL, "--json", runID)
			var out struct{ State events.RunState }
			if json.Unmarshal([]byte(stdout), &out) != nil || out.State.Status != events.StatusWaiting || len(out.State.Asked) != n {
				return false
			}
			asked = out.State.Asked
			return true
		})
		return asked
	}

	calls := waitAsked("cli-output", 2)
	file := filepath.Join(t.TempDir(), "weather.json")
	if err := os.WriteFile(file, []byte(`{"temp":17,"unit":"C"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, output := range []string{`{"temp":21}`, "@" + file} {
		code, stdout, stderr := runCmd(t, ctx, "output", "--nats-url", natsURL, "cli-output", calls[i].ID, "--output", output)
		if code != exitOK || !strings.Contains(stdout, "answer to "+calls[i].ID+" accepted") {
			t.Fatalf("output %s: %d %q %q", output, code, stdout, stderr)
		}
	}
	// The run may have ended already: then it says so.
	if code, stdout, _ := runCmd(t, ctx, "output", "--nats-url", natsURL, "cli-output", calls[0].ID, "--output", `{"temp":99}`); !(code == exitOK &&
		strings.Contains(stdout, "the first answer stands")) && !(code == exitFailed && strings.Contains(stdout, "has ended")) {
		t.Fatalf("a second output: %d %q", code, stdout)
	}

	approval := waitAsked("cli-deny", 1)[0]
	code, stdout, stderr := runCmd(t, ctx, "approve", "--nats-url", natsURL, "--deny", "--reason", "not on a Friday", "cli-deny", approval.ID)
	if code != exitOK || !strings.Contains(stdout, "accepted") {
		t.Fatalf("approve --deny --reason: %d %q %q", code, stdout, stderr)
	}

	for _, id := range []string{"cli-output", "cli-deny"} {
		if code, _, stderr := runCmd(t, ctx, "watch", "--nats-url", natsURL, id); code != exitOK {
			t.Fatalf("watch %s: %d %q", id, code, stderr)
		}
	}
	var outputs struct {
		Input []struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
			Output string `json:"output"`
		} `json:"input"`
	}
	creates := s.Emulator.CreateRequests("cli-output")
	if len(creates) != 2 || json.Unmarshal(creates[1], &outputs) != nil || len(outputs.Input) != 2 ||
		outputs.Input[0].CallID != calls[0].ID || outputs.Input[0].Output != `{"temp":21}` ||
		outputs.Input[1].CallID != calls[1].ID || outputs.Input[1].Output != `{"temp":17,"unit":"C"}` {
		t.Fatalf("%d creates; the second's input: %+v", len(creates), outputs.Input)
	}
	var denial struct {
		Input []struct {
			Type              string `json:"type"`
			ApprovalRequestID string `json:"approval_request_id"`
			Approve           *bool  `json:"approve"`
			Reason            string `json:"reason"`
		} `json:"input"`
	}
	creates = s.Emulator.CreateRequests("cli-deny")
	if len(creates) != 2 || json.Unmarshal(creates[1], &denial) != nil || len(denial.Input) != 1 ||
		denial.Input[0].Type != "mcp_approval_response" || denial.Input[0].ApprovalRequestID != approval.ID ||
		denial.Input[0].Approve == nil || *denial.Input[0].Approve || denial.Input[0].Reason != "not on a Friday" {
		t.Fatalf("%d creates; the second's input: %+v", len(creates), denial.Input)
	}
}
