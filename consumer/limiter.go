package consumer

import (
	"context"
	"sync"
	"time"
)

// createLimiter holds back a worker's creates to one Foundry deployment (a
// model deployment or an agent) while the service asks to wait: a 429 with
// Retry-After closes the gate until then. When the wait is over, one create
// goes first (the probe); the others follow once it was not refused, so a
// burst of thousands of runs drains at the rate the quota allows instead of
// hammering the service with creates that are all refused.
type createLimiter struct {
	mu    sync.Mutex
	gates map[string]*gate
}

type gate struct {
	until   time.Time     // closed until then
	probing bool          // a create is testing whether it is open again
	changed chan struct{} // closed (and replaced) at every change
}

func newCreateLimiter() *createLimiter { return &createLimiter{gates: make(map[string]*gate)} }

// wait returns once a create to key may be sent, or with the error of the
// first of ctx and stop to end. probe says this create tests a gate that was
// closed: the caller must report its outcome with done.
func (l *createLimiter) wait(ctx, stop context.Context, key string) (probe bool, err error) {
	for {
		l.mu.Lock()
		g := l.gates[key]
		if g == nil {
			l.mu.Unlock()
			return false, nil
		}
		d := time.Until(g.until)
		if d <= 0 && !g.probing {
			g.probing = true
			l.mu.Unlock()
			return true, nil
		}
		changed := g.changed
		l.mu.Unlock()
		if d <= 0 {
			d = time.Hour // the probe's outcome (changed) decides
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-changed:
		case <-ctx.Done():
			err = context.Cause(ctx)
		case <-stop.Done():
			err = context.Cause(stop)
		}
		t.Stop()
		if err != nil {
			return false, err
		}
	}
}

// done reports how a create to key went: refused for rate limits (with the
// wait the service asked for), or not. A refusal closes the gate; a probe
// that was not refused opens it for everyone.
func (l *createLimiter) done(key string, probe, rateLimited bool, retryAfter time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.gates[key]
	switch {
	case rateLimited:
		if g == nil {
			g = &gate{changed: make(chan struct{})}
			l.gates[key] = g
		}
		if retryAfter <= 0 {
			retryAfter = time.Second
		}
		if until := time.Now().Add(retryAfter); until.After(g.until) {
			g.until = until
		}
		if probe {
			g.probing = false
		}
	case probe && g != nil:
		delete(l.gates, key)
	default:
		return
	}
	close(g.changed)
	g.changed = make(chan struct{})
}
