package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Headers of a completion callback.
const (
	// HeaderSignature is "sha256=" and the hex HMAC-SHA256, keyed with the
	// callback secret, of the timestamp header's value, a ".", and the body.
	HeaderSignature = "Foundryq-Signature"
	// HeaderTimestamp is the Unix time (seconds) the request was signed at;
	// a receiver refuses old ones to stop replays.
	HeaderTimestamp = "Foundryq-Timestamp"
	// HeaderDeliveryID identifies the callback: "<run_id>:<seq of the
	// terminal event>". Deliveries are at least once: a receiver that
	// sees the same id twice has the same event twice.
	HeaderDeliveryID = "Foundryq-Delivery-Id"
	// HeaderAttempt is the delivery attempt, from 1.
	HeaderAttempt = "Foundryq-Attempt"
	// HeaderEventType is the terminal event's type.
	HeaderEventType = "Foundryq-Event-Type"
)

// Sign returns the Foundryq-Signature value of body signed at timestamp
// (Unix seconds, as sent in Foundryq-Timestamp).
func Sign(secret []byte, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Errors of VerifySignature.
var (
	ErrBadSignature = errors.New("gateway: callback signature does not match")
	ErrStaleRequest = errors.New("gateway: callback timestamp outside the tolerance")
)

// VerifySignature checks a callback a receiver got: the signature over the
// timestamp and body, and that the timestamp is within tolerance of now.
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
