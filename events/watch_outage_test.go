package events_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/testkit"
)

// TestWatchStartedWithoutQuorum: a watch started while the events stream
// has no leader (on a JetStream cluster, during a fail-over or while a
// majority of the nodes is away, the API answers 503 "JetStream system
// temporarily unavailable") waits for one within its context, as a watch
// that was already following does, instead of failing at once.
func TestWatchStartedWithoutQuorum(t *testing.T) {
	nodes := startTestCluster(t, 3)
	nc, err := nats.Connect(nodes[0].ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	names := events.Names{}
	testkit.Eventually(t, 30*time.Second, "R3 streams on the cluster", func() bool {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := consumer.Provision(pctx, js, names, consumer.ProvisionConfig{Replicas: 3})
		return err == nil
	})
	c, err := events.NewClient(nc, events.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pub := &publisher{t: t, e: &env{nc: nc, js: js, names: names, client: c}, runID: "quorum-1"}
	pub.publish(events.RunEvent{Type: events.TypeRunStarted})
	pub.text("hello")
	pub.publish(events.RunEvent{Type: events.TypeRunCompleted, Status: "completed"})

	// Two of three nodes away: no quorum until one comes back.
	opts := nodes[1].opts
	nodes[1].Shutdown()
	nodes[2].Shutdown()
	var (
		back    *server.Server
		backErr error
		wg      sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(3 * time.Second) // the outage, during the watch's setup
		back, backErr = startTestNode(opts)
	}()
	t.Cleanup(func() {
		wg.Wait()
		if back != nil {
			back.Shutdown()
		}
	})
	w := c.Watch(ctx, "quorum-1", events.WatchOptions{NoHeartbeat: true})
	defer w.Close()
	var got []events.RunEvent
	for len(got) < 3 {
		ev, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("watch started without quorum: Next after %d events: %v", len(got), err)
		}
		got = append(got, ev)
	}
	wg.Wait()
	if backErr != nil {
		t.Fatal(backErr)
	}
	if got[2].Type != events.TypeRunCompleted {
		t.Fatalf("watch read %v, want the run's 3 events", got)
	}
}

// testNode is a node of startTestCluster.
type testNode struct {
	*server.Server
	opts *server.Options
}

// startTestCluster starts n nats-server nodes with JetStream on loopback,
// routed to each other, each with its own store.
func startTestCluster(t *testing.T, n int) []testNode {
	t.Helper()
	var routes []string
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[len(ports)-1]))
		ln.Close()
	}
	var nodes []testNode
	for i := range n {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			JetStream:  true,
			StoreDir:   t.TempDir(),
			Cluster:    server.ClusterOpts{Name: "events-test", Host: "127.0.0.1", Port: ports[i]},
			Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
			NoSigs:     true,
			NoLog:      true,
		}
		s, err := startTestNode(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Shutdown)
		nodes = append(nodes, testNode{s, opts})
	}
	return nodes
}

func startTestNode(opts *server.Options) (*server.Server, error) {
	s, err := server.NewServer(opts.Clone())
	if err != nil {
		return nil, err
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("node %s not ready", opts.ServerName)
	}
	return s, nil
}
