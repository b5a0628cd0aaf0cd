package natsembed

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// RunTest starts an in-process server with JetStream in t.TempDir-like
// storage and returns it with a connected client. Both are closed by
// t.Cleanup (the connection first, then the server).
func RunTest(t testing.TB) (*Server, *nats.Conn) {
	t.Helper()
	return runTest(t, Config{InProcess: true})
}

// RunTestTCP is RunTest with a TCP listener on a random loopback port, for
// tests that need a URL (subprocesses, reconnects).
func RunTestTCP(t testing.TB) (*Server, *nats.Conn) {
	t.Helper()
	return runTest(t, Config{})
}

// StartT starts a server as Start does, fails the test if it cannot, and
// shuts it down with t.Cleanup.
func StartT(t testing.TB, cfg Config) *Server {
	t.Helper()
	s, err := Start(cfg)
	if err != nil {
		t.Fatalf("natsembed: start server: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

func runTest(t testing.TB, cfg Config) (*Server, *nats.Conn) {
	t.Helper()
	s := StartT(t, cfg)
	nc, err := s.Connect()
	if err != nil {
		t.Fatalf("natsembed: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return s, nc
}

// RunTestCluster starts a three-node JetStream cluster on loopback (see
// StartCluster) with its stores under t.TempDir and returns it with a
// client connected to it that reconnects for ever (to any node). Both are
// closed by t.Cleanup (the connection first, then the cluster).
func RunTestCluster(t testing.TB) (*Cluster, *nats.Conn) {
	t.Helper()
	c, err := StartCluster(ClusterConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("natsembed: start cluster: %v", err)
	}
	t.Cleanup(c.Shutdown)
	nc, err := c.Connect(nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("natsembed: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return c, nc
}
