package consumer

import (
	"errors"
	"testing"
	"time"

	"github.com/foundryq/foundryq/events"
)

func TestMarkQueued(t *testing.T) {
	fair := events.Fairness{Key: "team-a", Priority: events.PriorityLow}
	for _, c := range []struct {
		name   string
		st     events.RunState
		exists bool
		want   error
		status events.RunStatus
	}{
		{"no record: one, queued", events.RunState{}, false, nil, events.StatusQueued},
		{"queued for another reason", events.RunState{Status: events.StatusQueued, QueueReason: events.QueueReasonBudget}, true, nil, events.StatusQueued},
		{"same reason: no write", events.RunState{Status: events.StatusQueued, QueueReason: events.QueueReasonCap}, true, errSkipUpdate, events.StatusQueued},
		{"given back: stays running", events.RunState{Status: events.StatusRunning, Failures: 1}, true, nil, events.StatusRunning},
		{"waiting: stays waiting", events.RunState{Status: events.StatusWaiting}, true, nil, events.StatusWaiting},
		{"owned", events.RunState{Status: events.StatusRunning, Owner: "w1"}, true, errClaimed, events.StatusRunning},
		{"finished", events.RunState{Status: events.StatusCompleted}, true, errFinished, events.StatusCompleted},
		{"newer schema", events.RunState{Schema: stateSchema + 1, Status: events.StatusQueued}, true, errNewerSchema, events.StatusQueued},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := c.st
			err := markQueued(&st, c.exists, "digest", fair, events.QueueReasonCap)
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
			if st.Status != c.status {
				t.Errorf("status %s, want %s", st.Status, c.status)
			}
			if err == nil && (st.QueueReason != events.QueueReasonCap || st.FairnessKey != "team-a" || st.Priority != events.PriorityLow) {
				t.Errorf("record %+v", st)
			}
			if !c.exists && (st.Digest != "digest" || st.Schema != baseSchema) {
				t.Errorf("new record %+v: want the digest and schema %d", st, baseSchema)
			}
		})
	}
	// The claim clears it; a claim of a queued record counts no failure.
	st := events.RunState{Status: events.StatusQueued, QueueReason: events.QueueReasonCap, Digest: "digest"}
	if err := claimRun(&st, true, owner{"w1", 1}, "digest", 0, time.Now().UTC()); err != nil || st.Failures != 0 || st.Status != events.StatusRunning {
		t.Fatalf("claim of a queued record: %v, %+v", err, st)
	}
}

func TestBudgetHelpers(t *testing.T) {
	if got := budgetToken("agent:my.helper"); got != "agent=3amy=2ehelper" {
		t.Errorf("budgetToken: %q", got)
	}
	if budgetToken("a.b") == budgetToken("a_b") {
		t.Error("two deployments share a key")
	}
	req := events.RunRequest{Model: "gpt-4o", Input: []byte(`"hello there"`), MaxOutputTokens: 100}
	if got := estimateTokens(req, 1000); got != 104 {
		t.Errorf("estimate %d, want 104 (13 bytes: 4 tokens, plus 100)", got)
	}
	req.MaxOutputTokens = 0
	if got := estimateTokens(req, 1000); got != 1004 {
		t.Errorf("estimate without max_output_tokens %d, want 1004", got)
	}
	if budgetName(req) != "gpt-4o" || budgetName(events.RunRequest{Agent: &events.AgentRef{Name: "helper"}}) != "agent:helper" {
		t.Error("budgetName")
	}
	c := Config{TokensPerMinute: map[string]int{"gpt-4o": 6000}, BudgetWindow: 10 * time.Second}
	if got := c.tokenBudget("gpt-4o"); got != 1000 {
		t.Errorf("budget of a 10s window: %d, want 1000", got)
	}
	if !(budgetShare(events.PriorityHigh) > budgetShare(events.PriorityNormal) && budgetShare(events.PriorityNormal) > budgetShare(events.PriorityLow)) {
		t.Error("a lower priority may spend as much of a window as a higher one")
	}
	for _, bad := range []Config{{CapPerKey: -1}, {Caps: map[string]int{"a.b": 1}}, {Caps: map[string]int{"a": 0}}, {SlotLease: 100 * time.Millisecond},
		{TokensPerMinute: map[string]int{"agent:": 5}}, {TokensPerMinute: map[string]int{"m": 0}}, {BudgetWindow: 2 * time.Minute}} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
