package foundry

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestCleartextHTTP2Client: the default client with CleartextHTTP2 speaks
// HTTP/2 without TLS to an http:// server that accepts it, and the option
// is refused for an https endpoint.
func TestCleartextHTTP2Client(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: p, ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	for _, tc := range []struct {
		h2c  bool
		want string
	}{{true, "HTTP/2.0"}, {false, "HTTP/1.1"}} {
		hc := defaultHTTPClient(tc.h2c)
		resp, err := hc.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		hc.CloseIdleConnections()
		if string(body) != tc.want {
			t.Errorf("CleartextHTTP2 %v: the server saw %s, want %s", tc.h2c, body, tc.want)
		}
	}
	if _, err := New(Config{BaseURL: "https://res.openai.azure.com/openai/v1/", APIKey: "k", CleartextHTTP2: true}); err == nil {
		t.Error("CleartextHTTP2 accepted with an https endpoint")
	}
}
