package events

import (
	"fmt"

	"github.com/nats-io/nats.go"
)

// Headers a producer may set on a run request instead of the body fields
// fairness_key and priority, without touching the body. Workers from
// before these fields ignore headers they do not know, so headers are the
// form that works during a rolling upgrade (Client.Submit sends them so).
const (
	HeaderFairnessKey = "Foundryq-Fairness-Key"
	HeaderPriority    = "Foundryq-Priority"
)

// MaxFairnessKeyLen is the longest fairness key, in bytes.
const MaxFairnessKeyLen = 64

// DefaultFairnessKey is the fairness key of a run that names none: every
// such run shares it. (The gateway names the tenant instead.)
const DefaultFairnessKey = "default"

// Priority is a run's priority: PriorityHigh, PriorityNormal or PriorityLow.
type Priority string

// Priorities, highest first. The zero value means PriorityNormal.
const (
	PriorityHigh   Priority = "high"
	PriorityNormal Priority = "normal"
	PriorityLow    Priority = "low"
)

// Valid reports whether p is one of the three priorities.
func (p Priority) Valid() bool {
	return p == PriorityHigh || p == PriorityNormal || p == PriorityLow
}

// Rank orders priorities as workers take them: 0 high, 1 normal (and the
// zero value), 2 low.
func (p Priority) Rank() int {
	switch p {
	case PriorityHigh:
		return 0
	case PriorityLow:
		return 2
	default:
		return 1
	}
}

// ValidFairnessKey reports whether key matches [A-Za-z0-9_-]{1,64}, the
// rule of run ids and tenant names: a key is always one NATS subject token
// and a valid KV key.
func ValidFairnessKey(key string) bool {
	return len(key) >= 1 && len(key) <= MaxFairnessKeyLen && validToken(key)
}

// Fairness is a run's effective fairness key and priority.
type Fairness struct {
	Key      string   // never empty: DefaultFairnessKey when the request names none
	Priority Priority // never empty: PriorityNormal when the request names none
}

// FairnessOf resolves the effective fairness key and priority of a run
// request from its body (req, as decoded) and its message headers h (nil
// for none). A value given only in the body or only in a header is used;
// given in both, the two must be equal: a request whose body and header
// disagree is invalid (ErrFairnessConflict), since foundryq cannot tell
// which of the two producers' wishes is meant. A bad header value is as
// invalid as a bad body field. Every error is a *ValidationError.
func FairnessOf(req RunRequest, h nats.Header) (Fairness, error) {
	key, err := resolve("fairness_key", req.FairnessKey, HeaderFairnessKey, h, ErrBadFairnessKey, checkFairnessKey)
	if err != nil {
		return Fairness{}, err
	}
	prio, err := resolve("priority", string(req.Priority), HeaderPriority, h, ErrBadPriority, checkPriority)
	if err != nil {
		return Fairness{}, err
	}
	f := Fairness{Key: key, Priority: Priority(prio)}
	if f.Key == "" {
		f.Key = DefaultFairnessKey
	}
	if f.Priority == "" {
		f.Priority = PriorityNormal
	}
	return f, nil
}

// resolve returns the value of one setting given in the body (body, the
// field's name) and/or in header name of h.
func resolve(field, body, name string, h nats.Header, sentinel error, check func(string) string) (string, error) {
	vals := h.Values(name)
	if len(vals) == 0 {
		return body, nil
	}
	hfield := "header " + name
	if len(vals) > 1 {
		return "", invalid(hfield, sentinel, "given %d times, want once", len(vals))
	}
	if reason := check(vals[0]); reason != "" {
		return "", invalid(hfield, sentinel, "%s", reason)
	}
	if body != "" && body != vals[0] {
		return "", invalid(field, ErrFairnessConflict, "%q in the body but %q in header %s: give one, or the same in both",
			truncate(body), truncate(vals[0]), name)
	}
	return vals[0], nil
}

func checkFairnessKey(key string) string {
	if !ValidFairnessKey(key) {
		return fmt.Sprintf("%q must match [A-Za-z0-9_-]{1,%d}", truncate(key), MaxFairnessKeyLen)
	}
	return ""
}

func checkPriority(p string) string {
	if !Priority(p).Valid() {
		return fmt.Sprintf("%q is not one of \"high\", \"normal\" or \"low\"", truncate(p))
	}
	return ""
}
