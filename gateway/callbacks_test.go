package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/gateway"
	"github.com/foundryq/foundryq/internal/testkit"
)

var (
	testSecret = []byte("0123456789abcdef-test-secret") // gateway-wide (first version)
	tenantKey  = []byte("tenant-default-callback-key")  // the test tenant's own (v2)
)

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

// checkCallback verifies a callback's signatures (both versions: the
// test gateways have a gateway-wide secret and a tenant key) and that its
// body is the run's terminal event as stored on NATS.
func (e *env) checkCallback(t *testing.T, c callback, url, runID string, attempt int) {
	t.Helper()
	if err := gateway.VerifySignature(testSecret, c.header, c.body, time.Minute, time.Now()); err != nil {
		t.Fatalf("callback signature: %v (headers %v)", err, c.header)
	}
	v := gateway.Verifier{Tenant: "default", URL: url, Keys: [][]byte{tenantKey}}
	if err := v.Verify(c.header, c.body, time.Now()); err != nil {
		t.Fatalf("callback signature v2: %v (headers %v)", err, c.header)
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
	e.checkCallback(t, rcv.calls()[0], rcv.URL+"/done", cr.RunID, 1)

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
		e.checkCallback(t, c, rcv.URL, cr.RunID, i+1)
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
	e.checkCallback(t, rcv.calls()[0], rcv.URL, cr.RunID, 1)
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
	e.checkCallback(t, rcv.calls()[0], rcv.URL, cr.RunID, 1)
}

// A tenant with a key of its own and no gateway-wide secret gets its
// callbacks, signed with v2 only.
func TestCallbackTenantKeyOnly(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	cfg := callbackConfig()
	cfg.Secret = nil
	nc, err := e.ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	g := e.gateway(gateway.Config{Callbacks: cfg, NoAuth: true,
		Tenants: []gateway.Tenant{{Name: "default", Conn: nc, CallbackSecrets: [][]byte{tenantKey}}}})
	rcv := newReceiver(t, nil)
	req := runRequest(nil)
	req["callback_url"] = rcv.URL + "/v2"
	cr := g.create(t, req)
	testkit.Eventually(t, 30*time.Second, "the callback", func() bool { return len(rcv.calls()) >= 1 })
	c := rcv.calls()[0]
	if c.header.Get(gateway.HeaderSignature) != "" {
		t.Fatalf("a first-version signature without a gateway-wide secret: %v", c.header)
	}
	v := gateway.Verifier{Tenant: "default", URL: rcv.URL + "/v2", Keys: [][]byte{tenantKey}}
	if err := v.Verify(c.header, c.body, time.Now()); err != nil {
		t.Fatalf("v2: %v (%v)", err, c.header)
	}
	if !strings.HasPrefix(c.header.Get(gateway.HeaderDeliveryID), cr.RunID+":") {
		t.Fatalf("delivery id %q for run %s", c.header.Get(gateway.HeaderDeliveryID), cr.RunID)
	}
}

func TestCallbackURLRules(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	cfg := callbackConfig()
	cfg.AllowLoopback = false
	g := e.gateway(gateway.Config{Callbacks: cfg})
	for _, u := range []string{
		"http://127.0.0.1:9/cb", "http://localhost/cb", "http://[::1]/cb", "http://169.254.169.254/latest/meta-data",
		"http://0.0.0.0/", "http://10.0.0.1/cb", "http://192.168.1.1/", "http://172.16.0.1/", "http://100.100.100.200/",
		"http://168.63.129.16/", "http://[fd00:ec2::254]/", "http://[64:ff9b::a9fe:a9fe]/", "ftp://example.com/x", "/relative", "https://user:pw@example.com/cb", "",
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

// The v2 signature covers tenant, delivery id, event type, attempt, URL,
// timestamp and body: changing any of them, or verifying as another
// tenant or with another tenant's key, fails; during a rotation either
// key passes.
func TestSignatureV2(t *testing.T) {
	t.Parallel()
	keyA, keyB, keyB2 := []byte("tenant-a-key-0123456789"), []byte("tenant-b-key-0123456789"), []byte("tenant-b-next-key-01234")
	body := []byte(`{"run_id":"run_1","seq":7,"type":"run.completed","status":"completed"}`)
	now := time.Unix(1_800_000_000, 0)
	const url = "https://b.example.com/hooks/foundryq"
	m := gateway.SignedCallback{Tenant: "b", DeliveryID: "run_1:7", EventType: "run.completed", Attempt: 2, URL: url,
		Timestamp: strconv.FormatInt(now.Unix(), 10), Body: body}
	headers := func(m gateway.SignedCallback, sigs ...string) http.Header {
		h := http.Header{}
		h.Set(gateway.HeaderTimestamp, m.Timestamp)
		h.Set(gateway.HeaderDeliveryID, m.DeliveryID)
		h.Set(gateway.HeaderEventType, m.EventType)
		h.Set(gateway.HeaderAttempt, strconv.Itoa(m.Attempt))
		h.Set(gateway.HeaderSignatureV2, strings.Join(sigs, ", "))
		return h
	}
	b := gateway.Verifier{Tenant: "b", URL: url, Keys: [][]byte{keyB}, Tolerance: time.Minute}
	if err := b.Verify(headers(m, gateway.SignV2(keyB, m)), body, now); err != nil {
		t.Fatalf("a genuine callback: %v", err)
	}
	// Tenant A, who knows only its own key, cannot sign for B, even
	// naming B as the tenant.
	if err := b.Verify(headers(m, gateway.SignV2(keyA, m)), body, now); !errors.Is(err, gateway.ErrBadSignature) {
		t.Errorf("signed with A's key: %v", err)
	}
	// A genuine callback of A (same run id: run ids repeat across tenants)
	// does not pass as B's.
	ma := m
	ma.Tenant = "a"
	if err := (gateway.Verifier{Tenant: "b", URL: url, Keys: [][]byte{keyA, keyB}}).Verify(headers(ma, gateway.SignV2(keyA, ma)), body, now); !errors.Is(err, gateway.ErrBadSignature) {
		t.Errorf("A's callback at B's receiver: %v", err)
	}
	// A captured delivery replayed with another delivery id, attempt, event
	// type, URL or body fails.
	genuine := gateway.SignV2(keyB, m)
	for name, change := range map[string]func(h http.Header){
		"delivery id": func(h http.Header) { h.Set(gateway.HeaderDeliveryID, "run_1:8") },
		"attempt":     func(h http.Header) { h.Set(gateway.HeaderAttempt, "3") },
		"event type":  func(h http.Header) { h.Set(gateway.HeaderEventType, "run.failed") },
		"timestamp":   func(h http.Header) { h.Set(gateway.HeaderTimestamp, strconv.FormatInt(now.Unix()+1, 10)) },
		"no v2":       func(h http.Header) { h.Del(gateway.HeaderSignatureV2) },
	} {
		h := headers(m, genuine)
		change(h)
		if err := b.Verify(h, body, now); !errors.Is(err, gateway.ErrBadSignature) {
			t.Errorf("changed %s: %v", name, err)
		}
	}
	if err := b.Verify(headers(m, genuine), append([]byte(nil), bytes.Replace(body, []byte("completed"), []byte("failed"), 1)...), now); !errors.Is(err, gateway.ErrBadSignature) {
		t.Errorf("changed body: %v", err)
	}
	other := b
	other.URL = "https://b.example.com/other"
	if err := other.Verify(headers(m, genuine), body, now); !errors.Is(err, gateway.ErrBadSignature) {
		t.Errorf("delivered to another URL: %v", err)
	}
	// Headers that disagree with the body, both signed (a delivery id that
	// is not the body's run:seq) fail.
	mx := m
	mx.DeliveryID = "run_2:7"
	if err := b.Verify(headers(mx, gateway.SignV2(keyB, mx)), body, now); !errors.Is(err, gateway.ErrBadSignature) {
		t.Errorf("a delivery id that is not the body's: %v", err)
	}
	if err := b.Verify(headers(m, genuine), body, now.Add(2*time.Minute)); !errors.Is(err, gateway.ErrStaleRequest) {
		t.Errorf("old: %v", err)
	}
	// Rotation: the gateway signs with both keys; a receiver with either passes.
	both := headers(m, gateway.SignV2(keyB, m), gateway.SignV2(keyB2, m))
	for _, k := range [][]byte{keyB, keyB2} {
		if err := (gateway.Verifier{Tenant: "b", URL: url, Keys: [][]byte{k}}).Verify(both, body, now); err != nil {
			t.Errorf("rotation: %v", err)
		}
	}
}

// The consumer that follows the state bucket for ended runs exists once
// the gateway is ready: it delivers only writes made after it was created,
// so a run that ended before it would never get its callback.
func TestCallbackFollowerExistsWhenReady(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	e.gateway(gateway.Config{Callbacks: callbackConfig()})
	js := mustJS(t, e.nc)
	if _, err := js.Consumer(context.Background(), "KV_foundryq-runs", "foundryq-gateway-follower"); err != nil {
		t.Fatalf("follower consumer right after Ready: %v", err)
	}
}
