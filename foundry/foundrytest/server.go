package foundrytest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server is an emulator listening on a loopback port, in the spirit of
// httptest.Server.
type Server struct {
	h    *Handler
	ln   net.Listener
	srv  *http.Server
	url  string
	done sync.WaitGroup
	once sync.Once
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
// foundryq emulator and foundryq dev do.
func Listen(addr string, cfg Config) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	h := NewHandler(cfg)
	s := &Server{
		h:   h,
		ln:  ln,
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, Protocols: serverProtocols()},
		url: "http://" + ln.Addr().String(),
	}
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			h.cfg.Logger.Error().Err(err).Msg("foundrytest: serve")
		}
	}()
	return s, nil
}

// serverProtocols are HTTP/1.1 and HTTP/2 without TLS (prior knowledge),
// for clients such as foundry.Config.CleartextHTTP2 that stand in for the
// HTTP/2 a TLS endpoint negotiates.
func serverProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

// URL is the server's root, e.g. "http://127.0.0.1:40123".
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
