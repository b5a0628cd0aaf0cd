package foundrytest

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Server is an emulator listening on a loopback port, in the spirit of
// httptest.Server.
type Server struct {
	h    *Handler
	srv  *http.Server
	url  string
	done sync.WaitGroup
	once sync.Once

	mu     sync.Mutex
	closed bool // no more listeners (ListenPlain)
}

// NewServer starts an emulator on 127.0.0.1 with a free port. It panics if
// it cannot listen or if cfg is invalid, like httptest.NewServer.
func NewServer(cfg Config) *Server {
	s, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		panic("foundrytest: " + err.Error())
	}
	return s
}

// Listen starts a Server on addr (host:port; port 0 picks a free one), as
// foundryq emulator and foundryq dev do. It serves plain HTTP: HTTP/1.1,
// and HTTP/2 to clients that speak it without TLS (prior knowledge).
func Listen(addr string, cfg Config) (*Server, error) {
	return listen(addr, cfg, nil)
}

// ListenTLS starts a Server on addr that serves HTTPS with cert, offering
// HTTP/2 and HTTP/1.1 (ALPN "h2", "http/1.1"), as an Azure endpoint does:
// a Go client negotiates HTTP/2 and carries many streams on one
// connection. cert must be valid for the host the clients dial (e.g.
// 127.0.0.1), and they must trust its issuer. URL is then
// "https://HOST:PORT"; ListenPlain adds a plain HTTP listener to the same
// emulator.
func ListenTLS(addr string, cfg Config, cert tls.Certificate) (*Server, error) {
	return listen(addr, cfg, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
}

func listen(addr string, cfg Config, tc *tls.Config) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	h := NewHandler(cfg)
	s := &Server{
		h: h,
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, Protocols: serverProtocols(), TLSConfig: tc,
			ErrorLog: log.New(debugWriter{h.cfg.Logger}, "", 0)},
		url: "http://" + ln.Addr().String(),
	}
	if tc != nil {
		s.url = "https://" + ln.Addr().String()
	}
	s.serve(ln, tc != nil)
	return s, nil
}

// serve serves ln (over TLS with overTLS) until Close.
func (s *Server) serve(ln net.Listener, overTLS bool) {
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		var err error
		if overTLS {
			// ServeTLS offers "h2" and "http/1.1" by ALPN, from
			// serverProtocols, with the certificate of TLSConfig.
			err = s.srv.ServeTLS(ln, "", "")
		} else {
			err = s.srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.h.cfg.Logger.Error().Err(err).Msg("foundrytest: serve")
		}
	}()
}

// ListenPlain serves the same emulator on a second address, over plain
// HTTP (HTTP/1.1, and HTTP/2 with prior knowledge, as Listen), and returns
// that listener's root URL ("http://HOST:PORT"). With ListenTLS it lets one
// emulator answer clients over HTTPS and over plain HTTP/1.1 alike: the
// same responses, records and Stats. Close stops it too.
func (s *Server) ListenPlain(addr string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", errors.New("foundrytest: ListenPlain after Close")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listen on %s: %w", addr, err)
	}
	s.serve(ln, false)
	return "http://" + ln.Addr().String(), nil
}

// debugWriter writes the http.Server's own messages (a client's failed TLS
// handshake, say) to the Config's Logger at debug level.
type debugWriter struct{ l zerolog.Logger }

func (w debugWriter) Write(p []byte) (int, error) {
	w.l.Debug().Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}

// serverProtocols are HTTP/1.1, HTTP/2 over TLS (negotiated by ALPN, for
// ListenTLS) and HTTP/2 without TLS (prior knowledge), for clients such as
// foundry.Config.CleartextHTTP2 that stand in for the HTTP/2 a TLS
// endpoint negotiates. A plain listener serves HTTP/1.1 and h2c only.
func serverProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

// URL is the server's root, e.g. "http://127.0.0.1:40123" (https:// with
// ListenTLS).
func (s *Server) URL() string { return s.url }

// BaseURL is the v1 API base URL of the Azure OpenAI resource form:
// URL()+"/openai/v1/".
func (s *Server) BaseURL() string { return s.url + "/openai/v1/" }

// ProjectBaseURL is the v1 API base URL of the Foundry project form:
// URL()+"/api/projects/"+project+"/openai/v1/". Both forms serve the same
// responses; with Config.EntraKeys they want tokens for different audiences.
func (s *Server) ProjectBaseURL(project string) string {
	return s.url + "/api/projects/" + project + "/openai/v1/"
}

// Throttle makes creates answer 429 for d; see Handler.Throttle.
func (s *Server) Throttle(d, retryAfter time.Duration) { s.h.Throttle(d, retryAfter) }

// FailCancels makes cancel calls answer 500 for d; see Handler.FailCancels.
func (s *Server) FailCancels(d time.Duration) { s.h.FailCancels(d) }

// HangCancels makes cancel calls hang, then answer 504, for d; see
// Handler.HangCancels.
func (s *Server) HangCancels(d time.Duration) { s.h.HangCancels(d) }

// Handler is the emulator behind the server.
func (s *Server) Handler() *Handler { return s.h }

// Close stops every generation, closes every connection and waits for all
// of the server's goroutines. It is idempotent.
func (s *Server) Close() {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.h.Close()
		_ = s.srv.Close()
		s.done.Wait()
		s.h.waitRequests()
	})
}

// Stats returns the emulator's counters; see Handler.Stats.
func (s *Server) Stats() Stats { return s.h.Stats() }

// Response returns the stored response object; see Handler.Response.
func (s *Server) Response(id string) (json.RawMessage, bool) { return s.h.Response(id) }

// Record returns the emulator's record of a response; see Handler.Record.
func (s *Server) Record(id string) (ResponseRecord, bool) { return s.h.Record(id) }

// Records returns the records for a run id; see Handler.Records.
func (s *Server) Records(runID string) []ResponseRecord { return s.h.Records(runID) }

// CreateRequests returns the create bodies received for a run id; see
// Handler.CreateRequests.
func (s *Server) CreateRequests(runID string) []json.RawMessage { return s.h.CreateRequests(runID) }
