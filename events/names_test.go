package events_test

import (
	"strings"
	"testing"

	"github.com/foundryq/foundryq/events"
)

func TestNames(t *testing.T) {
	t.Parallel()
	n, err := events.NewNames("")
	if err != nil {
		t.Fatal(err)
	}
	got := []string{
		n.RunSubject("r1"), n.EventSubject("r1"), n.CancelSubject("r1"), n.WatchSubject("r1"), n.DeadSubject("r1"),
		n.RunsStream(), n.EventsStream(), n.DeadStream(), n.Bucket(), n.Consumer(),
		n.RunsWildcard(), n.EventsWildcard(),
	}
	want := []string{
		"foundryq.runs.r1", "foundryq.events.r1", "foundryq.cancel.r1", "foundryq.watch.r1", "foundryq.dead.r1",
		"FOUNDRYQ_RUNS", "FOUNDRYQ_EVENTS", "FOUNDRYQ_DEAD", "foundryq-runs", "foundryq-workers",
		"foundryq.runs.*", "foundryq.events.*",
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("name %d = %q, want %q", i, got[i], want[i])
		}
	}
	if (events.Names{}).RunSubject("x") != "foundryq.runs.x" {
		t.Error("zero Names does not use the default prefix")
	}

	m, err := events.NewNames("acme.fq")
	if err != nil {
		t.Fatal(err)
	}
	if m.RunsStream() != "ACME_FQ_RUNS" || m.Bucket() != "acme_fq-runs" || m.EventSubject("a") != "acme.fq.events.a" {
		t.Errorf("multi-token prefix names: %s %s %s", m.RunsStream(), m.Bucket(), m.EventSubject("a"))
	}
	for _, bad := range []string{"a..b", ".a", "a.", "a b", "a.*", ">", "a/b"} {
		if _, err := events.NewNames(bad); err == nil {
			t.Errorf("NewNames(%q) accepted", bad)
		}
	}
}

func TestRunIDFromSubject(t *testing.T) {
	t.Parallel()
	n := events.Names{}
	tests := []struct {
		subject string
		id      string
		ok      bool
	}{
		{"foundryq.runs.r1", "r1", true},
		{"foundryq.events.run_ABC-9", "run_ABC-9", true},
		{"foundryq.cancel.x", "x", true},
		{"foundryq.watch.x", "x", true},
		{"foundryq.dead.x", "x", true},
		{"foundryq.position.x", "x", true},
		{"foundryq.other.x", "", false},
		{"foundryq.runs.", "", false},
		{"foundryq.runs.a.b", "", false},
		{"foundryq.runs." + strings.Repeat("a", 65), "", false},
		{"acme.runs.x", "", false},
		{"foundryq.runs", "", false},
		{"foundryqx.runs.x", "", false},
	}
	for _, tt := range tests {
		id, ok := n.RunIDFromSubject(tt.subject)
		if id != tt.id || ok != tt.ok {
			t.Errorf("RunIDFromSubject(%q) = %q, %v; want %q, %v", tt.subject, id, ok, tt.id, tt.ok)
		}
	}
}

func TestValidRunID(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"a", "A-z_0", strings.Repeat("x", 64), events.NewRunID()} {
		if !events.ValidRunID(id) {
			t.Errorf("ValidRunID(%q) = false", id)
		}
	}
	for _, id := range []string{"", strings.Repeat("x", 65), "a.b", "a b", "a*", "a>", "é", "a/b", "a:b"} {
		if events.ValidRunID(id) {
			t.Errorf("ValidRunID(%q) = true", id)
		}
	}
	if a, b := events.NewRunID(), events.NewRunID(); a == b || !strings.HasPrefix(a, "run_") || len(a) != 30 {
		t.Errorf("NewRunID: %q %q", a, b)
	}
}
