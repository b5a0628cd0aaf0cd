package gateway_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/gateway"
	"github.com/foundryq/foundryq/internal/testkit"
)

// rawExchange writes req on a new connection to addr and reads until the
// gateway closes it or limit passes; it returns what came back and
// whether the gateway closed the connection within limit.
func rawExchange(t *testing.T, addr, req string, limit time.Duration) (string, bool) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(limit))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	_, err = io.Copy(&got, conn)
	return got.String(), err == nil // io.Copy ends without error at EOF only
}

// tokenGateway is a gateway with authentication: one tenant with tokens
// "token-a" and "token-b".
func tokenGateway(t *testing.T, e *env, cfg gateway.Config) *gw {
	t.Helper()
	nc, err := e.ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cfg.Tenants = []gateway.Tenant{{Name: "acme", Conn: nc, TokenSHA256: []string{gateway.HashToken("token-a"), gateway.HashToken("token-b")}}}
	return startGateway(t, cfg, nil)
}

// A body that trickles in is cut off after ReadTimeout (408, connection
// closed), with or without a token, and a connection that waits idle
// after its answer is closed after IdleTimeout.
func TestSlowBodyAndIdleConnection(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	cfg := gateway.Config{ReadTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}
	open := e.gateway(cfg)
	auth := tokenGateway(t, e, cfg)
	slow := func(addr, token string) string {
		req := "POST /v1/runs HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n"
		if token != "" {
			req += "Authorization: Bearer " + token + "\r\n"
		}
		return req + "\r\n{\"model\""
	}
	for _, c := range []struct {
		name, addr, token, want string
	}{
		{"open gateway", open.Addr(), "", "HTTP/1.1 408"},
		{"with a token", auth.Addr(), "token-a", "HTTP/1.1 408"},
		{"without a token", auth.Addr(), "", "HTTP/1.1 401"},
	} {
		start := time.Now()
		got, closed := rawExchange(t, c.addr, slow(c.addr, c.token), 15*time.Second)
		if !closed || !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: a slow body: closed %v after %s, got %q", c.name, closed, time.Since(start), got)
		}
	}
	got, closed := rawExchange(t, open.Addr(), "GET /healthz HTTP/1.1\r\nHost: "+open.Addr()+"\r\n\r\n", 15*time.Second)
	if !closed || !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Errorf("an idle connection after its answer: closed %v, got %q", closed, got)
	}
}

// An event stream is exempt from the write timeout of other answers: it
// outlives it while it keeps writing.
func TestStreamOutlivesWriteTimeout(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	g := e.gateway(gateway.Config{WriteTimeout: 200 * time.Millisecond, SSEHeartbeat: 50 * time.Millisecond})
	cr := g.create(t, runRequest(map[string]string{"emu_tokens": "40", "emu_token_ms": "30"}))
	s := g.stream(t, "/v1/runs/"+cr.RunID+"/events")
	start := time.Now()
	evs := s.readAll(t)
	if time.Since(start) < 400*time.Millisecond || text(evs) == "" {
		t.Fatalf("stream of %d events over %s", len(evs), time.Since(start))
	}
}

// Without authentication the gateway answers only its own host names
// (DNS rebinding); /healthz answers any.
func TestHostAllowList(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	g := e.gateway(gateway.Config{})
	_, port, _ := net.SplitHostPort(g.Addr())
	do := func(path, host string) int {
		req, _ := http.NewRequest("GET", g.url+path, nil)
		req.Host = host
		resp, err := g.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for host, want := range map[string]int{
		"attacker.example:" + port: http.StatusForbidden, "attacker.example": http.StatusForbidden,
		"127.0.0.1:" + port: http.StatusOK, "localhost:" + port: http.StatusOK, "LOCALHOST.": http.StatusOK, "[::1]:" + port: http.StatusOK,
	} {
		if got := do("/v1/runs", host); got != want {
			t.Errorf("Host %s: %d, want %d", host, got, want)
		}
	}
	if got := do("/healthz", "attacker.example"); got != http.StatusOK {
		t.Errorf("/healthz with another host: %d", got)
	}
	// An operator's list replaces the defaults.
	listed := e.gateway(gateway.Config{AllowedHosts: []string{"gw.internal"}})
	for host, want := range map[string]int{"gw.internal:443": http.StatusOK, "127.0.0.1": http.StatusForbidden} {
		req, _ := http.NewRequest("GET", listed.url+"/v1/runs", nil)
		req.Host = host
		resp, err := listed.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("listed: Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}
}

// A POST from a foreign origin is refused even without a preflight (a
// text/plain or form POST a browser sends as it is); same-origin, listed
// origins and requests without browser headers pass. Bodies and their
// Content-Type must be JSON.
func TestOriginAndContentType(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	g := e.gateway(gateway.Config{CORSOrigins: []string{"https://app.example.com"}})
	cancel := "/v1/runs/victim/cancel"
	for _, c := range []struct {
		name string
		body any
		hdr  []string
		want int
	}{
		{"foreign origin, JSON", `{"reason":"x"}`, []string{"Origin", "https://evil.example", "Content-Type", "application/json"}, http.StatusForbidden},
		{"foreign origin, text/plain", "", []string{"Origin", "https://evil.example", "Content-Type", "text/plain"}, http.StatusForbidden},
		{"cross-site fetch metadata", "", []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"null origin", "", []string{"Origin", "null"}, http.StatusForbidden},
		{"same origin", "", []string{"Origin", g.url}, http.StatusNotFound},
		{"listed origin", "", []string{"Origin", "https://app.example.com"}, http.StatusNotFound},
		{"no browser headers", "", nil, http.StatusNotFound},
		{"text/plain, empty", "", []string{"Content-Type", "text/plain"}, http.StatusUnsupportedMediaType},
		{"form", "reason=x", []string{"Content-Type", "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType},
		{"JSON without its type", `{"reason":"x"}`, []string{"Content-Type", ""}, http.StatusUnsupportedMediaType},
	} {
		r := g.do(t, "POST", cancel, c.body, c.hdr...)
		if r.status != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, r.status, r.body, c.want)
		} else if c.want != http.StatusNotFound {
			r.apiError(t)
		}
	}
	r := g.do(t, "POST", "/v1/runs", runRequest(nil), "Origin", "https://evil.example")
	if r.status != http.StatusForbidden {
		t.Errorf("create from a foreign origin: %d %s", r.status, r.body)
	}
	if r := g.do(t, "GET", "/v1/runs", nil, "Origin", "https://evil.example"); r.status != http.StatusOK {
		t.Errorf("GET from a foreign origin (the browser withholds the answer): %d", r.status)
	}
}

// Each token has its own request rate: past it, 429 with Retry-After,
// while another token goes on.
func TestRateLimitPerToken(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	g := tokenGateway(t, e, gateway.Config{RateLimit: 0.01, RateBurst: 2})
	for i := range 2 {
		if r := g.do(t, "GET", "/v1/runs", nil, "Authorization", "Bearer token-a"); r.status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i+1, r.status, r.body)
		}
	}
	r := g.do(t, "GET", "/v1/runs", nil, "Authorization", "Bearer token-a")
	if ae := r.apiError(t); r.status != http.StatusTooManyRequests || ae.Code != gateway.CodeTooManyRequests {
		t.Fatalf("third request: %d %+v", r.status, ae)
	}
	if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 50 {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	if r := g.do(t, "GET", "/v1/runs", nil, "Authorization", "Bearer token-b"); r.status != http.StatusOK {
		t.Fatalf("another token: %d %s", r.status, r.body)
	}
}

// Each token has a bound on its open event streams: one more is 429
// with Retry-After; a slot comes back when a stream ends.
func TestStreamLimitPerToken(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	g := tokenGateway(t, e, gateway.Config{MaxStreamsPerToken: 2})
	auth := []string{"Authorization", "Bearer token-a"}
	r := g.do(t, "POST", "/v1/runs", runRequest(map[string]string{"emu_tokens": "100000", "emu_token_ms": "20"}), auth...)
	var cr gateway.CreateResponse
	r.decode(t, &cr)
	path := "/v1/runs/" + cr.RunID + "/events"
	s1 := g.stream(t, path, auth...)
	g.stream(t, path, auth...)
	_, status, body := g.openStream(t, path, auth...)
	if status != http.StatusTooManyRequests || !strings.Contains(string(body), gateway.CodeTooManyRequests) {
		t.Fatalf("third stream: %d %s", status, body)
	}
	g.stream(t, path, "Authorization", "Bearer token-b")
	s1.close()
	testkit.Eventually(t, 30*time.Second, "a slot back after a stream ended", func() bool {
		s, status, _ := g.openStream(t, path, auth...)
		if s != nil {
			s.close()
		}
		return status == http.StatusOK
	})
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	_, _ = e.client.Cancel(ctx, cr.RunID, "test over")
}
