package foundrytest

import (
	"context"
	"net/http"
	"time"
)

// Cancel faults: a cancel call that fails (500) or hangs and times out at
// the gateway (504), cancelling nothing. Per response they come from
// emu_cancel_fail_ms and emu_cancel_hang_ms (a window opened by the first
// cancel call received for the response); process-wide from FailCancels and
// HangCancels (POST /_emulator/faults), a window opened by that call.

// FailCancels makes every cancel call answer 500 server_error for d from
// now (by Config.Clock), cancelling nothing: the generation goes on. A d of
// 0 ends it. Bounded by MaxScenarioDelay, as the endpoint is.
func (h *Handler) FailCancels(d time.Duration) {
	d = min(max(d, 0), MaxScenarioDelay)
	h.mu.Lock()
	h.cancelFailUntil = h.cfg.Clock().Add(d)
	h.mu.Unlock()
}

// HangCancels makes every cancel call hang for d from now (by
// Config.Clock): a call is answered when that window ends or its client
// gives up, with 504 and the gateway's GatewayTimeout body, and cancels
// nothing (it never reached the service). A d of 0 ends it, and calls
// hanging then are answered at once. While both FailCancels and HangCancels
// windows are open, calls hang.
func (h *Handler) HangCancels(d time.Duration) {
	d = min(max(d, 0), MaxScenarioDelay)
	h.mu.Lock()
	h.cancelHangUntil = h.cfg.Clock().Add(d)
	h.hangChanged()
	h.mu.Unlock()
}

// hangChanged wakes the cancel calls hanging on the process-wide window so
// that they look at it again (h.mu held).
func (h *Handler) hangChanged() {
	if h.hangWake != nil {
		close(h.hangWake)
		h.hangWake = nil
	}
}

// cancelFault returns the fault answer of a cancel call of r (nil when r is
// unknown), after hanging if a hang window is open; nil when no fault
// applies. The call has been counted by cancelCallStarted.
func (h *Handler) cancelFault(ctx context.Context, r *response) *apiError {
	hung := false
	for {
		h.mu.Lock()
		failUntil, hangUntil := h.cancelFailUntil, h.cancelHangUntil
		if h.hangWake == nil {
			h.hangWake = make(chan struct{})
		}
		wake := h.hangWake
		h.mu.Unlock()
		if r != nil {
			r.mu.Lock()
			if r.sc.cancelFail > 0 {
				failUntil = later(failUntil, r.firstCancelCall.Add(r.sc.cancelFail))
			}
			if r.sc.cancelHang > 0 {
				hangUntil = later(hangUntil, r.firstCancelCall.Add(r.sc.cancelHang))
			}
			r.mu.Unlock()
		}
		now := h.cfg.Clock()
		var fault *apiError
		switch {
		case now.Before(hangUntil):
			hung = true
			t := time.NewTimer(hangUntil.Sub(now))
			select {
			case <-t.C:
				continue // look again: the window may have been extended
			case <-wake:
				t.Stop()
				continue
			case <-ctx.Done():
			case <-h.closing:
			}
			t.Stop()
			fault = gatewayTimeout()
		case hung:
			// The window ended while this call hung: the gateway gave up on it.
			fault = gatewayTimeout()
		case now.Before(failUntil):
			fault = cancelServerError()
		default:
			return nil
		}
		if r != nil {
			r.mu.Lock()
			r.cancelFaulted++
			r.mu.Unlock()
		}
		return fault
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// cancelServerError is the 500 of a failed cancel call: the service's
// server_error body, as emu_create_status=500 answers it.
func cancelServerError() *apiError { return statusError(http.StatusInternalServerError) }

// gatewayTimeout is the 504 of a cancel call that never reached the
// service: Azure's gateway gives up with code GatewayTimeout and "The
// gateway did not receive a response from 'Microsoft.CognitiveServices'
// within the specified time period." ("The gateway did not receive a
// response from 'Microsoft.CognitiveServices' within the specified time
// period.", microsoft/foundry-dev-tools#498; the error object of "Gateway
// Timeout Error on Azure", microsoft/azure-pipelines-tasks#12925).
func gatewayTimeout() *apiError {
	return &apiError{status: http.StatusGatewayTimeout, typ: "server_error", code: "GatewayTimeout",
		message: "The gateway did not receive a response from 'Microsoft.CognitiveServices' within the specified time period."}
}

// cancelCallStarted counts a cancel call of r: the calls received, those in
// flight (and their peak), and the time of the first one, which opens the
// emu_cancel_fail_ms and emu_cancel_hang_ms windows.
func (r *response) cancelCallStarted() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancelCalls == 0 {
		r.firstCancelCall = r.h.cfg.Clock()
	}
	r.cancelCalls++
	r.cancelInFlight++
	r.cancelMaxInFlight = max(r.cancelMaxInFlight, r.cancelInFlight)
}

// cancelCallEnded ends a call counted by cancelCallStarted.
func (r *response) cancelCallEnded() {
	r.mu.Lock()
	r.cancelInFlight--
	r.mu.Unlock()
}

// faultWindow is one open fault window in the reply of /_emulator/faults.
type faultWindow struct {
	Until  string `json:"until"` // RFC 3339
	LeftMS int64  `json:"left_ms"`
}

// faultState is the reply of the faults control endpoint: the windows open
// now (absent when closed).
type faultState struct {
	CancelFail *faultWindow `json:"cancel_fail,omitempty"`
	CancelHang *faultWindow `json:"cancel_hang,omitempty"`
}

// handleFaults serves the process-wide fault control endpoint (no key
// needed), modelled on /_emulator/throttle:
//
//	POST   /_emulator/faults?cancel_fail_for=10s&cancel_hang_for=10s   open the windows given (0s closes one)
//	GET    /_emulator/faults                                           the windows open, with the time left
//	DELETE /_emulator/faults                                           close both
func (h *Handler) handleFaults(w http.ResponseWriter, req *http.Request) {
	switch req.Method {
	case http.MethodPost:
		q := req.URL.Query()
		var set []func()
		for _, p := range []struct {
			name  string
			apply func(time.Duration)
		}{{"cancel_fail_for", h.FailCancels}, {"cancel_hang_for", h.HangCancels}} {
			if !q.Has(p.name) {
				continue
			}
			v := q.Get(p.name)
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 || d > MaxScenarioDelay {
				invalidRequest(p.name, "invalid_value", "Invalid value for '%s': %q. The emulator expects a duration in [0, %s], e.g. 10s.",
					p.name, v, MaxScenarioDelay).write(w)
				return
			}
			apply := p.apply
			set = append(set, func() { apply(d) })
		}
		for _, f := range set { // all or nothing: nothing applied before every value is checked
			f()
		}
	case http.MethodDelete:
		h.FailCancels(0)
		h.HangCancels(0)
	}
	writeJSON(w, http.StatusOK, h.faultState())
}

// faultState is what /_emulator/faults shows.
func (h *Handler) faultState() faultState {
	h.mu.Lock()
	failUntil, hangUntil := h.cancelFailUntil, h.cancelHangUntil
	h.mu.Unlock()
	now := h.cfg.Clock()
	window := func(until time.Time) *faultWindow {
		if !now.Before(until) {
			return nil
		}
		return &faultWindow{Until: until.UTC().Format(time.RFC3339Nano), LeftMS: max(until.Sub(now).Milliseconds(), 1)}
	}
	return faultState{CancelFail: window(failUntil), CancelHang: window(hangUntil)}
}
