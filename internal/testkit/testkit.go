// Package testkit is what the tests of several packages share: Eventually
// to wait for a condition, Buffer for output written by goroutines or
// processes while a test reads it, and Do to send an HTTP request with a
// JSON body. It imports nothing of the product, so that any test may use
// it, and nothing outside tests does.
package testkit

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Eventually polls cond until it holds, and fails the test (t.Fatalf,
// naming what and limit) if it does not within limit. It polls often at
// first (every millisecond, then less often up to every 20ms), so that a
// condition met soon costs no time and one met late costs little CPU.
func Eventually(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// Buffer is a bytes.Buffer safe for concurrent writers and readers: the
// output of a command, a subprocess or a logger that a test reads while
// they write. The zero value is ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// NewRequest builds an HTTP request with ctx, and fails the test if it
// cannot. body is sent as it is if it is a string or a []byte, as JSON
// otherwise, and not at all if it is nil; a body sets Content-Type
// application/json. header holds name, value pairs, set last (they may
// replace Content-Type).
func NewRequest(t testing.TB, ctx context.Context, method, url string, body any, header ...string) *http.Request {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req
}

// Do sends NewRequest's request with c and returns the response (the
// caller closes its body); it fails the test if the request gets none.
func Do(t testing.TB, ctx context.Context, c *http.Client, method, url string, body any, header ...string) *http.Response {
	t.Helper()
	resp, err := c.Do(NewRequest(t, ctx, method, url, body, header...))
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp
}
