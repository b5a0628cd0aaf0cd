package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/events/contract"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/gateway"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is one test's world: embedded NATS, the Foundry emulator and real
// workers; gateways are started on it with env.gateway.
type env struct {
	t      *testing.T
	ns     *natsembed.Server
	nc     *nats.Conn
	emu    *foundrytest.Server
	up     *foundry.Client
	client *events.Client
	tap    *contract.Tap // checks the test's traffic against the contract's schemas
}

func setup(t *testing.T, workers int) *env {
	t.Helper()
	ns, nc := natsembed.RunTestTCP(t)
	// Every message on NATS must match its schema; the tap reads on a
	// connection of its own, apart from the test's client.
	tapConn, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tapConn.Close)
	tap := contract.TapT(t, tapConn)
	emu := foundrytest.NewServer(foundrytest.Config{APIKey: "k"})
	t.Cleanup(emu.Close)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 512
	hc := &http.Client{Transport: tr}
	t.Cleanup(hc.CloseIdleConnections)
	up, err := foundry.New(foundry.Config{BaseURL: emu.BaseURL(), APIKey: "k", HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	client, err := events.NewClient(nc, events.ClientConfig{CancelTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, tap: tap, ns: ns, nc: nc, emu: emu, up: up, client: client}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js := mustJS(t, nc)
	if _, err := consumer.Provision(ctx, js, events.Names{}, consumer.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	for range workers {
		e.startWorker(consumer.Config{})
	}
	return e
}

// startWorker runs a worker on connections of its own until the test ends.
func (e *env) startWorker(cfg consumer.Config) {
	e.t.Helper()
	startWorkerOn(e.t, func() (*nats.Conn, error) { return e.ns.Connect() }, e.up, cfg)
}

// startWorkerOn runs a worker on two connections made by connect.
func startWorkerOn(t *testing.T, connect func() (*nats.Conn, error), up *foundry.Client, cfg consumer.Config) {
	t.Helper()
	nc, err := connect()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := connect()
	if err != nil {
		t.Fatal(err)
	}
	cfg.PublishConn = pub
	if cfg.CancelAuditDelay == 0 {
		cfg.CancelAuditDelay = -1
	}
	w, err := consumer.New(nc, up, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker: Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("worker did not stop within 30s")
		}
		nc.Close()
		pub.Close()
	})
}

// gw is a running gateway.
type gw struct {
	*gateway.Gateway
	url  string
	http *http.Client
	stop func()
	// checker checks every exchange through http against the OpenAPI document.
	checker *contract.HTTPChecker
}

// gateway starts a gateway on cfg (NoAuth with one tenant, "default", on a
// connection of its own, when cfg has no tenants; with the callback key
// tenantKey when cfg has a callback secret) until the test ends or stop.
func (e *env) gateway(cfg gateway.Config) *gw {
	e.t.Helper()
	if len(cfg.Tenants) == 0 {
		nc, err := e.ns.Connect()
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(nc.Close)
		cfg.NoAuth = true
		cfg.Tenants = []gateway.Tenant{{Name: "default", Conn: nc}}
		if cfg.Callbacks.Secret != nil {
			cfg.Tenants[0].CallbackSecrets = [][]byte{tenantKey}
		}
	}
	return startGateway(e.t, cfg, nil)
}

func startGateway(t *testing.T, cfg gateway.Config, hc *http.Client) *gw {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		hc = &http.Client{Transport: tr}
	}
	scheme := "http://"
	if cfg.TLSCertFile != "" {
		scheme = "https://"
	}
	return runGatewayWith(t, g, scheme, hc)
}

// runGateway runs g until the test ends, with a plain HTTP client.
func runGateway(t *testing.T, g *gateway.Gateway, scheme string) *gw {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	return runGatewayWith(t, g, scheme, &http.Client{Transport: tr})
}

func runGatewayWith(t *testing.T, g *gateway.Gateway, scheme string, hc *http.Client) *gw {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	select {
	case <-g.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("gateway did not start: %v", err)
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("gateway not ready after 20s")
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("gateway: Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("gateway did not stop within 30s")
			}
			hc.CloseIdleConnections()
		})
	}
	t.Cleanup(stop)
	// Every exchange must match the OpenAPI document.
	checker := contract.CheckHTTPT(t, gateway.OpenAPI())
	checked := *hc
	checked.Transport = checker.Transport(hc.Transport)
	return &gw{Gateway: g, url: scheme + g.Addr(), http: &checked, stop: stop, checker: checker}
}

// response is an HTTP answer, read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) apiError(t *testing.T) gateway.APIError {
	t.Helper()
	var b gateway.ErrorBody
	if err := json.Unmarshal(r.body, &b); err != nil || b.Error.Code == "" {
		t.Fatalf("status %d: want a JSON error object, got %q (%v)", r.status, r.body, err)
	}
	if b.Error.Status != r.status {
		t.Fatalf("error object status %d on an HTTP %d", b.Error.Status, r.status)
	}
	return b.Error
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("status %d: decode %q: %v", r.status, r.body, err)
	}
}

// do sends a request (testkit.NewRequest: body is sent as JSON unless it
// is a string or []byte) and reads the response whole.
func (g *gw) do(t *testing.T, method, path string, body any, hdr ...string) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := g.http.Do(testkit.NewRequest(t, ctx, method, g.url+path, body, hdr...))
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// create posts a run request and wants 201.
func (g *gw) create(t *testing.T, req map[string]any, hdr ...string) gateway.CreateResponse {
	t.Helper()
	r := g.do(t, "POST", "/v1/runs", req, hdr...)
	if r.status != http.StatusCreated {
		t.Fatalf("POST /v1/runs: %d %s", r.status, r.body)
	}
	var cr gateway.CreateResponse
	r.decode(t, &cr)
	return cr
}

func runRequest(md map[string]string) map[string]any {
	req := map[string]any{"model": "gpt-test", "input": "hello there"}
	if md != nil {
		req["metadata"] = md
	}
	return req
}

// frame is one Server-Sent Events frame (or a comment).
type frame struct {
	id, event, data, comment string
}

// sse is an open event stream.
type sse struct {
	resp *http.Response
	rd   *bufio.Reader
	stop context.CancelFunc
}

// stream opens GET path as an event stream; it wants 200.
func (g *gw) stream(t *testing.T, path string, hdr ...string) *sse {
	t.Helper()
	s, status, body := g.openStream(t, path, hdr...)
	if status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, status, body)
	}
	return s
}

func (g *gw) openStream(t *testing.T, path string, hdr ...string) (*sse, int, []byte) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", g.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := g.http.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, resp.StatusCode, body
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("GET %s: Content-Type %q", path, ct)
	}
	s := &sse{resp: resp, rd: bufio.NewReader(resp.Body), stop: cancel}
	t.Cleanup(s.close)
	return s, resp.StatusCode, nil
}

func (s *sse) close() {
	s.stop()
	s.resp.Body.Close()
}

// next reads the next frame; io.EOF at the end of the stream.
func (s *sse) next() (frame, error) {
	var f frame
	any := false
	for {
		line, err := s.rd.ReadString('\n')
		if err != nil {
			if any && errors.Is(err, io.EOF) {
				return f, nil
			}
			return f, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if any {
				return f, nil
			}
			continue
		}
		any = true
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "":
			f.comment = value
		case "id":
			f.id = value
		case "event":
			f.event = value
		case "data":
			f.data += value
		}
	}
}

// nextEvent skips comments and decodes the next event frame.
func (s *sse) nextEvent(t *testing.T) (events.RunEvent, frame, error) {
	t.Helper()
	for {
		f, err := s.next()
		if err != nil {
			return events.RunEvent{}, f, err
		}
		if f.event == "" && f.data == "" {
			continue
		}
		if f.event == "error" {
			return events.RunEvent{}, f, fmt.Errorf("error event: %s", f.data)
		}
		var ev events.RunEvent
		if err := json.Unmarshal([]byte(f.data), &ev); err != nil {
			t.Fatalf("frame data %q: %v", f.data, err)
		}
		if f.id != fmt.Sprint(ev.Seq) || f.event != string(ev.Type) {
			t.Fatalf("frame id %q event %q for an event with seq %d type %s", f.id, f.event, ev.Seq, ev.Type)
		}
		return ev, f, nil
	}
}

// readAll reads events until the stream ends; it wants the end to come
// right after a terminal event.
func (s *sse) readAll(t *testing.T) []events.RunEvent {
	t.Helper()
	var evs []events.RunEvent
	for {
		ev, _, err := s.nextEvent(t)
		if errors.Is(err, io.EOF) {
			if len(evs) == 0 || !evs[len(evs)-1].Type.Terminal() {
				t.Fatalf("stream ended without a terminal event after %d events", len(evs))
			}
			return evs
		}
		if err != nil {
			t.Fatalf("stream: after %d events: %v", len(evs), err)
		}
		evs = append(evs, ev)
	}
}

// watchAll collects a run's events over NATS, from the start to the end.
func (e *env) watchAll(runID string) []events.RunEvent {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := e.client.Watch(ctx, runID, events.WatchOptions{NoHeartbeat: true})
	defer w.Close()
	var evs []events.RunEvent
	for {
		ev, err := w.Next(ctx)
		if errors.Is(err, io.EOF) {
			return evs
		}
		if err != nil {
			e.t.Fatalf("watch %s: %v", runID, err)
		}
		evs = append(evs, ev)
	}
}

func text(evs []events.RunEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type == events.TypeTextDelta {
			b.WriteString(ev.Text)
		}
	}
	return b.String()
}

// checkContiguous wants seqs from..from+len-1 in order.
func checkContiguous(t *testing.T, evs []events.RunEvent, from uint64) {
	t.Helper()
	for i, ev := range evs {
		if ev.Seq != from+uint64(i) {
			t.Fatalf("event %d has seq %d, want %d", i, ev.Seq, from+uint64(i))
		}
	}
}

func consumerConfig() consumer.Config { return consumer.Config{} }

func jsonDecoder(r io.Reader) *json.Decoder { return json.NewDecoder(r) }

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func mustJS(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
