package consumer

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/events"
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

// Every run has a deadline unless one is refused explicitly: the default
// is DefaultRunTimeout, a negative DefaultTimeout means none, and a
// request's timeout_seconds wins.
func TestRunTimeout(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		cfg     time.Duration
		seconds int
		want    time.Duration
	}{
		{name: "default", want: DefaultRunTimeout},
		{name: "configured", cfg: 5 * time.Minute, want: 5 * time.Minute},
		{name: "none", cfg: -1},
		{name: "request wins", cfg: -1, seconds: 30, want: 30 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := &Worker{cfg: Config{DefaultTimeout: c.cfg}.withDefaults()}
			if got := w.runTimeout(events.RunRequest{TimeoutSeconds: c.seconds}); got != c.want {
				t.Fatalf("run timeout %s, want %s", got, c.want)
			}
		})
	}
}
