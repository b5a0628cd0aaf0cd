package deploy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/gateway"
	"github.com/foundryq/foundryq/internal/testkit"
)

// TestGatewayPermissions runs the HTTP gateway in process as the "gateway"
// user of the shipped nats-server.conf, with a worker as "worker", drives
// every endpoint (submit with a callback, a queued run's state, the list,
// an event stream, a cancel) and checks that the server refused the
// gateway nothing, then that it refuses what the gateway has no use for.
func TestGatewayPermissions(t *testing.T) {
	s := startConfig(t, "nats-server.conf", serverConfPasswords)
	emu := emulator(t)
	worker := connectAs(t, s, "worker", "workerpw1")
	names := provisionAs(t, worker, "")

	gwUser := connectAs(t, s, "gateway", "gatewaypw1")
	gw, err := gateway.New(gateway.Config{
		Addr: "127.0.0.1:0", NoAuth: true,
		Tenants: []gateway.Tenant{{Name: "perm", Conn: gwUser.nc}},
		// One attempt: a refused callback goes to the dead letters at once.
		Callbacks: gateway.CallbackConfig{Secret: []byte("callback-secret-for-tests"), AllowLoopback: true, MaxAttempts: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("gateway: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("the gateway did not stop")
		}
	})
	select {
	case <-gw.Ready():
	case err := <-done:
		t.Fatalf("the gateway did not start as user gateway: %v (refusals: %v)", err, gwUser.recorded())
	case <-time.After(60 * time.Second):
		t.Fatalf("the gateway did not start (refusals: %v)", gwUser.recorded())
	}
	base := "http://" + gw.Addr()
	hc := &http.Client{Timeout: 90 * time.Second} // each request, its body read

	var mu sync.Mutex
	var callbacks []string
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/refuse" {
			w.WriteHeader(http.StatusInternalServerError)
		}
		mu.Lock()
		callbacks = append(callbacks, string(b))
		mu.Unlock()
	}))
	t.Cleanup(receiver.Close)

	t.Run("gateway: submit with a callback, and a queued run's state", func(t *testing.T) {
		body := `{"run_id":"gw-queued","model":"m","input":"hi","metadata":{"emu_tokens":"3"},"callback_url":"` + receiver.URL + `/hook"}`
		if code, out := testkit.Fetch(t, t.Context(), hc, http.MethodPost, base+"/v1/runs", body); code/100 != 2 {
			t.Fatalf("POST /v1/runs: %d %s", code, out)
		}
		// No worker yet: the request waits in the runs stream.
		code, out := testkit.Fetch(t, t.Context(), hc, http.MethodGet, base+"/v1/runs/gw-queued", nil)
		var st events.RunState
		if err := json.Unmarshal([]byte(out), &st); code != http.StatusOK || err != nil || st.Status != events.StatusQueued || st.CreatedAt.IsZero() {
			t.Fatalf("GET a queued run: %d %s (%v); want status queued with the request's time", code, out, err)
		}
	})
	runWorker(t, worker, emu, consumer.Config{})

	t.Run("gateway: follow a run's events to its end", func(t *testing.T) {
		// With watcher heartbeats (foundryq.watch.<id>) while it follows.
		code, out := testkit.Fetch(t, t.Context(), hc, http.MethodGet, base+"/v1/runs/gw-queued/events?cancel_on_disconnect=1", nil)
		if code != http.StatusOK || !strings.Contains(out, "event: "+string(events.TypeRunCompleted)) {
			t.Fatalf("GET events: %d %s", code, out)
		}
	})
	t.Run("gateway: deliver the callback", func(t *testing.T) {
		testkit.Eventually(t, 60*time.Second, "the completion callback", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(callbacks) > 0 && strings.Contains(callbacks[0], "gw-queued")
		})
	})
	t.Run("gateway: dead-letter a callback its receiver refuses", func(t *testing.T) {
		body := `{"run_id":"gw-dead","model":"m","input":"hi","metadata":{"emu_tokens":"2"},"callback_url":"` + receiver.URL + `/refuse"}`
		if code, out := testkit.Fetch(t, t.Context(), hc, http.MethodPost, base+"/v1/runs", body); code/100 != 2 {
			t.Fatalf("POST /v1/runs: %d %s", code, out)
		}
		cn, err := gateway.NewCallbackNames("")
		if err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 60*time.Second, "the callback's dead letter", func() bool {
			// Read on the server itself: no user but the gateway may.
			jsz, err := s.NATS().Jsz(&server.JSzOptions{Accounts: true, Streams: true})
			if err != nil {
				return false
			}
			for _, acc := range jsz.AccountDetails {
				for _, st := range acc.Streams {
					if st.Name == cn.DeadStream && st.State.Msgs > 0 {
						return true
					}
				}
			}
			return false
		})
	})
	t.Run("gateway: list the runs", func(t *testing.T) {
		if code, out := testkit.Fetch(t, t.Context(), hc, http.MethodGet, base+"/v1/runs", nil); code != http.StatusOK || !strings.Contains(out, "gw-queued") {
			t.Fatalf("GET /v1/runs: %d %s", code, out)
		}
	})
	t.Run("gateway: cancel a running run", func(t *testing.T) {
		body := `{"run_id":"gw-cancel","model":"m","input":"hi","metadata":{"emu_tokens":"100000","emu_token_ms":"20"}}`
		if code, out := testkit.Fetch(t, t.Context(), hc, http.MethodPost, base+"/v1/runs", body); code/100 != 2 {
			t.Fatalf("POST /v1/runs: %d %s", code, out)
		}
		testkit.Eventually(t, 60*time.Second, "gw-cancel running", func() bool {
			_, out := testkit.Fetch(t, t.Context(), hc, http.MethodGet, base+"/v1/runs/gw-cancel", nil)
			return strings.Contains(out, `"status":"running"`)
		})
		code, out := testkit.Fetch(t, t.Context(), hc, http.MethodPost, base+"/v1/runs/gw-cancel/cancel", `{"reason":"perm"}`)
		if code != http.StatusOK || !strings.Contains(out, `"cancel`) {
			t.Fatalf("POST cancel: %d %s", code, out)
		}
		if code, out := testkit.Fetch(t, t.Context(), hc, http.MethodGet, base+"/v1/runs/gw-cancel/events", nil); code != http.StatusOK || !strings.Contains(out, "event: "+string(events.TypeRunCancelled)) {
			t.Fatalf("GET events of the cancelled run: %d %s", code, out)
		}
	})
	t.Run("gateway: nothing it did was refused", func(t *testing.T) { gwUser.clean(t) })

	t.Run("gateway may not", func(t *testing.T) {
		x := connectAs(t, s, "gateway", "gatewaypw1")
		for _, subject := range []string{names.EventSubject("forged"), names.DeadSubject("forged"), names.NoticeSubject("gw-queued"), "$KV." + names.Bucket() + ".gw-queued"} {
			x.denied(t, subject, func(ctx context.Context) error {
				_, err := x.nc.RequestWithContext(ctx, subject, []byte(`{}`))
				return err
			})
		}
		for _, subject := range []string{"$JS.API.STREAM.DELETE." + names.RunsStream(), "$JS.API.STREAM.PURGE." + names.EventsStream(), "$JS.API.STREAM.UPDATE." + names.RunsStream(), "$JS.API.STREAM.MSG.GET." + names.DeadStream(), "$JS.API.CONSUMER.CREATE." + names.RunsStream() + ".peek", "$JS.API.STREAM.MSG.DELETE." + names.RunsStream()} {
			x.denied(t, subject, func(ctx context.Context) error {
				_, err := x.request(ctx, subject, map[string]any{"seq": 1})
				return err
			})
		}
		x.subDenied(t, names.RunsWildcard())
		x.subDenied(t, names.CancelWildcard())
		x.subDenied(t, names.NoticeWildcard())
		x.subDenied(t, "_INBOX.worker.>")
	})
}
