package tools

import "time"

// A worker may cancel a call at once after sending it (the run was
// cancelled as the call went out), and the request and the cancel message
// reach a service on different subscriptions, each with a goroutine of its
// own: the cancel can overtake its call. So a cancel that names no
// registered call is remembered for earlyCancelMemory, and a call it names
// that arrives meanwhile is answered without running. At most
// maxEarlyCancels are kept (every instance hears every cancel, also those
// of calls another instance runs); the oldest go first.
const (
	earlyCancelMemory = 30 * time.Second
	maxEarlyCancels   = 4096
)

// callKey names one call of one run.
type callKey struct{ runID, callID string }

// earlyCancels are the remembered cancels, oldest first (guarded by
// Service.mu).
type earlyCancels struct {
	at    map[callKey]time.Time
	order []callKey
}

// add remembers a cancel of k received at now.
func (e *earlyCancels) add(k callKey, now time.Time) {
	if e.at == nil {
		e.at = map[callKey]time.Time{}
	}
	e.expire(now)
	if _, ok := e.at[k]; ok {
		return
	}
	if len(e.order) >= maxEarlyCancels {
		delete(e.at, e.order[0])
		e.order = e.order[1:]
	}
	e.at[k] = now
	e.order = append(e.order, k)
}

// take reports whether a cancel of k is remembered, and forgets it.
func (e *earlyCancels) take(k callKey, now time.Time) bool {
	e.expire(now)
	if _, ok := e.at[k]; !ok {
		return false
	}
	delete(e.at, k)
	return true
}

// expire forgets the cancels older than earlyCancelMemory, and drops from
// order the keys taken meanwhile.
func (e *earlyCancels) expire(now time.Time) {
	for len(e.order) > 0 {
		k := e.order[0]
		if at, ok := e.at[k]; ok {
			if now.Sub(at) < earlyCancelMemory {
				return
			}
			delete(e.at, k)
		}
		e.order = e.order[1:]
	}
}
