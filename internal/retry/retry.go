// Package retry holds the one backoff and the one context-aware sleep that
// foundryq's retry loops share.
package retry

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Backoff returns an exponential backoff that starts at initial and doubles
// up to max, with 20 % jitter so that many runs retrying at once spread out.
// Call NextBackOff for each wait.
func Backoff(initial, max time.Duration) *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     initial,
		RandomizationFactor: 0.2,
		Multiplier:          2,
		MaxInterval:         max,
	}
}

// Sleep waits d, or until ctx ends; it reports whether the whole time
// passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
