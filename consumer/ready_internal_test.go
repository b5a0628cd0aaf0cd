package consumer

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A pull loop whose heartbeat is older than the limit counts as stuck.
func TestReadinessPullLoop(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, c := range []struct {
		name            string
		running, ended  bool
		beatAge         time.Duration
		wantErr, reason string
	}{
		{name: "not started", reason: "starting"},
		{name: "alive", running: true, beatAge: time.Second},
		{name: "heartbeat at the limit", running: true, beatAge: 10 * time.Second},
		{name: "stuck", running: true, beatAge: 11 * time.Second, reason: "pull loop: no heartbeat for 11s"},
		{name: "ended", ended: true, beatAge: time.Second, reason: "pull loop stopped"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var r readiness
			r.running.Store(c.running)
			r.ended.Store(c.ended)
			r.heartbeat(now.Add(-c.beatAge))
			err := r.pullLoop(now, 10*time.Second)
			if c.reason == "" {
				if err != nil {
					t.Fatalf("got %v, want ready", err)
				}
				return
			}
			if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), c.reason) {
				t.Fatalf("got %v, want not ready: %s", err, c.reason)
			}
		})
	}
}
