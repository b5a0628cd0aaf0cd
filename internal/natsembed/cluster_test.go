package natsembed_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/internal/natsembed"
)

// An R3 stream on the cluster keeps every acknowledged message through the
// loss of its leader: a new leader is elected among the other two nodes,
// publishes go on, and the killed node catches up after its restart.
func TestClusterKillStreamLeader(t *testing.T) {
	t.Parallel()
	c, nc := natsembed.RunTestCluster(t)
	if c.Size() != 3 || strings.Count(c.ClientURLs(), "nats://") != 3 {
		t.Fatalf("size %d, urls %q", c.Size(), c.ClientURLs())
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3, Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("create R3 stream: %v", err)
	}
	// publish stores messages from..from+n-1, each retried under its own
	// message id until it is acked: a publish that reaches a node while
	// the stream has no leader gets no answer at all, so each attempt has
	// a deadline of its own (one on the whole test waited out its minute).
	publish := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			for {
				pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := js.Publish(pctx, "t.x", []byte("x"), jetstream.WithMsgID(fmt.Sprintf("m-%d", i)))
				pcancel()
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("publish %d: %v", i, err)
				}
			}
		}
	}
	publish(0, 10)
	st, err := js.Stream(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "D", Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := c.ConsumerLeader("T", "D"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := c.ConsumerLeader("T", "nope"); !errors.Is(err, natsembed.ErrNoLeader) {
		t.Fatalf("leader of a missing consumer: %v", err)
	}
	leader, err := c.WaitStreamLeader("T", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Kill(leader)
	if c.Up(leader) {
		t.Fatal("killed node still up")
	}
	if _, err := c.StreamLeader("T"); err != nil && !errors.Is(err, natsembed.ErrNoLeader) {
		t.Fatal(err)
	}
	next, err := c.WaitStreamLeader("T", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if next == leader {
		t.Fatalf("leader %d after it was killed", next)
	}
	publish(10, 10) // retried until the new leader answers
	if err := c.Restart(leader); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 20 {
		t.Fatalf("%d messages, want 20", info.State.Msgs)
	}
	// The restarted node catches up: every replica current again.
	deadline = time.Now().Add(30 * time.Second)
	for {
		info, err = s.Info(ctx)
		ok := err == nil && info.Cluster != nil && len(info.Cluster.Replicas) == 2
		for _, r := range info.Cluster.Replicas {
			ok = ok && r.Current
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas not current after the restart: %+v (%v)", info.Cluster, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestStartClusterBadSize(t *testing.T) {
	t.Parallel()
	if _, err := natsembed.StartCluster(natsembed.ClusterConfig{Size: 10}); err == nil || !strings.Contains(err.Error(), "Size") {
		t.Fatalf("err = %v, want one naming Size", err)
	}
}
