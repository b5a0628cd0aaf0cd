package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/foundryq/foundryq/gateway"
)

// A callback receiver: it knows its tenant, the callback_url it was
// registered with and the tenant's keys (two during a rotation), and
// takes a callback only if a v2 signature over all of them, the delivery
// id, event type, attempt, timestamp and body matches. Foundryq-Delivery-Id
// is then a trustworthy idempotency key.
func ExampleVerifier() {
	v := gateway.Verifier{
		Tenant: "acme",
		URL:    "https://hooks.acme.example/foundryq",
		Keys:   [][]byte{[]byte("acme-callback-key-2025-01")}, // from a secret store
	}
	receiver := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if err := v.Verify(r.Header, body, time.Now()); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		// ... record r.Header.Get(gateway.HeaderDeliveryID) as done, once ...
		w.WriteHeader(http.StatusNoContent)
	})

	// What the gateway sends (signed here with the same key, to show it).
	body := `{"run_id":"run_1","seq":12,"type":"run.completed","status":"completed"}`
	m := gateway.SignedCallback{Tenant: "acme", DeliveryID: "run_1:12", EventType: "run.completed", Attempt: 1,
		URL: v.URL, Timestamp: fmt.Sprint(time.Now().Unix()), Body: []byte(body)}
	send := func(deliveryID string) int {
		req := httptest.NewRequest("POST", v.URL, strings.NewReader(body))
		req.Header.Set(gateway.HeaderTimestamp, m.Timestamp)
		req.Header.Set(gateway.HeaderDeliveryID, deliveryID)
		req.Header.Set(gateway.HeaderEventType, m.EventType)
		req.Header.Set(gateway.HeaderAttempt, "1")
		req.Header.Set(gateway.HeaderSignatureV2, gateway.SignV2(v.Keys[0], m))
		rec := httptest.NewRecorder()
		receiver.ServeHTTP(rec, req)
		return rec.Code
	}
	fmt.Println("genuine:", send("run_1:12"))
	fmt.Println("replayed under another delivery id:", send("run_1:13"))
	// Output:
	// genuine: 204
	// replayed under another delivery id: 401
}
