package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/tools"
)

// startToolServer serves benchTool on an embedded NATS server until the
// test ends, and returns a bench whose system points at it.
func startToolServer(t *testing.T) (*bench, *toolServer) {
	t.Helper()
	ns := natsembed.StartT(t, natsembed.Config{})
	srv, err := serveTool(ns.ClientURL(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.close(); err != nil {
			t.Error(err)
		}
	})
	return &bench{sys: &system{natsURL: ns.ClientURL(), names: events.Names{}}}, srv
}

// A worker's cancel message ends a held call at once: its ctx's cause is
// the cancel, and what it did after the ask is the time to the cancel.
func TestToolServerCancelledCall(t *testing.T) {
	_, srv := startToolServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv.holdFor(0) // until its ctx ends
	nc, err := events.Connect(srv.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	call := nats.NewMsg(events.Names{}.ToolSubject(benchTool))
	call.Reply = nc.NewInbox()
	call.Header.Set(events.HeaderToolRunID, "r1")
	call.Header.Set(events.HeaderToolCallID, "call_1")
	replies, err := nc.SubscribeSync(call.Reply)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishMsg(call); err != nil {
		t.Fatal(err)
	}
	if err := srv.waitStarted(ctx, []string{"r1"}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := srv.waitEnded(ctx, []string{"r1"}, 50*time.Millisecond); err == nil {
		t.Fatal("a held call ended by itself")
	}
	asked := map[string]time.Time{"r1": time.Now()}
	stop := nats.NewMsg(events.Names{}.ToolCancelSubject("r1"))
	stop.Header.Set(events.HeaderToolCallID, "call_1")
	if err := nc.PublishMsg(stop); err != nil {
		t.Fatal(err)
	}
	if err := srv.waitEnded(ctx, []string{"r1"}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	c, _ := srv.call("r1")
	if !errors.Is(c.cause, tools.ErrCancelled) {
		t.Fatalf("the call ended with %v, want the cancel", c.cause)
	}
	w := srv.toolWork([]string{"r1"}, asked)
	if w.CallsToEnd != 0 || w.ToolSeconds <= 0 || w.ToolSeconds > c.ended.Sub(asked["r1"]).Seconds() {
		t.Fatalf("work after the ask %+v", w)
	}
	if m, err := replies.NextMsg(30 * time.Second); err != nil || m.Header.Get("Nats-Service-Error-Code") != "500" {
		t.Fatalf("reply %v %v", m, err)
	}
}

// A naive client that drops its connection is not heard: the call runs to
// its end, and all of its time after the ask counts.
func TestNaiveCallRunsToItsEnd(t *testing.T) {
	b, srv := startToolServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hold := 300 * time.Millisecond
	srv.holdFor(hold)
	asked := map[string]time.Time{}
	if err := b.naiveCall(ctx, srv, "naive-1", 0, func(id string) { asked[id] = time.Now() }); err != nil {
		t.Fatal(err)
	}
	if err := srv.waitEnded(ctx, []string{"naive-1"}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	c, _ := srv.call("naive-1")
	w := srv.toolWork([]string{"naive-1", "never-called"}, asked)
	if c.cause != nil || c.ended.Sub(c.started) < hold || w.CallsToEnd != 1 || w.ToolSeconds < c.ended.Sub(asked["naive-1"]).Seconds()-0.001 {
		t.Fatalf("call %+v, work after the ask %+v", c, w)
	}
}
