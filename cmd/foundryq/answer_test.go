package main

import (
	"context"
	"encoding/json"
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
