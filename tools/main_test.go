package tools_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/goleak"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/events/contract"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/tools"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait is how long a test waits for something that comes within
// milliseconds when the machine is idle.
const wait = 10 * time.Second

// runNATS starts a server for the test and returns a connection to it;
// every reply of the contract on it (progress and answers of the tools)
// is checked against the schemas, by a tap on a connection of its own.
func runNATS(t *testing.T) *nats.Conn {
	t.Helper()
	srv, nc := natsembed.RunTest(t)
	tapConn, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tapConn.Close)
	contract.TapT(t, tapConn)
	return nc
}

// serve serves h as tool name on nc and stops it when the test ends.
func serve(t *testing.T, nc *nats.Conn, name string, h tools.Handler, opts ...tools.Option) *tools.Service {
	t.Helper()
	s, err := tools.Serve(nc, name, h, opts...)
	if err != nil {
		t.Fatalf("Serve(%q): %v", name, err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return s
}

// toolRequest is a call of tool name as the worker sends it (no deadline).
func toolRequest(name, runID, callID, args string) *nats.Msg {
	m := nats.NewMsg(events.Names{}.ToolSubject(name))
	m.Header.Set(events.HeaderToolRunID, runID)
	m.Header.Set(events.HeaderToolCallID, callID)
	m.Header.Set(events.HeaderToolName, name)
	m.Data = []byte(args)
	return m
}

// withDeadline sets the request's deadline header.
func withDeadline(m *nats.Msg, d time.Time) *nats.Msg {
	m.Header.Set(events.HeaderToolDeadline, d.UTC().Format(time.RFC3339Nano))
	return m
}

// request sends m and returns the first reply.
func request(t *testing.T, nc *nats.Conn, m *nats.Msg) *nats.Msg {
	t.Helper()
	reply, err := nc.RequestMsg(m, wait)
	if err != nil {
		t.Fatalf("request on %s: %v", m.Subject, err)
	}
	return reply
}

// send sends m with a reply inbox of its own and returns every reply
// (progress messages and the answer) as it comes.
func send(t *testing.T, nc *nats.Conn, m *nats.Msg) <-chan *nats.Msg {
	t.Helper()
	replies := make(chan *nats.Msg, 1024)
	m.Reply = nc.NewRespInbox()
	sub, err := nc.ChanSubscribe(m.Reply, replies)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	return replies
}

// answer returns the first reply from replies that is not a progress
// message.
func answer(t *testing.T, replies <-chan *nats.Msg) *nats.Msg {
	t.Helper()
	timeout := time.After(wait)
	for {
		select {
		case m := <-replies:
			if m.Header.Get(events.HeaderToolStatus) != events.ToolStatusWorking {
				return m
			}
		case <-timeout:
			t.Fatalf("no answer within %s", wait)
			return nil
		}
	}
}

// serviceError returns the micro error code and description of a reply
// ("" if it is no error).
func serviceError(m *nats.Msg) (code, description string) {
	return m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)
}

// wantOutput fails the test unless reply is a success with body want.
func wantOutput(t *testing.T, reply *nats.Msg, want string) {
	t.Helper()
	if code, desc := serviceError(reply); code != "" {
		t.Fatalf("reply is error %s: %s, want output %q", code, desc, want)
	}
	if string(reply.Data) != want {
		t.Fatalf("output = %q, want %q", reply.Data, want)
	}
}

// wantError fails the test unless reply is a micro error with code and a
// description containing desc.
func wantError(t *testing.T, reply *nats.Msg, code, desc string) {
	t.Helper()
	gotCode, gotDesc := serviceError(reply)
	if gotCode != code || !strings.Contains(gotDesc, desc) {
		t.Fatalf("reply error = %q %q (body %q), want code %q with %q", gotCode, gotDesc, reply.Data, code, desc)
	}
}
