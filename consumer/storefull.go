package consumer

import (
	"fmt"
	"sync"
	"time"

	"github.com/foundryq/foundryq/internal/jserr"
)

// storeWatchFor is how long after JetStream last refused a write for want
// of space the worker still reports it (in Ready): a relay retries a
// refused event at least once a second, so a store that stays full keeps
// the report fresh, and one that was freed clears it within this time.
const storeWatchFor = 10 * time.Second

// storeWatch follows whether JetStream refuses this worker's writes because
// its store is full (jserr.StoreFull): every event publish and state write
// reports to it, and Ready says not ready while it does.
type storeWatch struct {
	m *metrics

	mu      sync.Mutex
	since   time.Time // first refusal since the last successful write; zero if none
	last    time.Time // last refusal
	lastErr error
}

// observe records the result of a write of what ("event" or "state") and
// reports whether err is a refusal for want of space.
func (s *storeWatch) observe(what string, err error) bool {
	full := err != nil && jserr.StoreFull(err)
	if err != nil && !full {
		return false // another failure says nothing about the store
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !full {
		s.since, s.lastErr = time.Time{}, nil
		return false
	}
	if s.m != nil {
		s.m.storeRefusals.WithLabelValues(what).Inc()
	}
	if s.since.IsZero() {
		s.since = now
	}
	s.last, s.lastErr = now, err
	return true
}

// refusing returns a reason while JetStream refuses writes, else nil.
func (s *storeWatch) refusing(now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.since.IsZero() || now.Sub(s.last) > storeWatchFor {
		return nil
	}
	return fmt.Errorf("jetstream refuses writes, its store full, since %s ago: %w", now.Sub(s.since).Round(time.Second), s.lastErr)
}
