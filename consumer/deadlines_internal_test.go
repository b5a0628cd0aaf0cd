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
	if ids := d.passed(now); len(ids) != 1 || ids[0] != "only-read" {
		t.Fatalf("passed %v, want only-read (heard's write after the read began stands)", ids)
	}
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
