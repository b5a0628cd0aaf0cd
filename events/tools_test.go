package events_test

import (
	"strings"
	"testing"

	"github.com/foundryq/foundryq/events"
)

func TestToolNames(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		prefix                       string
		tool, cancel, cancelWildcard string
	}{
		{"", "foundryq.tools.get_weather", "foundryq.tools.cancel.r1", "foundryq.tools.cancel.*"},
		{"acme.fq", "acme.fq.tools.get_weather", "acme.fq.tools.cancel.r1", "acme.fq.tools.cancel.*"},
	} {
		n := events.Names{Prefix: tt.prefix}
		if got := n.ToolSubject("get_weather"); got != tt.tool {
			t.Errorf("prefix %q: ToolSubject = %q, want %q", tt.prefix, got, tt.tool)
		}
		if got := n.ToolCancelSubject("r1"); got != tt.cancel {
			t.Errorf("prefix %q: ToolCancelSubject = %q, want %q", tt.prefix, got, tt.cancel)
		}
		if got := n.ToolCancelWildcard(); got != tt.cancelWildcard {
			t.Errorf("prefix %q: ToolCancelWildcard = %q, want %q", tt.prefix, got, tt.cancelWildcard)
		}
	}
	// A tool named "cancel" has an endpoint of its own, one token shorter
	// than any cancel message's subject.
	if got := (events.Names{}).ToolSubject("cancel"); got != "foundryq.tools.cancel" {
		t.Errorf("ToolSubject(cancel) = %q", got)
	}
}

func TestRunIDFromToolCancelSubject(t *testing.T) {
	t.Parallel()
	n := events.Names{}
	for _, tt := range []struct {
		subject string
		id      string
		ok      bool
	}{
		{"foundryq.tools.cancel.r1", "r1", true},
		{"foundryq.tools.cancel.run_ABC-9", "run_ABC-9", true},
		{"foundryq.tools.cancel", "", false},
		{"foundryq.tools.cancel.", "", false},
		{"foundryq.tools.cancel.a.b", "", false},
		{"foundryq.tools.cancel." + strings.Repeat("a", 65), "", false},
		{"foundryq.tools.get_weather", "", false},
		{"foundryq.cancel.r1", "", false},
		{"acme.tools.cancel.r1", "", false},
	} {
		id, ok := n.RunIDFromToolCancelSubject(tt.subject)
		if id != tt.id || ok != tt.ok {
			t.Errorf("RunIDFromToolCancelSubject(%q) = %q, %v; want %q, %v", tt.subject, id, ok, tt.id, tt.ok)
		}
	}
}

func TestValidToolName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"a", "get_weather", "Get-Weather_2", "cancel", strings.Repeat("x", 64)} {
		if !events.ValidToolName(name) {
			t.Errorf("ValidToolName(%q) = false", name)
		}
	}
	for _, name := range []string{"", strings.Repeat("x", 65), "a.b", "a b", "a*", "a>", "é", "a/b", "a:b"} {
		if events.ValidToolName(name) {
			t.Errorf("ValidToolName(%q) = true", name)
		}
	}
}

// TestToolHeaderNames pins the header names and the status value: they are
// wire contract, shared by the worker and the tool services.
func TestToolHeaderNames(t *testing.T) {
	t.Parallel()
	got := []string{
		events.HeaderToolRunID, events.HeaderToolCallID, events.HeaderToolName, events.HeaderToolDeadline,
		events.HeaderToolStatus, events.HeaderToolInstance, events.ToolStatusWorking, events.ToolStatusDone,
	}
	want := []string{
		"Foundryq-Run-Id", "Foundryq-Call-Id", "Foundryq-Tool", "Foundryq-Deadline",
		"Foundryq-Tool-Status", "Foundryq-Tool-Instance", "working", "done",
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("name %d = %q, want %q", i, got[i], want[i])
		}
	}
}
