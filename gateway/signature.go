package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Headers of a completion callback.
const (
	// HeaderSignature is "sha256=" and the hex HMAC-SHA256, keyed with the
	// gateway-wide callback secret (CallbackConfig.Secret), of the
	// timestamp header's value, a ".", and the body. It covers neither the
	// tenant nor the other headers: kept for the receivers written before
	// HeaderSignatureV2, and sent only while that secret is set.
	HeaderSignature = "Foundryq-Signature"
	// HeaderSignatureV2 is "v2=" and the hex HMAC-SHA256, keyed with the
	// tenant's own callback key, of the string SignV2 builds: tenant,
	// delivery id, event type, attempt, URL, timestamp and body. During a
	// key rotation there is one "v2=" per active key, comma-separated.
	// Sent when the tenant has callback keys (Tenant.CallbackSecretFiles).
	HeaderSignatureV2 = "Foundryq-Signature-V2"
	// HeaderTimestamp is the Unix time (seconds) the request was signed at;
	// a receiver refuses old ones to stop replays.
	HeaderTimestamp = "Foundryq-Timestamp"
	// HeaderDeliveryID identifies the callback: "<run_id>:<seq of the
	// terminal event>". Deliveries are at least once: a receiver that
	// sees the same id twice has the same event twice. Covered by v2.
	HeaderDeliveryID = "Foundryq-Delivery-Id"
	// HeaderAttempt is the delivery attempt, from 1. Covered by v2.
	HeaderAttempt = "Foundryq-Attempt"
	// HeaderEventType is the terminal event's type. Covered by v2.
	HeaderEventType = "Foundryq-Event-Type"
	// HeaderTenant names the tenant the callback is for (informative: a
	// receiver verifies with the tenant name it expects, not this one).
	HeaderTenant = "Foundryq-Tenant"
)

// Sign returns the Foundryq-Signature value of body signed at timestamp
// (Unix seconds, as sent in Foundryq-Timestamp): the first signature
// version, over timestamp and body only. See SignV2.
func Sign(secret []byte, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// SignedCallback is everything a v2 signature covers.
type SignedCallback struct {
	Tenant     string // the tenant's name (Tenant.Name)
	DeliveryID string // Foundryq-Delivery-Id
	EventType  string // Foundryq-Event-Type
	Attempt    int    // Foundryq-Attempt
	URL        string // the callback_url exactly as submitted
	Timestamp  string // Foundryq-Timestamp
	Body       []byte // the raw body
}

// signedStringV2 is the string a v2 signature is the HMAC of: the lines
//
//	foundryq-callback-v2
//	<tenant>
//	<delivery id>
//	<event type>
//	<attempt>
//	<url>
//	<timestamp>
//
// each ended by "\n", then the raw body. None of the first values can hold
// a newline (header values and URLs cannot), so the string is unambiguous.
func signedStringV2(m SignedCallback) []byte {
	var b strings.Builder
	for _, s := range []string{"foundryq-callback-v2", m.Tenant, m.DeliveryID, m.EventType, strconv.Itoa(m.Attempt), m.URL, m.Timestamp} {
		b.WriteString(s)
		b.WriteByte('\n')
	}
	b.Write(m.Body)
	return []byte(b.String())
}

// SignV2 returns one "v2=<hex>" signature of m with key.
func SignV2(key []byte, m SignedCallback) string {
	mac := hmac.New(sha256.New, key)
	mac.Write(signedStringV2(m))
	return "v2=" + hex.EncodeToString(mac.Sum(nil))
}

// Errors of VerifySignature and Verifier.Verify.
var (
	ErrBadSignature = errors.New("gateway: callback signature does not match")
	ErrStaleRequest = errors.New("gateway: callback timestamp outside the tolerance")
)

// VerifySignature checks a callback a receiver got with the first
// signature version (Foundryq-Signature: timestamp and body only, with the
// gateway-wide secret): the signature, and that the timestamp is within
// tolerance of now. New receivers use Verifier, which checks v2.
func VerifySignature(secret []byte, h http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	ts := h.Get(HeaderTimestamp)
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrBadSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrStaleRequest
	}
	got := strings.TrimSpace(h.Get(HeaderSignature))
	if !hmac.Equal([]byte(got), []byte(Sign(secret, ts, body))) {
		return ErrBadSignature
	}
	return nil
}

// DefaultVerifyTolerance is Verifier.Tolerance's default.
const DefaultVerifyTolerance = 5 * time.Minute

// Verifier checks v2 callbacks (HeaderSignatureV2) for one receiver: what
// the receiver knows of itself, never what the request claims.
type Verifier struct {
	// Tenant is the tenant whose callbacks this receiver takes. Required.
	Tenant string
	// URL is the callback_url this receiver was registered with, exactly
	// as submitted (the gateway signs that string). Required.
	URL string
	// Keys are the tenant's active callback keys: one, or two while they
	// are rotated. A callback signed with any of them passes.
	Keys [][]byte
	// Tolerance is how far Foundryq-Timestamp may be from now. Default
	// DefaultVerifyTolerance (5m).
	Tolerance time.Duration
}

// Verify checks a callback: a v2 signature with one of the keys over the
// tenant, URL, delivery id, event type, attempt, timestamp and body; the
// timestamp within tolerance of now; and the delivery id and event type
// headers agreeing with the body (run_id:seq, type). It returns
// ErrStaleRequest for an old timestamp and ErrBadSignature otherwise.
func (v Verifier) Verify(h http.Header, body []byte, now time.Time) error {
	tol := v.Tolerance
	if tol == 0 {
		tol = DefaultVerifyTolerance
	}
	ts := h.Get(HeaderTimestamp)
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || v.Tenant == "" || v.URL == "" {
		return ErrBadSignature
	}
	attempt, err := strconv.Atoi(h.Get(HeaderAttempt))
	if err != nil || attempt < 1 {
		return ErrBadSignature
	}
	m := SignedCallback{Tenant: v.Tenant, DeliveryID: h.Get(HeaderDeliveryID), EventType: h.Get(HeaderEventType),
		Attempt: attempt, URL: v.URL, Timestamp: ts, Body: body}
	ok := false
	for _, sig := range strings.Split(h.Get(HeaderSignatureV2), ",") {
		sig = strings.TrimSpace(sig)
		for _, k := range v.Keys {
			if len(k) > 0 && hmac.Equal([]byte(sig), []byte(SignV2(k, m))) {
				ok = true
			}
		}
	}
	if !ok {
		return ErrBadSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tol || d < -tol {
		return ErrStaleRequest
	}
	var ev struct {
		RunID string `json:"run_id"`
		Seq   uint64 `json:"seq"`
		Type  string `json:"type"`
	}
	if json.Unmarshal(body, &ev) != nil || ev.Type != m.EventType || ev.RunID+":"+strconv.FormatUint(ev.Seq, 10) != m.DeliveryID {
		return ErrBadSignature
	}
	return nil
}
