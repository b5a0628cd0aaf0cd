package events

import (
	"crypto/rand"
	"encoding/base32"
	"strings"
)

var runIDEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// NewRunID returns a fresh random run id: "run_" followed by 26 lowercase
// base32 characters (128 random bits).
func NewRunID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "run_" + strings.ToLower(runIDEncoding.EncodeToString(b[:]))
}
