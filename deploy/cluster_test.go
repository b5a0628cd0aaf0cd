package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/testkit"
)

// Bounds of the cluster test; every wait has one.
const (
	clusterTimeout  = 9 * time.Minute // everything after the image build
	clusterUp       = 3 * time.Minute // compose up, streams provisioned on R3
	clusterRecover  = 2 * time.Minute // a restarted or reconnected node current again
	clusterCut      = 20 * time.Second
	clusterDrain    = 3 * time.Minute // every run ended after the last submit
	clusterMinRuns  = 100
	clusterInterval = 400 * time.Millisecond // between two submits
	clusterInFlight = 3                      // runs streaming when a fault starts
	composeEmuKey   = "emulator"             // FOUNDRYQ_EMULATOR_API_KEY in compose.cluster.yml
)

var (
	clusterNodes   = []string{"nats-1", "nats-2", "nats-3"}
	clusterWorkers = []string{"worker-1", "worker-2", "worker-3"}
	// Each run streams about 2.4 s (120 tokens, 20 ms apart).
	clusterRunMetadata = map[string]string{"emu_tokens": "120", "emu_token_ms": "20"}
)

// TestClusterContainers runs deploy/compose.cluster.yml (three NATS nodes
// with R3 streams and bucket, routes over mutual TLS with the route
// password, the emulator and three workers on the project's private
// network). It checks that a server dialling a node's route port from
// that network without TLS, with a certificate of another CA or with a
// wrong password is refused, then submits runs without a pause while it
// restarts the workers one by one (SIGTERM: hand-off), restarts the NATS
// nodes one by one, and cuts the node that leads FOUNDRYQ_EVENTS off the
// network for 20 s. Every run must end once, completed, with contiguous
// events, the emulator's exact text and one upstream response; the
// watchers that followed the runs through the faults saw no gap and no
// duplicate.
func TestClusterContainers(t *testing.T) {
	dockerHost := requireDocker(t)
	compose := requireCompose(t, dockerHost)
	img := buildImages(t, dockerHost)
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	c := startCluster(ctx, t, dockerHost, compose, img)
	c.checkRouteTLS(ctx, t, img, c.routeCerts, makeRouteCerts(ctx, t, "other-route-tls"))

	l := c.startLoad(ctx, t)
	for _, w := range clusterWorkers {
		l.waitInFlight(ctx, t, clusterInFlight)
		c.restartWorker(ctx, t, w)
	}
	for _, n := range clusterNodes {
		l.waitInFlight(ctx, t, clusterInFlight)
		c.restartNode(ctx, t, n)
	}
	l.waitInFlight(ctx, t, clusterInFlight)
	c.cutLeader(ctx, t)
	l.finish(ctx, t)
	c.check(ctx, t, l)
}

// requireCompose returns the Compose command: "docker compose" (v2) or
// docker-compose (v1). Without either the test skips, or fails under
// FOUNDRYQ_REQUIRE_DOCKER=1.
func requireCompose(t *testing.T, dockerHost string) []string {
	t.Helper()
	for _, cmd := range [][]string{{"docker", "compose"}, {"docker-compose"}} {
		c := exec.Command(cmd[0], append(cmd[1:], "version")...)
		c.Env = append(os.Environ(), "DOCKER_HOST="+dockerHost)
		if err := c.Run(); err == nil {
			return cmd
		}
	}
	if os.Getenv("FOUNDRYQ_REQUIRE_DOCKER") == "1" {
		t.Fatal("the cluster test needs Docker Compose (docker compose or docker-compose)")
	}
	t.Skip("no Docker Compose (docker compose or docker-compose)")
	return nil
}

// cluster is a running compose.cluster.yml project.
type cluster struct {
	compose     []string // the Compose command
	file        string
	project     string
	env         []string          // of every docker and compose call
	ids         map[string]string // container id by service
	ports       map[string]string // host port by variable name
	network     string
	emulatorURL string
	routeCerts  string // ROUTE_CERTS_DIR

	nc     *nats.Conn // the client user, on all three nodes
	js     jetstream.JetStream
	client *events.Client
	names  events.Names

	asyncMu  sync.Mutex
	asyncErr []error
}

// startCluster starts the project under a unique name with free host
// ports, and waits for the workers and R3 streams.
func startCluster(ctx context.Context, t *testing.T, dockerHost string, compose []string, img images) *cluster {
	t.Helper()
	c := &cluster{
		compose: compose,
		file:    filepath.Join(deployDir(t), "compose.cluster.yml"),
		project: "fqcluster" + randomHex(t, 5),
		ids:     map[string]string{},
		ports:   map[string]string{},
	}
	vars := []string{"FOUNDRYQ_EMULATOR_PORT"}
	for i := range clusterNodes {
		vars = append(vars, fmt.Sprintf("FOUNDRYQ_NATS_%d_PORT", i+1), fmt.Sprintf("FOUNDRYQ_NATS_%d_MONITOR_PORT", i+1))
	}
	for i := range clusterWorkers {
		vars = append(vars, fmt.Sprintf("FOUNDRYQ_WORKER_%d_PORT", i+1))
	}
	// Fixed ports (not Docker's random ones): a restarted container keeps
	// them, and the clients reconnect to the same addresses.
	free := freePorts(t, len(vars))
	c.env = append(withoutEnv(os.Environ(), "ROUTE_CERTS_DIR"), "DOCKER_HOST="+dockerHost,
		"WORKER_PASSWORD=w"+randomHex(t, 12), "CLIENT_PASSWORD=c"+randomHex(t, 12), "GATEWAY_PASSWORD=g"+randomHex(t, 12), "TOOLS_PASSWORD=t"+randomHex(t, 12), "ROUTE_PASSWORD=r"+randomHex(t, 12),
		"FOUNDRYQ_IMAGE_PREFIX=", "FOUNDRYQ_IMAGE_TAG="+img.tag)
	for i, v := range vars {
		c.ports[v] = strconv.Itoa(free[i])
		c.env = append(c.env, v+"="+c.ports[v])
	}
	clientPW := envValue(c.env, "CLIENT_PASSWORD")
	c.checkNeedsRouteCerts(ctx, t)
	// The route certificates as an operator makes them (deploy/README.md).
	c.routeCerts = makeRouteCerts(ctx, t, "route-tls")
	c.env = append(c.env, "ROUTE_CERTS_DIR="+c.routeCerts)

	t.Cleanup(func() {
		if t.Failed() {
			out, err := c.composeRun(context.Background(), 2*time.Minute, "logs", "--no-color", "--timestamps", "--tail", "400")
			t.Logf("--- compose logs (%v):\n%s", err, out)
		}
		if out, err := c.composeRun(context.Background(), 3*time.Minute, "down", "--volumes", "--timeout", "5"); err != nil {
			t.Logf("compose down: %v\n%s", err, out)
		}
	})
	step(t, "compose up project %s (%s)", c.project, strings.Join(c.compose, " "))
	if out, err := c.composeRun(ctx, clusterUp, "up", "-d"); err != nil {
		t.Fatalf("compose up: %v\n%s", err, out)
	}
	for _, svc := range append(append([]string{"emulator"}, clusterNodes...), clusterWorkers...) {
		out, err := c.composeRun(ctx, time.Minute, "ps", "-q", svc)
		id := strings.TrimSpace(out)
		if err != nil || id == "" {
			t.Fatalf("compose ps -q %s: %q, %v", svc, out, err)
		}
		c.ids[svc] = id
	}
	out, err := c.docker(ctx, time.Minute, "inspect", "-f", "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}", c.ids["nats-1"])
	if c.network = strings.TrimSpace(out); err != nil || strings.Contains(c.network, " ") || c.network == "" {
		t.Fatalf("network of nats-1: %q, %v (want exactly one)", out, err)
	}
	c.emulatorURL = "http://127.0.0.1:" + c.ports["FOUNDRYQ_EMULATOR_PORT"]
	var urls, monitors []string
	for i := range clusterNodes {
		urls = append(urls, "nats://127.0.0.1:"+c.ports[fmt.Sprintf("FOUNDRYQ_NATS_%d_PORT", i+1)])
		monitors = append(monitors, c.monitorURL(clusterNodes[i])+"/jsz?acc=FOUNDRYQ&consumers=true")
	}
	dumpOnFailure(t, append(monitors, c.emulatorURL+"/_emulator/stats")...)
	testkit.WaitHTTP(t, startTimeout, c.emulatorURL+"/_emulator/stats", http.StatusOK, "")

	// A user application's settings: every node, and pings often enough to
	// leave a node that was cut off within seconds.
	c.nc, err = events.Connect(strings.Join(urls, ","), nats.UserInfo("client", clientPW), nats.Name("deploy-cluster-test"),
		nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond),
		nats.PingInterval(2*time.Second), nats.MaxPingsOutstanding(3),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.asyncMu.Lock()
			c.asyncErr = append(c.asyncErr, err)
			c.asyncMu.Unlock()
		}))
	if err != nil {
		t.Fatalf("connect as client to %v: %v", urls, err)
	}
	t.Cleanup(c.nc.Close)
	if c.js, err = jetstream.New(c.nc); err != nil {
		t.Fatal(err)
	}
	if c.client, err = events.NewClient(c.nc, events.ClientConfig{}); err != nil {
		t.Fatal(err)
	}
	c.names = c.client.Names()
	for _, w := range clusterWorkers {
		c.waitLog(ctx, t, w, time.Time{}, `"worker started"`, clusterUp)
	}
	step(t, "wait for the R3 streams and bucket")
	c.waitHealthy(ctx, t, clusterUp)
	for _, s := range c.streams() {
		info, err := c.js.Stream(ctx, s)
		if err != nil {
			t.Fatalf("stream %s: %v", s, err)
		}
		if r := info.CachedInfo().Config.Replicas; r != 3 {
			t.Fatalf("stream %s has %d replicas, want 3 (FOUNDRYQ_REPLICAS in compose.cluster.yml)", s, r)
		}
	}
	return c
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// freePorts returns n loopback ports free at the time of the call, for
// Compose to publish a moment later. They are drawn at random below the
// kernel's ephemeral range (ip_local_port_range): a port the kernel hands
// out for ":0" (another test's listener, Docker's proxy of a container
// published on a random port) would be taken again between this check and
// Compose's bind, as it once was ("bind: address already in use").
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	low := ephemeralLow(t)
	var ports []int
	var lns []net.Listener
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			t.Fatalf("no %d free loopback ports below %d", n, low)
		}
		port := 10000 + rand.IntN(low-10000)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue // taken: draw another
		}
		lns = append(lns, ln)
		ports = append(ports, port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// ephemeralLow is the first port of the kernel's ephemeral range, 32768
// where it cannot be read.
func ephemeralLow(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	fields := strings.Fields(string(data))
	if len(fields) != 2 {
		return 32768
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil || low <= 11000 {
		t.Fatalf("ip_local_port_range %q: want a range starting above 11000", data)
	}
	return low
}

func (c *cluster) streams() []string {
	return []string{c.names.RunsStream(), c.names.EventsStream(), "KV_" + c.names.Bucket()}
}

func (c *cluster) monitorURL(node string) string {
	i := strings.TrimPrefix(node, "nats-")
	return "http://127.0.0.1:" + c.ports["FOUNDRYQ_NATS_"+i+"_MONITOR_PORT"]
}

// composeRun runs a Compose command of the project, bounded by timeout.
func (c *cluster) composeRun(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	args = append(append(append([]string{}, c.compose[1:]...), "-f", c.file, "-p", c.project), args...)
	return c.exec(ctx, timeout, c.compose[0], args...)
}

// docker runs a docker CLI command, bounded by timeout.
func (c *cluster) docker(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	return c.exec(ctx, timeout, "docker", args...)
}

func (c *cluster) exec(ctx context.Context, timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = c.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return out.String(), nil
}

// waitLog waits until the service's output since since holds want.
func (c *cluster) waitLog(ctx context.Context, t *testing.T, svc string, since time.Time, want string, timeout time.Duration) {
	t.Helper()
	step(t, "wait for %s in the output of %s", want, svc)
	args := []string{"logs"}
	if !since.IsZero() {
		args = append(args, "--since", since.UTC().Format(time.RFC3339Nano))
	}
	args = append(args, c.ids[svc])
	deadline := time.Now().Add(timeout)
	for {
		out, err := c.docker(ctx, 30*time.Second, args...)
		if err == nil && strings.Contains(out, want) {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: no %s in its output after %s (last error %v)", svc, want, timeout, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitHealthy waits until each stream has a leader and two current
// replicas, none offline: every node holds a current copy.
func (c *cluster) waitHealthy(ctx context.Context, t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		last = c.unhealthy(ctx)
		if last == "" {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("the cluster is not healthy after %s: %s", timeout, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// unhealthy says what is not yet healthy, or "".
func (c *cluster) unhealthy(ctx context.Context) string {
	for _, s := range c.streams() {
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := c.js.Stream(ictx, s)
		cancel()
		if err != nil {
			return fmt.Sprintf("stream %s: %v", s, err)
		}
		cl := st.CachedInfo().Cluster
		if cl == nil || cl.Leader == "" {
			return fmt.Sprintf("stream %s: no leader", s)
		}
		peers := []string{cl.Leader}
		for _, r := range cl.Replicas {
			if !r.Current || r.Offline {
				return fmt.Sprintf("stream %s: replica %s current %v offline %v lag %d", s, r.Name, r.Current, r.Offline, r.Lag)
			}
			peers = append(peers, r.Name)
		}
		if len(peers) != len(clusterNodes) {
			return fmt.Sprintf("stream %s: peers %v, want %d", s, peers, len(clusterNodes))
		}
	}
	return ""
}

// waitNodeHealthz waits until the node's /healthz answers 200: its
// JetStream assets are current.
func (c *cluster) waitNodeHealthz(ctx context.Context, t *testing.T, node string, timeout time.Duration) {
	t.Helper()
	url := c.monitorURL(node) + "/healthz"
	deadline := time.Now().Add(timeout)
	hc := http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := hc.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = errors.New(resp.Status)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s %s after %s: %v", node, url, timeout, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// restartWorker stops a worker with SIGTERM (it hands its runs off), checks
// that it exited cleanly, and starts it again.
func (c *cluster) restartWorker(ctx context.Context, t *testing.T, w string) {
	t.Helper()
	step(t, "rolling restart: SIGTERM to %s", w)
	if out, err := c.docker(ctx, time.Minute, "stop", "-t", "30", c.ids[w]); err != nil {
		t.Fatalf("stop %s: %v\n%s", w, err, out)
	}
	out, err := c.docker(ctx, 30*time.Second, "inspect", "-f", "{{.State.ExitCode}}", c.ids[w])
	if err != nil || strings.TrimSpace(out) != "0" {
		t.Errorf("%s after SIGTERM: exit code %q, %v; want 0 (a clean hand-off)", w, strings.TrimSpace(out), err)
	}
	since := time.Now()
	if out, err := c.docker(ctx, time.Minute, "start", c.ids[w]); err != nil {
		t.Fatalf("start %s: %v\n%s", w, err, out)
	}
	c.waitLog(ctx, t, w, since.Add(-time.Second), `"worker started"`, clusterRecover)
}

// restartNode stops a NATS node (SIGTERM), starts it again and waits until
// it is current.
func (c *cluster) restartNode(ctx context.Context, t *testing.T, node string) {
	t.Helper()
	step(t, "rolling restart: stop %s", node)
	if out, err := c.docker(ctx, time.Minute, "stop", "-t", "30", c.ids[node]); err != nil {
		t.Fatalf("stop %s: %v\n%s", node, err, out)
	}
	step(t, "rolling restart: start %s", node)
	if out, err := c.docker(ctx, time.Minute, "start", c.ids[node]); err != nil {
		t.Fatalf("start %s: %v\n%s", node, err, out)
	}
	c.waitNodeHealthz(ctx, t, node, clusterRecover)
	c.waitHealthy(ctx, t, clusterRecover)
	step(t, "%s is back and current", node)
}

// cutLeader disconnects the node that leads the events stream from the
// network for clusterCut, reconnects it under its service name and waits
// until it is current.
func (c *cluster) cutLeader(ctx context.Context, t *testing.T) {
	t.Helper()
	info, err := c.js.Stream(ctx, c.names.EventsStream())
	if err != nil {
		t.Fatalf("stream %s: %v", c.names.EventsStream(), err)
	}
	node := info.CachedInfo().Cluster.Leader
	id, ok := c.ids[node]
	if !ok {
		t.Fatalf("the leader of %s is %q, not one of %v", c.names.EventsStream(), node, clusterNodes)
	}
	ip, _ := c.docker(ctx, 30*time.Second, "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", id)
	step(t, "cut %s (leader of %s, %s) off network %s for %s", node, c.names.EventsStream(), strings.TrimSpace(ip), c.network, clusterCut)
	if out, err := c.docker(ctx, time.Minute, "network", "disconnect", c.network, id); err != nil {
		t.Fatalf("disconnect %s: %v\n%s", node, err, out)
	}
	select {
	case <-time.After(clusterCut): // the fault's length, not a wait for a condition
	case <-ctx.Done():
		t.Fatalf("cut of %s: %v", node, ctx.Err())
	}
	step(t, "reconnect %s", node)
	if out, err := c.docker(ctx, time.Minute, "network", "connect", "--alias", node, c.network, id); err != nil {
		t.Fatalf("reconnect %s: %v\n%s", node, err, out)
	}
	after, _ := c.docker(ctx, 30*time.Second, "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", id)
	step(t, "%s reconnected with address %s", node, strings.TrimSpace(after))
	c.waitHealthy(ctx, t, clusterRecover)
	c.waitNodeHealthz(ctx, t, node, clusterRecover)
	step(t, "%s is back and current", node)
}
