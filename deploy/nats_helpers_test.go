package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/tools"
)

// Helpers for the tests that run a shipped NATS config in process: no
// Docker, a random loopback port and a temporary store directory in place
// of the file's 4222 and /data.

// deniedWait bounds the wait for the server to report a refusal. A refused
// publish is asynchronous in NATS: the publish returns nil and the server
// answers -ERR later, which nats.go hands to the error handler.
const deniedWait = 30 * time.Second

// startConfig starts nats-server in process from a file in deploy/nats,
// with env set for the file's $VARIABLES (so no t.Parallel).
func startConfig(t *testing.T, name string, env map[string]string) *natsembed.Server {
	t.Helper()
	return startConfigFile(t, filepath.Join("nats", name), env)
}

// startConfigFile is startConfig for a file anywhere.
func startConfigFile(t *testing.T, path string, env map[string]string) *natsembed.Server {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	return natsembed.StartT(t, natsembed.Config{ConfigFile: path, StoreDir: t.TempDir()})
}

// natsUser is a connection whose asynchronous errors (permission
// violations) are recorded.
type natsUser struct {
	name string
	nc   *nats.Conn
	js   jetstream.JetStream

	mu   sync.Mutex
	errs []error
}

// connectAs connects to s as user with events.Connect (so with the inbox
// prefix _INBOX.<user>).
func connectAs(t *testing.T, s *natsembed.Server, user, password string, opts ...nats.Option) *natsUser {
	t.Helper()
	u, err := dialAs(s, user, password, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(u.nc.Close)
	return u
}

// dialAs is connectAs that returns the connection error.
func dialAs(s *natsembed.Server, user, password string, opts ...nats.Option) (*natsUser, error) {
	return dialURL(s.ClientURL(), user, password, opts...)
}

// dialURL is dialAs for the server at serverURL (no credentials in it).
func dialURL(serverURL, user, password string, opts ...nats.Option) (*natsUser, error) {
	u := &natsUser{name: user}
	url := strings.Replace(serverURL, "://", "://"+user+":"+password+"@", 1)
	opts = append([]nats.Option{nats.Name("deploy-test-" + user), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		u.mu.Lock()
		u.errs = append(u.errs, err)
		u.mu.Unlock()
	})}, opts...)
	nc, err := events.Connect(url, append(opts, nats.Timeout(10*time.Second))...)
	if err != nil {
		return nil, err
	}
	u.nc = nc
	if u.js, err = jetstream.New(nc); err != nil {
		nc.Close()
		return nil, err
	}
	return u, nil
}

// takeViolation removes and reports the first recorded permission
// violation whose message quotes subject.
func (u *natsUser) takeViolation(kind, subject string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	want := kind + ` to "` + subject + `"`
	for i, err := range u.errs {
		if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), want) {
			u.errs = append(u.errs[:i], u.errs[i+1:]...)
			return true
		}
	}
	return false
}

// waitViolation waits until the server reports a violation of kind
// ("Publish" or "Subscription") on subject.
func (u *natsUser) waitViolation(t *testing.T, kind, subject string) {
	t.Helper()
	deadline := time.Now().Add(deniedWait)
	for !u.takeViolation(kind, subject) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no permission violation for %s to %q within %s (recorded: %v)", u.name, kind, subject, deniedWait, u.recorded())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (u *natsUser) recorded() []error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]error(nil), u.errs...)
}

// denied runs action (a request or a JetStream call), waits for the
// server to refuse the publish on subject, then ends the action and checks
// that it failed. A granted action gets no refusal, and the check fails.
func (u *natsUser) denied(t *testing.T, subject string, action func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*deniedWait)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- action(ctx) }()
	u.waitViolation(t, "Publish", subject)
	cancel()
	if err := <-done; err == nil {
		t.Fatalf("%s: the refused action on %s reported success", u.name, subject)
	}
}

// subDenied subscribes to subject and waits for the server to refuse it.
func (u *natsUser) subDenied(t *testing.T, subject string) {
	t.Helper()
	sub, err := u.nc.Subscribe(subject, func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	u.waitViolation(t, "Subscription", subject)
}

// subHears subscribes to subject (core NATS), runs trigger, and waits until
// a message on want arrives there: the server allowed the subscription.
// The subscription stays until the end of the test.
func (u *natsUser) subHears(t *testing.T, subject, want string, trigger func()) {
	t.Helper()
	got := make(chan string, 64)
	sub, err := u.nc.Subscribe(subject, func(m *nats.Msg) {
		select {
		case got <- m.Subject:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := u.nc.FlushTimeout(10 * time.Second); err != nil {
		t.Fatalf("%s: flush: %v", u.name, err)
	}
	trigger()
	deadline := time.After(deniedWait)
	for {
		select {
		case s := <-got:
			if s == want {
				return
			}
		case <-deadline:
			t.Fatalf("%s: nothing on %s heard through a subscription to %s within %s (recorded: %v)", u.name, want, subject, deniedWait, u.recorded())
		}
	}
}

// clean checks that the connection saw no asynchronous error.
func (u *natsUser) clean(t *testing.T) {
	t.Helper()
	if err := u.nc.FlushTimeout(10 * time.Second); err != nil {
		t.Fatalf("%s: flush: %v", u.name, err)
	}
	for _, err := range u.recorded() {
		t.Errorf("%s: %v", u.name, err)
	}
}

// request sends a raw JetStream API request and returns the reply.
func (u *natsUser) request(ctx context.Context, subject string, body any) ([]byte, error) {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return nil, err
		}
	}
	m, err := u.nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return nil, err
	}
	var apiErr struct {
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if json.Unmarshal(m.Data, &apiErr) == nil && apiErr.Error != nil {
		return m.Data, fmt.Errorf("%s: %s", subject, apiErr.Error.Description)
	}
	return m.Data, nil
}

// provisionAs provisions foundryq's streams, consumer and bucket as the
// user, like a worker does at start, and makes sure the durable cancel
// records stream exists: until consumer.Provision creates it, the test
// creates a plain one in its place (what the client may do with it is
// what is tested here, not its settings).
func provisionAs(t *testing.T, u *natsUser, prefix string) events.Names {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	names, err := events.NewNames(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := consumer.Provision(ctx, u.js, names, consumer.ProvisionConfig{}); err != nil {
		t.Fatalf("provision as %s: %v (refusals: %v)", u.name, err, u.recorded())
	}
	if _, err := u.js.Stream(ctx, names.CancelsStream()); errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := u.js.CreateStream(ctx, jetstream.StreamConfig{Name: names.CancelsStream(), Subjects: []string{names.CancelRecordsWildcard()}, MaxAge: time.Hour}); err != nil {
			t.Fatalf("create %s as %s: %v", names.CancelsStream(), u.name, err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	return names
}

// emulator starts the Foundry emulator with a fast default pace.
func emulator(t *testing.T) *foundrytest.Server {
	t.Helper()
	emu := foundrytest.NewServer(foundrytest.Config{APIKey: "emu-key", DefaultTokenDelay: time.Millisecond})
	t.Cleanup(emu.Close)
	return emu
}

// runWorker runs a foundryq worker on u's connection until the returned
// function (safe to call twice) or the end of the test stops it.
func runWorker(t *testing.T, u *natsUser, emu *foundrytest.Server, cfg consumer.Config) (stop func()) {
	t.Helper()
	up, err := foundry.New(foundry.Config{BaseURL: emu.BaseURL(), APIKey: "emu-key"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.CloseIdleConnections)
	if cfg.WorkerID == "" {
		cfg.WorkerID = "w-" + u.name
	}
	cfg.ShutdownTimeout = 5 * time.Second
	w, err := consumer.New(u.nc, up, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("worker %s: %v", cfg.WorkerID, err)
				}
			case <-time.After(60 * time.Second):
				t.Errorf("worker %s did not stop", cfg.WorkerID)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// watchToEnd follows a run until its terminal event and returns the events;
// onEvent, if set, sees each event as it comes.
func watchToEnd(t *testing.T, c *events.Client, runID string, from events.From, onEvent func(events.RunEvent)) []events.RunEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	w := c.Watch(ctx, runID, events.WatchOptions{From: from})
	defer w.Close()
	var evs []events.RunEvent
	for {
		ev, err := w.Next(ctx)
		if errors.Is(err, io.EOF) {
			return evs
		}
		if err != nil {
			t.Fatalf("watch %s: %v (events so far %v)", runID, err, types(evs))
		}
		evs = append(evs, ev)
		if onEvent != nil {
			onEvent(ev)
		}
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// queueSubDenied joins queue on subject and waits for the server to refuse
// it.
func (u *natsUser) queueSubDenied(t *testing.T, subject, queue string) {
	t.Helper()
	sub, err := u.nc.QueueSubscribe(subject, queue, func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	u.waitViolation(t, "Subscription", subject)
}

// probeTool is a function tool served with package tools as one user: each
// call is reported on started, and waits until a value on release (then
// answers answer) or the end of its ctx (then reports the cause on ended
// and fails).
type probeTool struct {
	svc     *tools.Service
	started chan tools.Call
	release chan struct{}
	ended   chan error
}

// serveProbe serves the tool name as u (progress messages every 20 ms)
// until the end of the test.
func serveProbe(t *testing.T, u *natsUser, name, answer string) *probeTool {
	t.Helper()
	p := &probeTool{started: make(chan tools.Call, 16), release: make(chan struct{}), ended: make(chan error, 16)}
	svc, err := tools.Serve(u.nc, name, func(ctx context.Context, call tools.Call) (string, error) {
		p.started <- call
		select {
		case <-p.release:
			return answer, nil
		case <-ctx.Done():
			p.ended <- context.Cause(ctx)
			return "", context.Cause(ctx)
		}
	}, tools.WithHeartbeat(20*time.Millisecond))
	if err != nil {
		t.Fatalf("serve tool %s as %s: %v (refusals: %v)", name, u.name, err, u.recorded())
	}
	p.svc = svc
	t.Cleanup(func() { _ = svc.Stop() })
	return p
}

// nextStart waits for the next call of the tool to start.
func (p *probeTool) nextStart(t *testing.T) tools.Call {
	t.Helper()
	select {
	case c := <-p.started:
		return c
	case <-time.After(deniedWait):
		t.Fatal("no call of the tool started")
		return tools.Call{}
	}
}

// idle checks that no call of the tool has started.
func (p *probeTool) idle(t *testing.T, who string) {
	t.Helper()
	select {
	case c := <-p.started:
		t.Fatalf("%s: the tool took a call it should never see: %+v", who, c)
	default:
	}
}

// callTool sends a call of tool as a worker does: a request on
// <prefix>.tools.<tool> with the call's headers, the replies (progress,
// then the answer) on u's inbox, read from the returned subscription.
func callTool(t *testing.T, u *natsUser, names events.Names, tool, runID, callID, args string) *nats.Subscription {
	t.Helper()
	inbox := u.nc.NewInbox()
	sub, err := u.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	m := nats.NewMsg(names.ToolSubject(tool))
	m.Reply, m.Data = inbox, []byte(args)
	m.Header.Set(events.HeaderToolRunID, runID)
	m.Header.Set(events.HeaderToolCallID, callID)
	m.Header.Set(events.HeaderToolName, tool)
	m.Header.Set(events.HeaderToolDeadline, time.Now().Add(2*deniedWait).UTC().Format(time.RFC3339Nano))
	if err := u.nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	return sub
}

// progressThenAnswer reads the replies of a call: it counts the progress
// messages until want of them arrived, calls then (which makes the tool
// answer), and returns the final answer.
func progressThenAnswer(t *testing.T, sub *nats.Subscription, want int, then func()) *nats.Msg {
	t.Helper()
	progress := 0
	for {
		m, err := sub.NextMsg(deniedWait)
		if err != nil {
			t.Fatalf("reply %d of the call: %v", progress+1, err)
		}
		if m.Header.Get(events.HeaderToolStatus) != events.ToolStatusWorking {
			if progress < want {
				t.Fatalf("answer after %d progress messages, want %d first: %q %v", progress, want, m.Data, m.Header)
			}
			return m
		}
		if progress++; progress == want {
			then()
		}
	}
}

// cancelToolCall publishes the cancel message of a call as a worker does.
func cancelToolCall(t *testing.T, u *natsUser, names events.Names, runID, callID string) {
	t.Helper()
	m := nats.NewMsg(names.ToolCancelSubject(runID))
	m.Header.Set(events.HeaderToolCallID, callID)
	if err := u.nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
}
