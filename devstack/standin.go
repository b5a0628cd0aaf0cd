package devstack

import (
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/foundryq/foundryq/events"
)

// StandInWorker joins the workers' queue group on the cancel subjects of
// names until the test ends, in place of a worker: with a reply it answers
// every cancel request with it (its RunID set from the subject); with nil
// it drops every request, as a worker cut off from NATS or frozen would
// (the server still routes requests to it). It returns how many requests
// it received. For tests of what a client does with a worker's answer, or
// with its silence.
func StandInWorker(t testing.TB, nc *nats.Conn, names events.Names, reply *events.CancelReply) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	sub, err := nc.QueueSubscribe(names.CancelWildcard(), names.WorkerQueueGroup(), func(m *nats.Msg) {
		if m.Header.Get(events.HeaderCancelNotice) != "" {
			return // a worker's notice to a run's owner, not a request
		}
		n.Add(1)
		if reply == nil || m.Reply == "" {
			return
		}
		r := *reply
		r.RunID, _ = names.RunIDFromSubject(m.Subject)
		data, _ := json.Marshal(r)
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}
