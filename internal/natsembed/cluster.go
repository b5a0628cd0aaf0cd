package natsembed

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// ClusterConfig configures a JetStream cluster of embedded servers on
// loopback. The zero value starts three nodes with file storage in a
// temporary directory.
type ClusterConfig struct {
	// Size is the number of nodes. Default 3 (the smallest cluster that
	// survives the loss of one node with R3 streams).
	Size int
	// Name is the cluster's name; node i is named "<Name>-<i>". Default
	// "foundryq-cluster".
	Name string
	// Host is the interface every node listens on, for clients and routes.
	// Default "127.0.0.1".
	Host string
	// StoreDir is the directory under which each node keeps its JetStream
	// files (in "<Name>-<i>"). Default: a new temporary directory that
	// Shutdown removes.
	StoreDir string
	// ReadyTimeout bounds the wait for each node to accept connections and
	// for the cluster to elect its JetStream meta leader. Default 30s.
	ReadyTimeout time.Duration
	// Logger receives the servers' log lines, each with the node's name.
	// Nil discards them.
	Logger *zerolog.Logger
}

func (c ClusterConfig) withDefaults() ClusterConfig {
	if c.Size == 0 {
		c.Size = 3
	}
	if c.Name == "" {
		c.Name = "foundryq-cluster"
	}
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 30 * time.Second
	}
	return c
}

func (c ClusterConfig) validate() error {
	if c.Size < 1 || c.Size > 9 {
		return fmt.Errorf("natsembed: cluster Size %d out of range (1-9)", c.Size)
	}
	if c.ReadyTimeout < 0 {
		return fmt.Errorf("natsembed: cluster ReadyTimeout %s must be positive", c.ReadyTimeout)
	}
	return nil
}

// Cluster is a running JetStream cluster of embedded nats-servers joined by
// routes on loopback. Every node keeps its client and route ports across
// Kill and Restart, so clients given ClientURLs reconnect to a restarted
// node as to a real one.
type Cluster struct {
	cfg     ClusterConfig
	tempDir string // removed by Shutdown when set

	mu    sync.Mutex
	nodes []*Server
	up    []bool
}

// StartCluster starts cfg.Size nodes, each with its own store directory,
// fixed client and route ports and the full route list, and waits until
// every node accepts connections and the JetStream meta group has a
// leader. On error everything started is stopped.
func StartCluster(cfg ClusterConfig) (_ *Cluster, err error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg}
	defer func() {
		if err != nil {
			c.Shutdown()
		}
	}()
	root := cfg.StoreDir
	if root == "" {
		if root, err = os.MkdirTemp("", "foundryq-cluster-*"); err != nil {
			return nil, fmt.Errorf("natsembed: create store dir: %w", err)
		}
		c.tempDir = root
	}
	// Route ports must be known before any node starts (every node gets
	// the full list); client ports are fixed too, so that a restarted node
	// is found where it was.
	ports, err := freePorts(cfg.Host, 2*cfg.Size)
	if err != nil {
		return nil, err
	}
	routes := make([]string, cfg.Size)
	for i := range cfg.Size {
		routes[i] = "nats-route://" + net.JoinHostPort(cfg.Host, strconv.Itoa(ports[cfg.Size+i]))
	}
	routeURLs, err := parseRoutes(strings.Join(routes, ","))
	if err != nil {
		return nil, err
	}
	for i := range cfg.Size {
		name := c.nodeName(i)
		opts := &server.Options{
			ServerName: name,
			Host:       cfg.Host,
			Port:       ports[i],
			JetStream:  true,
			StoreDir:   filepath.Join(root, name),
			NoSigs:     true,
			NoLog:      cfg.Logger == nil,
			Cluster: server.ClusterOpts{
				Name:     cfg.Name,
				Host:     cfg.Host,
				Port:     ports[cfg.Size+i],
				PoolSize: -1, // one route per pair of nodes: fewer connections to set up
			},
			Routes: routeURLs,
		}
		ncfg := Config{ReadyTimeout: cfg.ReadyTimeout, ServerName: name}
		if cfg.Logger != nil {
			l := cfg.Logger.With().Str("node", name).Logger()
			ncfg.Logger = &l
		}
		s := &Server{cfg: ncfg, storeDir: opts.StoreDir, port: ports[i]}
		if err := s.start(opts); err != nil {
			if s.srv != nil {
				s.Shutdown()
			}
			return nil, fmt.Errorf("natsembed: start %s: %w", name, err)
		}
		c.nodes = append(c.nodes, s)
		c.up = append(c.up, true)
	}
	if err := c.WaitReady(cfg.ReadyTimeout); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cluster) nodeName(i int) string { return c.cfg.Name + "-" + strconv.Itoa(i+1) }

// freePorts reserves n distinct free TCP ports on host by listening on
// port 0, then releases them for the servers to take.
func freePorts(host string, n int) ([]int, error) {
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("natsembed: find a free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func parseRoutes(s string) ([]*url.URL, error) {
	urls := server.RoutesFromStr(s)
	if len(urls) == 0 {
		return nil, fmt.Errorf("natsembed: bad route list %q", s)
	}
	return urls, nil
}

// WaitReady waits until every running node accepts connections, sees a
// JetStream meta leader and is current with it, or timeout passes.
func (c *Cluster) WaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := c.ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("natsembed: cluster not ready after %s: %w", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *Cluster) ready() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	leaders, up := 0, 0
	var leader *Server
	for i, s := range c.nodes {
		if !c.up[i] {
			continue
		}
		up++
		if !s.srv.Running() {
			return fmt.Errorf("%s is not running", s.srv.Name())
		}
		if !s.srv.JetStreamIsCurrent() {
			return fmt.Errorf("%s is not current with the JetStream meta group", s.srv.Name())
		}
		if s.srv.JetStreamIsLeader() {
			leaders++
			leader = s
		}
	}
	if leaders != 1 {
		return fmt.Errorf("%d JetStream meta leaders, want 1", leaders)
	}
	// Until the meta leader has heard from every other running node, it
	// places no replicated stream on them ("no suitable peers for
	// placement, peer offline").
	info, err := leader.srv.Jsz(nil)
	if err != nil {
		return fmt.Errorf("%s: jsz: %w", leader.srv.Name(), err)
	}
	online := 0
	if info.Meta != nil {
		for _, p := range info.Meta.Replicas {
			if p.Current && !p.Offline {
				online++
			}
		}
	}
	if online < up-1 {
		return fmt.Errorf("the meta leader %s sees %d of the %d other nodes online", leader.srv.Name(), online, up-1)
	}
	return nil
}

// Size is the number of nodes.
func (c *Cluster) Size() int { return len(c.nodes) }

// Node returns node i (0-based) as a Server: its NATS() is the current
// nats-server (a new one after Restart).
func (c *Cluster) Node(i int) *Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// Up reports whether node i runs (it was not killed, or was restarted).
func (c *Cluster) Up(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.up[i]
}

// ClientURLs returns the client URLs of every node, running or not,
// comma-separated, as nats.Connect and foundryq's --nats-url take them.
func (c *Cluster) ClientURLs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	urls := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		urls[i] = "nats://" + net.JoinHostPort(c.cfg.Host, strconv.Itoa(s.port))
	}
	return strings.Join(urls, ",")
}

// Connect opens a client connection to the cluster (any node; the client
// fails over between them). Options are applied after the defaults.
func (c *Cluster) Connect(opts ...nats.Option) (*nats.Conn, error) {
	all := append([]nats.Option{nats.Name("foundryq-natsembed")}, opts...)
	nc, err := nats.Connect(c.ClientURLs(), all...)
	if err != nil {
		return nil, fmt.Errorf("natsembed: connect to cluster: %w", err)
	}
	return nc, nil
}

// Kill stops node i as a crash or an outage would, keeping its store: its
// clients reconnect to other nodes, and the streams it led elect new
// leaders among the others. Killing a stopped node does nothing.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	s, up := c.nodes[i], c.up[i]
	c.up[i] = false
	c.mu.Unlock()
	if up {
		s.Stop()
	}
}

// Restart starts killed node i again with the same ports and store, and
// waits until it has rejoined the cluster (see WaitReady).
func (c *Cluster) Restart(i int) error {
	c.mu.Lock()
	s, up := c.nodes[i], c.up[i]
	c.mu.Unlock()
	if up {
		return fmt.Errorf("natsembed: node %d (%s) is running", i, s.srv.Name())
	}
	if err := s.Restart(); err != nil {
		return fmt.Errorf("natsembed: restart %s: %w", c.nodeName(i), err)
	}
	c.mu.Lock()
	c.up[i] = true
	c.mu.Unlock()
	return c.WaitReady(c.cfg.ReadyTimeout)
}

// ErrNoLeader is returned when no running node leads the stream or
// consumer asked about.
var ErrNoLeader = errors.New("natsembed: no leader")

// StreamLeader returns the index of the running node that leads stream
// (of the default account), or ErrNoLeader. A KV bucket's stream is
// "KV_<bucket>".
func (c *Cluster) StreamLeader(stream string) (int, error) {
	return c.leader(func(s *server.Server) bool { return s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) },
		"stream "+stream)
}

// ConsumerLeader returns the index of the running node that leads the
// consumer of stream (of the default account), or ErrNoLeader.
func (c *Cluster) ConsumerLeader(stream, consumer string) (int, error) {
	return c.leader(func(s *server.Server) bool {
		return s.JetStreamIsConsumerLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream, consumer)
	}, "consumer "+stream+" > "+consumer)
}

func (c *Cluster) leader(is func(*server.Server) bool, what string) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.nodes {
		if c.up[i] && is(s.srv) {
			return i, nil
		}
	}
	return -1, fmt.Errorf("%w of %s", ErrNoLeader, what)
}

// WaitStreamLeader waits until a running node leads stream and returns its
// index, or an error after timeout.
func (c *Cluster) WaitStreamLeader(stream string, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		i, err := c.StreamLeader(stream)
		if err == nil {
			return i, nil
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("after %s: %w", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Shutdown stops every node and removes the temporary store directory if
// StartCluster created one. It is safe to call twice.
func (c *Cluster) Shutdown() {
	c.mu.Lock()
	nodes := c.nodes
	for i := range c.up {
		c.up[i] = false
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Shutdown()
		}()
	}
	wg.Wait()
	if c.tempDir != "" {
		_ = os.RemoveAll(c.tempDir)
		c.tempDir = ""
	}
}
