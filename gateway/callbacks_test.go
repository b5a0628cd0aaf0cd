package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/gateway"
	"github.com/foundryq/foundryq/internal/testkit"
)

var testSecret = []byte("0123456789abcdef-test-secret")

// receiver is an httptest server that records callbacks and answers
// each with the status fail(n) says (n counts from 1).
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	got  []callback
	fail func(n int) int
}

type callback struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T, fail func(n int) int) *receiver {
	t.Helper()
	r := &receiver{fail: fail}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, callback{header: req.Header.Clone(), body: body})
		n := len(r.got)
		r.mu.Unlock()
		status := http.StatusNoContent
		if r.fail != nil {
			status = r.fail(n)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) calls() []callback {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]callback(nil), r.got...)
}

func callbackConfig() gateway.CallbackConfig {
	return gateway.CallbackConfig{Secret: testSecret, AllowLoopback: true, Backoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
}

// checkCallback verifies a callback's signature and that its body is the
// run's terminal event as stored on NATS.
func (e *env) checkCallback(t *testing.T, c callback, runID string, attempt int) {
	t.Helper()
	if err := gateway.VerifySignature(testSecret, c.header, c.body, time.Minute, time.Now()); err != nil {
		t.Fatalf("callback signature: %v (headers %v)", err, c.header)
	}
	evs := e.watchAll(runID)
	end := evs[len(evs)-1]
	var got events.RunEvent
	if err := json.Unmarshal(c.body, &got); err != nil {
		t.Fatal(err)
	}
	if mustJSON(t, got) != mustJSON(t, end) {
		t.Fatalf("callback body %s, terminal event %s", c.body, mustJSON(t, end))
	}
	h := c.header
	if h.Get("Content-Type") != "application/json" || h.Get(gateway.HeaderEventType) != string(end.Type) ||
		h.Get(gateway.HeaderDeliveryID) != runID+":"+strconv.FormatUint(end.Seq, 10) || h.Get(gateway.HeaderAttempt) != strconv.Itoa(attempt) {
		t.Fatalf("callback headers %v (attempt %d)", h, attempt)
	}
}

func TestCallbackDelivered(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	g := e.gateway(gateway.Config{Callbacks: callbackConfig()})
	rcv := newReceiver(t, nil)
	req := runRequest(nil)
	req["callback_url"] = rcv.URL + "/done"
	cr := g.create(t, req)
	if cr.CallbackURL != rcv.URL+"/done" {
		t.Fatalf("create: %+v", cr)
	}
	testkit.Eventually(t, 30*time.Second, "the callback", func() bool { return len(rcv.calls()) >= 1 })
	e.checkCallback(t, rcv.calls()[0], cr.RunID, 1)

	// A retry of the same request and callback is the existing run; another
	// callback_url for it is a conflict.
	req["run_id"] = cr.RunID
	if r := g.do(t, "POST", "/v1/runs", req); r.status != http.StatusOK {
		t.Fatalf("retry: %d %s", r.status, r.body)
	}
	req["callback_url"] = rcv.URL + "/elsewhere"
	r := g.do(t, "POST", "/v1/runs", req)
	if ae := r.apiError(t); r.status != http.StatusConflict || ae.Code != gateway.CodeCallbackConflict {
		t.Fatalf("other callback: %d %+v", r.status, ae)
	}
	if n := len(rcv.calls()); n != 1 {
		t.Fatalf("%d callbacks for one run", n)
	}
}

// A receiver that fails twice gets the same signed event three times, and
// the third answer ends it.
func TestCallbackRetried(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	g := e.gateway(gateway.Config{Callbacks: callbackConfig()})
	rcv := newReceiver(t, func(n int) int {
		if n <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	req := runRequest(nil)
	req["callback_url"] = rcv.URL
	cr := g.create(t, req)
	testkit.Eventually(t, 30*time.Second, "three attempts", func() bool { return len(rcv.calls()) >= 3 })
	calls := rcv.calls()
	for i, c := range calls[:3] {
		e.checkCallback(t, c, cr.RunID, i+1)
		if string(c.body) != string(calls[0].body) {
			t.Fatal("attempts carried different bodies")
		}
	}
	// No fourth attempt after the success: the delivery stream drains.
	js := mustJS(t, e.nc)
	testkit.Eventually(t, 10*time.Second, "the delivery acked", func() bool {
		s, err := js.Stream(context.Background(), "FOUNDRYQ_CALLBACKS")
		if err != nil {
			return false
		}
		info, err := s.Info(context.Background())
		return err == nil && info.State.Msgs == 0
	})
	if n := len(rcv.calls()); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
}

// After the last attempt the delivery goes to the dead letters.
func TestCallbackDeadLetter(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	cfg := callbackConfig()
	cfg.MaxAttempts = 3
	g := e.gateway(gateway.Config{Callbacks: cfg})
	rcv := newReceiver(t, func(int) int { return http.StatusInternalServerError })
	req := runRequest(nil)
	req["callback_url"] = rcv.URL
	cr := g.create(t, req)
	js := mustJS(t, e.nc)
	var dead *jetstream.RawStreamMsg
	testkit.Eventually(t, 30*time.Second, "a dead letter", func() bool {
		s, err := js.Stream(context.Background(), "FOUNDRYQ_CALLBACKS_DEAD")
		if err != nil {
			return false
		}
		dead, err = s.GetLastMsgForSubject(context.Background(), "foundryq.gateway.callbacks_dead."+cr.RunID)
		return err == nil
	})
	if dead.Header.Get(gateway.HeaderDeadAttempts) != "3" || dead.Header.Get(gateway.HeaderDeadError) != "callback answered HTTP 500" {
		t.Fatalf("dead letter headers %v", dead.Header)
	}
	var d gateway.Delivery
	if err := json.Unmarshal(dead.Data, &d); err != nil || d.RunID != cr.RunID || d.URL != rcv.URL {
		t.Fatalf("dead letter %s: %v", dead.Data, err)
	}
	if n := len(rcv.calls()); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
}

// A callback registered through one gateway is delivered even if the run
// ends while no gateway runs: the next gateway to start delivers it.
func TestCallbackAcrossRestart(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	rcv := newReceiver(t, nil)
	g1 := e.gateway(gateway.Config{Callbacks: callbackConfig()})
	req := runRequest(map[string]string{"emu_tokens": "20", "emu_token_ms": "25"})
	req["callback_url"] = rcv.URL
	cr := g1.create(t, req)
	g1.stop()
	evs := e.watchAll(cr.RunID) // the run ends with no gateway running
	if len(rcv.calls()) != 0 {
		t.Fatal("a callback with no gateway running")
	}
	e.gateway(gateway.Config{Callbacks: callbackConfig()})
	testkit.Eventually(t, 30*time.Second, "the callback from the second gateway", func() bool { return len(rcv.calls()) >= 1 })
	e.checkCallback(t, rcv.calls()[0], cr.RunID, 1)
	if evs[len(evs)-1].Type != events.TypeRunCompleted {
		t.Fatalf("end %+v", evs[len(evs)-1])
	}
}

// A callback added by a retry after the run ended is still delivered.
func TestCallbackForAFinishedRun(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	g := e.gateway(gateway.Config{Callbacks: callbackConfig()})
	rcv := newReceiver(t, nil)
	req := runRequest(nil)
	cr := g.create(t, req)
	e.watchAll(cr.RunID)
	req["run_id"] = cr.RunID
	req["callback_url"] = rcv.URL
	r := g.do(t, "POST", "/v1/runs", req)
	if r.status != http.StatusOK {
		t.Fatalf("retry with a callback: %d %s", r.status, r.body)
	}
	testkit.Eventually(t, 30*time.Second, "the callback", func() bool { return len(rcv.calls()) >= 1 })
	e.checkCallback(t, rcv.calls()[0], cr.RunID, 1)
}

func TestCallbackURLRules(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	cfg := callbackConfig()
	cfg.AllowLoopback = false
	g := e.gateway(gateway.Config{Callbacks: cfg})
	for _, u := range []string{
		"http://127.0.0.1:9/cb", "http://localhost/cb", "http://[::1]/cb", "http://169.254.169.254/latest/meta-data",
		"http://0.0.0.0/", "ftp://example.com/x", "/relative", "https://user:pw@example.com/cb", "",
	} {
		req := runRequest(nil)
		req["callback_url"] = u
		r := g.do(t, "POST", "/v1/runs", req)
		if u == "" {
			if r.status != http.StatusCreated {
				t.Errorf("empty callback_url (none): %d %s", r.status, r.body)
			}
			continue
		}
		ae := r.apiError(t)
		if r.status != http.StatusBadRequest || ae.Field != "callback_url" {
			t.Errorf("%q: %d %+v", u, r.status, ae)
		}
	}
}

func TestSignature(t *testing.T) {
	t.Parallel()
	body := []byte(`{"type":"run.completed"}`)
	now := time.Unix(1_800_000_000, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	h := http.Header{}
	h.Set(gateway.HeaderTimestamp, ts)
	h.Set(gateway.HeaderSignature, gateway.Sign(testSecret, ts, body))
	if err := gateway.VerifySignature(testSecret, h, body, time.Minute, now); err != nil {
		t.Fatal(err)
	}
	if err := gateway.VerifySignature([]byte("another secret!!"), h, body, time.Minute, now); !errors.Is(err, gateway.ErrBadSignature) {
		t.Fatalf("wrong secret: %v", err)
	}
	if err := gateway.VerifySignature(testSecret, h, append(body, ' '), time.Minute, now); !errors.Is(err, gateway.ErrBadSignature) {
		t.Fatalf("changed body: %v", err)
	}
	if err := gateway.VerifySignature(testSecret, h, body, time.Minute, now.Add(2*time.Minute)); !errors.Is(err, gateway.ErrStaleRequest) {
		t.Fatalf("old request: %v", err)
	}
}
