package consumer_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/internal/tlstest"
)

// Permanent upstream failures (issue 24): a create that could never be
// sent, or that Foundry refused for a reason a retry does not fix, ends
// the run at once with a code that says which, never upstream_lost.

// unresolvable is a Foundry client whose dialer answers every dial as a
// resolver does for a name that does not exist, without asking one; dials
// counts the dials.
func unresolvable(t *testing.T, dials *atomic.Int32) *foundry.Client {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(_ context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			host, _, _ := net.SplitHostPort(addr)
			return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}}
		},
	}}
	c, err := foundry.New(foundry.Config{BaseURL: "https://foundry-typo.invalid/openai/v1/", APIKey: "k", HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCreateHostNotFoundEndsUnreachable(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var dials atomic.Int32
	e.up = unresolvable(t, &dials)
	e.startWorker(consumer.Config{WorkerID: "dns", RetryDelay: 10 * time.Millisecond})
	evs := e.endRun("dns-1", nil)
	err := failure(t, evs, events.CodeUpstreamUnreachable)
	if !strings.Contains(err.Message, "foundry-typo.invalid") {
		t.Errorf("message %q does not name the host", err.Message)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("the create was tried %d times, want 1", n)
	}
}

func TestCreateUntrustedCertificateEndsTLSError(t *testing.T) {
	t.Parallel()
	e := setup(t)
	certs := tlstest.New(t)
	var hits atomic.Int32
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		http.Error(w, "must not be reached", http.StatusInternalServerError)
	}))
	cert, err := tls.LoadX509KeyPair(certs.ServerCert, certs.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	hs.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	hs.StartTLS()
	t.Cleanup(hs.Close)
	pem, err := os.ReadFile(certs.OtherCA) // a CA that did not sign the server's certificate
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c, err := foundry.New(foundry.Config{BaseURL: hs.URL + "/openai/v1/", APIKey: "k",
		HTTPClient: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}})
	if err != nil {
		t.Fatal(err)
	}
	e.up = c
	e.startWorker(consumer.Config{WorkerID: "tls", RetryDelay: 10 * time.Millisecond})
	evs := e.endRun("tls-1", nil)
	ferr := failure(t, evs, events.CodeUpstreamTLS)
	if !strings.Contains(ferr.Message, "certificate") {
		t.Errorf("message %q does not say what failed", ferr.Message)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d requests reached the server", n)
	}
}

func TestCreateDeploymentNotFound(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "nodeploy", RetryDelay: 10 * time.Millisecond})
	evs := e.endRun("nodeploy-1", map[string]string{"emu_create_status": "404"})
	err := failure(t, evs, events.CodeDeploymentNotFound)
	if !strings.Contains(err.Message, "deployment") {
		t.Errorf("message %q", err.Message)
	}
}

// 401 and 403 on a create end auth_error at once: a retried attempt would
// end attempts_exhausted.
func TestCreateAuthRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "auth", RetryDelay: 10 * time.Millisecond})
	for _, status := range []string{"401", "403"} {
		evs := e.endRun("auth-"+status, map[string]string{"emu_create_status": status})
		failure(t, evs, events.CodeAuthError)
	}
}

// CheckUpstream: a failed check makes Ready say "upstream: ..." and is
// run again while it fails; once a check passes the worker is ready.
func TestReadyReportsUpstreamCheck(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := e.startWorker(consumer.Config{WorkerID: "upcheck", ReadyCheckInterval: 50 * time.Millisecond})
	waitReady(t, w.Worker.Worker, "the worker to be ready", isReady)

	bad, err := foundry.New(foundry.Config{BaseURL: e.emu.BaseURL(), APIKey: "wrong"})
	if err != nil {
		t.Fatal(err)
	}
	var fixed atomic.Bool
	var calls atomic.Int32
	check := func(ctx context.Context) error {
		calls.Add(1)
		if fixed.Load() {
			return e.up.Check(ctx)
		}
		return bad.Check(ctx)
	}
	if err := w.Worker.Worker.CheckUpstream(testCtx(t), check); !errors.Is(err, foundry.ErrAuth) {
		t.Fatalf("CheckUpstream with a wrong key: %v, want ErrAuth", err)
	}
	got := waitReady(t, w.Worker.Worker, "not ready: upstream", notReadyWith("upstream: "))
	if !strings.Contains(got.Error(), "401") || strings.Contains(got.Error(), "\n") {
		t.Errorf("reason %q does not name the 401 on one line", got)
	}
	fixed.Store(true)
	waitReady(t, w.Worker.Worker, "ready once the check passes", isReady)
	n := calls.Load()
	if n < 2 {
		t.Errorf("check ran %d times, want it run again while it failed", n)
	}
	for range 3 {
		if err := w.Worker.Worker.Ready(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if calls.Load() != n {
		t.Errorf("a check that passed ran again")
	}

	var dials atomic.Int32
	dns := unresolvable(t, &dials)
	w2 := e.startWorker(consumer.Config{WorkerID: "upcheck-dns", ReadyCheckInterval: 50 * time.Millisecond})
	if err := w2.Worker.Worker.CheckUpstream(testCtx(t), dns.Check); !errors.Is(err, foundry.ErrHostNotFound) {
		t.Fatalf("CheckUpstream of a host that does not resolve: %v", err)
	}
	waitReady(t, w2.Worker.Worker, "not ready: upstream host", notReadyWith("foundry-typo.invalid"))
}
