// Package testkit is what the tests of several packages share: Eventually
// to wait for a condition, Buffer for output written by goroutines or
// processes while a test reads it, Do and Fetch to send an HTTP request
// with a JSON body, WaitHTTP to wait for an HTTP endpoint's answer,
// SameSet to compare what a document lists with what the code has,
// Fill and FillStore to fill a JetStream store, FreePorts for loopback
// ports to listen on, and CPUTime for a benchmark's CPU per op. It imports nothing of the
// product, so that any test may use it, and nothing outside tests does.
package testkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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

// SameSet reports (t.Errorf) every element of want that got lacks, with
// missing, and every element of got that want lacks, with extra: each a
// format taking the element, so that both directions of a mismatch
// between a document and the code are named.
func SameSet(t testing.TB, got, want []string, missing, extra string) {
	t.Helper()
	for _, s := range want {
		if !slices.Contains(got, s) {
			t.Errorf(missing, s)
		}
	}
	for _, s := range got {
		if !slices.Contains(want, s) {
			t.Errorf(extra, s)
		}
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

// Fetch sends NewRequest's request with c and returns the response's
// status and whole body; it fails the test if the request gets no
// response or its body cannot be read.
func Fetch(t testing.TB, ctx context.Context, c *http.Client, method, url string, body any, header ...string) (int, string) {
	t.Helper()
	resp := Do(t, ctx, c, method, url, body, header...)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the body: %v", method, url, err)
	}
	return resp.StatusCode, string(b)
}

// WaitHTTP polls url with GET until it answers code with a body that
// contains want, and returns that body; it fails the test, with the last
// answer (or error), if that does not happen within limit. Each request
// is bounded by 5s, and given at least 1s even near the limit: a last
// request cut short by the limit would report its own timeout instead of
// what the server answers.
func WaitHTTP(t testing.TB, limit time.Duration, url string, code int, want string) string {
	t.Helper()
	deadline := time.Now().Add(limit)
	pause := 5 * time.Millisecond
	for {
		got, body := tryGet(url, min(5*time.Second, max(time.Until(deadline), time.Second)))
		if got == code && strings.Contains(body, want) {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %q after %s, want %d with %q", url, got, body, limit, code, want)
			return body // for a t whose Fatalf returns
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// tryGet returns the status and body of url, or 0 and the error.
func tryGet(url string, timeout time.Duration) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode, string(b)
}

// Fill publishes chunk-sized messages on subject (a stream must capture
// it) until JetStream refuses one, and returns that refusal; after limit
// bytes without a refusal it returns an error that says so. For tests of
// a full store: a stream at its max_bytes, or the server's store used up.
func Fill(ctx context.Context, js jetstream.JetStream, subject string, chunk, limit int) error {
	payload := bytes.Repeat([]byte("f"), chunk)
	for n := 0; n < limit; n += chunk {
		if _, err := js.Publish(ctx, subject, payload); err != nil {
			return err
		}
	}
	return fmt.Errorf("testkit: stored %d bytes on %s without a refusal", limit, subject)
}

// FillStore creates the stream FILLER (subject "filler") and fills it
// until JetStream refuses a write (Fill, in chunks of 256 KiB, at most
// 1 GiB), failing the test otherwise. It returns the stream, whose Purge
// frees the space.
func FillStore(t testing.TB, ctx context.Context, js jetstream.JetStream) jetstream.Stream {
	t.Helper()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler"}})
	if err != nil {
		t.Fatal(err)
	}
	err = Fill(ctx, js, "filler", 256<<10, 1<<30)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("fill the store: %v", err)
	}
	t.Logf("store full: %v", err)
	return s
}

// FreePorts returns n distinct loopback ports that were free a moment ago
// (all held at once: the kernel may hand out a port again as soon as it
// is free).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// CPUTime is the user plus system CPU time this process has used: a
// benchmark reports it per op when its goroutines wait on I/O, where the
// wall time per op measures round trips rather than work.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
