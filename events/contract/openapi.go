package contract

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// HTTPChecker checks HTTP exchanges with the gateway against its OpenAPI
// document (kin-openapi's openapi3filter): every response must be one the
// document describes for its route and status, with a valid body; a
// request the gateway accepted (2xx) must be valid too (a test may send a
// bad one on purpose: the gateway then refuses it, and the refusal is
// checked). Bodies that are wire contract messages (run states, cancel
// replies, the events of an event stream) are also checked by the Set, so
// that an undeclared property fails and every property is recorded.
type HTTPChecker struct {
	doc    *openapi3.T
	router routers.Router
	set    *Set

	mu       sync.Mutex
	errs     []error
	n        int
	skipRuns map[string]bool
}

// NewHTTPChecker loads the OpenAPI document doc (JSON or YAML); set (may
// be nil) checks the wire contract's bodies.
func NewHTTPChecker(doc []byte, set *Set) (*HTTPChecker, error) {
	loader := openapi3.NewLoader()
	t, err := loader.LoadFromData(doc)
	if err != nil {
		return nil, fmt.Errorf("contract: load OpenAPI: %w", err)
	}
	if err := t.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("contract: OpenAPI document: %w", err)
	}
	t.Servers = nil // match on paths: the tests' gateways listen on any port
	r, err := legacy.NewRouter(t)
	if err != nil {
		return nil, fmt.Errorf("contract: OpenAPI router: %w", err)
	}
	return &HTTPChecker{doc: t, router: r, set: set}, nil
}

// Transport wraps next (nil: http.DefaultTransport) so that every exchange
// through it is checked.
func (c *HTTPChecker) Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &checkingTransport{c: c, next: next}
}

// CheckHTTPT returns an HTTPChecker with the embedded schemas for a test:
// at its end, the test fails with every mismatch.
func CheckHTTPT(t testing.TB, doc []byte) *HTTPChecker {
	t.Helper()
	set, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewHTTPChecker(doc, set)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, err := range c.Errors() {
			t.Errorf("contract: %v", err)
		}
	})
	return c
}

// IgnoreRun stops checking the exchanges about run runID (/v1/runs/ID...):
// for a test whose run's events are made by hand, off contract on purpose.
func (c *HTTPChecker) IgnoreRun(runID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.skipRuns == nil {
		c.skipRuns = map[string]bool{}
	}
	c.skipRuns[runID] = true
}

func (c *HTTPChecker) ignored(req *http.Request) bool {
	rest, ok := strings.CutPrefix(req.URL.Path, "/v1/runs/")
	if !ok {
		return false
	}
	id, _, _ := strings.Cut(rest, "/")
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.skipRuns[id]
}

// Errors returns the mismatches found so far.
func (c *HTTPChecker) Errors() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.errs...)
}

// Checked is the number of responses checked so far.
func (c *HTTPChecker) Checked() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *HTTPChecker) fail(req *http.Request, format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, fmt.Errorf("%s %s: %s", req.Method, req.URL.Path, fmt.Sprintf(format, args...)))
}

type checkingTransport struct {
	c    *HTTPChecker
	next http.RoundTripper
}

func (t *checkingTransport) CloseIdleConnections() {
	if ci, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

func (t *checkingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody {
		var err error
		if reqBody, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(reqBody)), nil }
	}
	resp, err := t.next.RoundTrip(req)
	c := t.c
	// A CORS preflight is not an operation of the API (docs/gateway.md
	// describes CORS).
	if err != nil || req.Method == http.MethodOptions || c.ignored(req) {
		return resp, err
	}
	route, params, ferr := c.router.FindRoute(req)
	if ferr != nil {
		if resp.StatusCode < 400 {
			c.fail(req, "answered %d on a route the OpenAPI document does not have (%v)", resp.StatusCode, ferr)
		}
		return resp, nil
	}
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	opts := &openapi3filter.Options{
		AuthenticationFunc:      openapi3filter.NoopAuthenticationFunc,
		IncludeResponseStatus:   true,
		MultiError:              true,
		SchemaValidationOptions: []openapi3.SchemaValidationOption{openapi3.EnableJSONSchema2020()},
	}
	vreq := req.Clone(context.Background())
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: opts}
	if resp.StatusCode < 300 {
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			c.fail(req, "the gateway accepted a request the OpenAPI document refuses: %v", oneLine(err))
		}
		c.checkRequestContract(req, route, reqBody)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		// An event stream (checked frame by frame as the test reads it) or
		// a console file: the status and the content type are checked.
		noBody := *opts
		noBody.ExcludeResponseBody = true
		if err := openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
			RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(strings.NewReader("")), Options: &noBody,
		}); err != nil {
			c.fail(req, "response %d: %v", resp.StatusCode, oneLine(err))
		}
		if strings.HasPrefix(ct, "text/event-stream") {
			resp.Body = &sseChecker{ReadCloser: resp.Body, c: c, req: req}
		}
		return resp, nil
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		return resp, nil // the test sees the error as it reads
	}
	if err := openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(body)), Options: opts,
	}); err != nil {
		c.fail(req, "response %d %.200q: %v", resp.StatusCode, body, oneLine(err))
	}
	c.checkResponseContract(req, route, resp.StatusCode, body)
	return resp, nil
}

// checkRequestContract checks an accepted request body that is a wire
// contract message.
func (c *HTTPChecker) checkRequestContract(req *http.Request, route *routers.Route, body []byte) {
	if c.set == nil || len(body) == 0 {
		return
	}
	name := map[string]string{"cancelRun": "cancel-request", "answerRun": "input-answer"}[route.Operation.OperationID]
	if name == "" {
		return
	}
	if err := c.set.ValidateJSON(name, body); err != nil {
		c.fail(req, "request: %v", err)
	}
}

// checkResponseContract checks a response body that is (or holds) wire
// contract messages.
func (c *HTTPChecker) checkResponseContract(req *http.Request, route *routers.Route, status int, body []byte) {
	if c.set == nil || status != http.StatusOK {
		return
	}
	switch route.Operation.OperationID {
	case "getRun":
		// A run's state, and while it is queued where it waits ("queue").
		var run map[string]json.RawMessage
		if err := json.Unmarshal(body, &run); err != nil {
			c.fail(req, "response: %v", err)
			return
		}
		if q, ok := run["queue"]; ok {
			if err := c.set.ValidateJSON("queue-position", q); err != nil {
				c.fail(req, "response: queue: %v", err)
			}
			delete(run, "queue")
			body, _ = json.Marshal(run)
		}
		if err := c.set.ValidateJSON("run-state", body); err != nil {
			c.fail(req, "response: %v", err)
		}
	case "cancelRun":
		if err := c.set.ValidateJSON("cancel-reply", body); err != nil {
			c.fail(req, "response: %v", err)
		}
	case "listRuns":
		var list struct{ Runs []json.RawMessage }
		if err := json.Unmarshal(body, &list); err != nil {
			c.fail(req, "response: %v", err)
			return
		}
		for _, st := range list.Runs {
			if err := c.set.ValidateJSON("run-state", st); err != nil {
				c.fail(req, "response: %v", err)
			}
		}
	}
}

// sseChecker checks each complete frame of an event stream as the test
// reads it: data of a run event frame must be a valid run event of the
// frame's type; of an error frame, an error body.
type sseChecker struct {
	io.ReadCloser
	c       *HTTPChecker
	req     *http.Request
	pending []byte
}

func (s *sseChecker) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	s.pending = append(s.pending, p[:n]...)
	for {
		i := bytes.Index(s.pending, []byte("\n\n"))
		if i < 0 {
			break
		}
		s.frame(s.pending[:i])
		s.pending = s.pending[i+2:]
	}
	return n, err
}

func (s *sseChecker) frame(f []byte) {
	var event, data string
	sc := bufio.NewScanner(bytes.NewReader(f))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data += strings.TrimPrefix(line, "data: ")
		}
	}
	if data == "" {
		return // a comment (heartbeat)
	}
	if event == "error" {
		if !bytes.Contains([]byte(data), []byte(`"error"`)) {
			s.c.fail(s.req, "event stream: error frame without an error object: %s", data)
		}
		return
	}
	if s.c.set == nil {
		return
	}
	if err := s.c.set.ValidateJSON("event-"+event, []byte(data)); err != nil {
		s.c.fail(s.req, "event stream frame %q: %v", event, err)
	}
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }
