package testkit

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fatalTB records a Fatalf instead of ending the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }

func TestEventually(t *testing.T) {
	var n atomic.Int32
	Eventually(t, 10*time.Second, "the third poll", func() bool { return n.Add(1) == 3 })

	f := &fatalTB{TB: t}
	Eventually(f, 30*time.Millisecond, "never", func() bool { return f.msg != "" })
	if f.msg != "timed out after 30ms waiting for never" {
		t.Fatalf("Fatalf(%q)", f.msg)
	}
}

// errorsTB records every Errorf instead of failing the test.
type errorsTB struct {
	testing.TB
	msgs []string
}

func (e *errorsTB) Helper() {}

func (e *errorsTB) Errorf(format string, args ...any) {
	e.msgs = append(e.msgs, fmt.Sprintf(format, args...))
}

func TestSameSet(t *testing.T) {
	e := &errorsTB{TB: t}
	SameSet(e, []string{"a", "b"}, []string{"b", "a"}, "missing %s", "extra %s")
	if len(e.msgs) != 0 {
		t.Fatalf("equal sets reported %q", e.msgs)
	}
	SameSet(e, []string{"a", "c"}, []string{"a", "b"}, "missing %s", "extra %s")
	if want := []string{"missing b", "extra c"}; !slices.Equal(e.msgs, want) {
		t.Fatalf("reported %q, want %q", e.msgs, want)
	}
}

func TestBuffer(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("x"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if n := len(b.String()); n != 400 {
		t.Fatalf("%d bytes", n)
	}
}

func TestDo(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %q %q %s", r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("X-Key"), body)
	}))
	defer srv.Close()
	for _, tt := range []struct {
		body   any
		header []string
		want   string
	}{
		{nil, nil, `GET /p "" "" `},
		{map[string]int{"a": 1}, []string{"X-Key", "k"}, `GET /p "application/json" "k" {"a":1}`},
		{"raw", []string{"Content-Type", "text/plain"}, `GET /p "text/plain" "" raw`},
		{[]byte("bytes"), nil, `GET /p "application/json" "" bytes`},
	} {
		resp := Do(t, context.Background(), srv.Client(), "GET", srv.URL+"/p", tt.body, tt.header...)
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(got) != tt.want {
			t.Errorf("body %v, header %v: server saw %s, want %s", tt.body, tt.header, got, tt.want)
		}
	}
}

func TestFetch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, "%s %s", r.Method, body)
	}))
	defer srv.Close()
	code, body := Fetch(t, context.Background(), srv.Client(), "POST", srv.URL, `{"a":1}`)
	if code != http.StatusAccepted || body != `POST {"a":1}` {
		t.Fatalf("Fetch = %d %q", code, body)
	}
}

func TestWaitHTTP(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			http.Error(w, "not ready: nats", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	if body := WaitHTTP(t, 10*time.Second, srv.URL, http.StatusOK, "ok"); body != "ok" || calls.Load() != 3 {
		t.Fatalf("WaitHTTP = %q after %d calls", body, calls.Load())
	}

	// The failure names the server's last answer, even when the last
	// request starts just before the limit and the server takes its time.
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(30 * time.Millisecond)
		fmt.Fprint(w, "ok")
	}))
	defer slow.Close()
	f := &fatalTB{TB: t}
	WaitHTTP(f, time.Second, slow.URL, http.StatusTeapot, "")
	if want := fmt.Sprintf(`GET %s: 200 "ok" after 1s, want 418 with ""`, slow.URL); f.msg != want {
		t.Fatalf("Fatalf(%q), want %q", f.msg, want)
	}
}
