package consumer

import (
	"testing"
	"time"
)

// A record read while its run's record is written again must not undo
// what the write said: the read may have found the older value.
func TestDeadlinesReadDoesNotOverrideAWriteHeardMeanwhile(t *testing.T) {
	var d deadlines
	now := time.Now()
	older, newer := now.Add(-time.Hour), now.Add(time.Hour)
	d.beginRead()
	d.seen("heard", &newer)
	d.read("heard", &older) // the read found the record before the write
	d.read("finished", nil)
	d.read("only-read", &older)
	d.endRead()
	if due := d.passed(now); len(due) != 1 || !due["only-read"].due.Equal(older) {
		t.Fatalf("passed %v, want only-read (heard's write after the read began stands)", due)
	}
	d.enforced("only-read", older, true, "", now)
	if got := d.len(); got != 1 {
		t.Fatalf("%d deadlines held, want 1 (heard)", got)
	}
	// Once no read is under way, a read applies again.
	d.beginRead()
	d.read("heard", nil)
	d.endRead()
	if got := d.len(); got != 0 || d.heard != nil {
		t.Fatalf("%d deadlines held, heard %v after a read found the run finished", got, d.heard)
	}
}

// A deadline whose enforcement did not settle the run (NATS unavailable,
// the store full) is tried again after a wait that doubles, never while
// one is under way; one that settled it is forgotten, and a write heard
// meanwhile stands. On main before this change a failed enforcement
// dropped the deadline until the record was written again.
func TestDeadlineEnforcementRetriedUntilSettled(t *testing.T) {
	var d deadlines
	now := time.Now()
	due := now.Add(-deadlineGrace)
	d.seen("run", &due)
	if got := d.passed(now); len(got) != 1 {
		t.Fatalf("passed %v, want run", got)
	}
	if got := d.passed(now.Add(time.Minute)); len(got) != 0 {
		t.Fatalf("passed %v while its enforcement is under way, want none", got)
	}
	d.enforced("run", due, false, "resp_1", now)
	if got := d.passed(now.Add(enforceRetry - time.Millisecond)); len(got) != 0 {
		t.Fatalf("passed %v before the wait, want none", got)
	}
	got := d.passed(now.Add(enforceRetry))
	if len(got) != 1 || got["run"].called != "resp_1" {
		t.Fatalf("passed %v after the wait, want run, resp_1 called", got)
	}
	d.enforced("run", due, false, "", now)
	if got := d.passed(now.Add(2*enforceRetry - time.Millisecond)); len(got) != 0 {
		t.Fatalf("passed %v before the doubled wait, want none", got)
	}
	if got := d.passed(now.Add(2 * enforceRetry)); len(got) != 1 || got["run"].called != "resp_1" {
		t.Fatalf("passed %v after the doubled wait, want run, resp_1 still called", got)
	}
	// A write heard meanwhile (another deadline) is not undone by the end
	// of the enforcement of the old one.
	later := now.Add(time.Hour)
	d.seen("run", &later)
	d.enforced("run", due, true, "", now)
	if got := d.len(); got != 1 {
		t.Fatalf("%d deadlines held, want the one written meanwhile", got)
	}
	d.seen("run", &due)
	if got := d.passed(now); len(got) != 1 {
		t.Fatalf("passed %v, want run", got)
	}
	d.enforced("run", due, true, "", now)
	if got := d.len(); got != 0 {
		t.Fatalf("%d deadlines held after an enforcement settled the run, want 0", got)
	}
}
