package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foundryq/foundryq/events"
)

// watcher follows every run's stored events, as a foundryq client does, on
// the events stream's republish subject (<prefix>.live.<run_id>: stored
// events only), and notes when each arrived.
type watcher struct {
	names events.Names
	sub   *nats.Subscription
	wake  chan struct{}

	mu   sync.Mutex
	runs map[string]*watchedRun
	// Sizes of the text.delta events seen, and the foundryq headers of
	// one, for the raw baseline's messages.
	deltaBytes, deltaMsgs int64
	header                nats.Header
}

// watchedRun is what the watcher saw of one run.
type watchedRun struct {
	first    map[events.EventType]int64 // first arrival of each type, Unix ns
	events   int
	receipts []receipt // text.delta arrivals, with the text received so far
	worker   string    // the worker its first run.started names
}

func watch(nc *nats.Conn, names events.Names) (*watcher, error) {
	w := &watcher{names: names, runs: map[string]*watchedRun{}, wake: make(chan struct{}, 1)}
	prefixLen := len(names.LiveSubject(""))
	sub, err := nc.Subscribe(names.LiveWildcard(), func(m *nats.Msg) {
		now := time.Now().UnixNano()
		runID := m.Subject[prefixLen:]
		typ := events.EventType(m.Header.Get(events.HeaderType))
		var text int
		var worker string
		if typ == events.TypeRunStarted {
			var ev struct {
				Worker string `json:"worker"`
			}
			if json.Unmarshal(m.Data, &ev) == nil {
				worker = ev.Worker
			}
		}
		if typ == events.TypeTextDelta {
			var ev struct {
				Text string `json:"text"`
			}
			if json.Unmarshal(m.Data, &ev) == nil {
				text = len(ev.Text)
			}
		}
		w.mu.Lock()
		r := w.runs[runID]
		if r == nil {
			r = &watchedRun{first: map[events.EventType]int64{}}
			w.runs[runID] = r
		}
		if _, ok := r.first[typ]; !ok {
			r.first[typ] = now
			if typ == events.TypeRunStarted {
				r.worker = worker
			}
		}
		r.events++
		if typ == events.TypeTextDelta {
			w.deltaBytes += int64(len(m.Data))
			w.deltaMsgs++
			if w.header == nil {
				w.header = nats.Header{}
				for k, v := range m.Header {
					if strings.HasPrefix(k, "Foundryq-") {
						w.header[k] = v
					}
				}
			}
			cum := text
			if n := len(r.receipts); n > 0 {
				cum += r.receipts[n-1].Cum
			}
			r.receipts = append(r.receipts, receipt{At: now, Cum: cum})
		}
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to %s: %w", names.LiveWildcard(), err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, err
	}
	w.sub = sub
	return w, nil
}

func (w *watcher) close() { _ = w.sub.Unsubscribe() }

// deltaShape is the mean size of the text.delta events seen and the
// foundryq headers of one.
func (w *watcher) deltaShape() (int, nats.Header) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.deltaMsgs == 0 {
		return 0, nil
	}
	return int(w.deltaBytes / w.deltaMsgs), w.header
}

// at is when run id's first event of type t arrived (zero if none).
func (w *watcher) at(id string, t events.EventType) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.runs[id]; r != nil {
		if ns, ok := r.first[t]; ok {
			return time.Unix(0, ns)
		}
	}
	return time.Time{}
}

// startedBy is the worker that the first run.started of run id names.
func (w *watcher) startedBy(id string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.runs[id]; r != nil {
		return r.worker
	}
	return ""
}

// receipts returns the text.delta arrivals of run id.
func (w *watcher) receipts(id string) []receipt {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.runs[id]; r != nil {
		return append([]receipt(nil), r.receipts...)
	}
	return nil
}

// steadyRate returns the text.delta events per second and the text bytes
// per second that ids received in the middle half of the time between
// their first and their last text.delta, away from the ramps of a load
// that starts and ends.
func (w *watcher) steadyRate(ids []string) (events, textBytes float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first, last int64
	for _, id := range ids {
		r := w.runs[id]
		if r == nil || len(r.receipts) == 0 {
			continue
		}
		if a := r.receipts[0].At; first == 0 || a < first {
			first = a
		}
		if b := r.receipts[len(r.receipts)-1].At; b > last {
			last = b
		}
	}
	lo, hi := first+(last-first)/4, last-(last-first)/4
	if hi <= lo {
		return 0, 0
	}
	var n, bytes int
	for _, id := range ids {
		r := w.runs[id]
		if r == nil {
			continue
		}
		prev := 0
		for _, rc := range r.receipts {
			if rc.At >= lo && rc.At < hi {
				n++
				bytes += rc.Cum - prev
			}
			prev = rc.Cum
		}
	}
	secs := time.Duration(hi - lo).Seconds()
	return float64(n) / secs, float64(bytes) / secs
}

// waitAll waits until every run of ids has an event of type t, for at most
// limit.
func (w *watcher) waitAll(ctx context.Context, ids []string, t events.EventType, limit time.Duration) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		missing := 0
		w.mu.Lock()
		for _, id := range ids {
			if r := w.runs[id]; r == nil {
				missing++
			} else if _, ok := r.first[t]; !ok {
				missing++
			}
		}
		w.mu.Unlock()
		if missing == 0 {
			return nil
		}
		select {
		case <-w.wake:
		case <-time.After(100 * time.Millisecond):
		case <-deadline.C:
			return fmt.Errorf("loadtest: %d of %d runs had no %s after %s", missing, len(ids), t, limit)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
