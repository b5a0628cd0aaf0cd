package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/testkit"
	"github.com/foundryq/foundryq/internal/tlstest"
)

func TestMain(m *testing.M) {
	// Ryuk (the reaper container) would be pulled from a registry, and the
	// testcontainers config is read once: disable it before any call.
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
		_ = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	code := m.Run()
	removeImages()
	os.Exit(code)
}

const (
	emulatorKey = "emulator-key"
	// Bounds on the slow steps; every wait in these tests has one.
	buildTimeout   = 10 * time.Minute // two cold static builds on a busy 2-core machine
	startTimeout   = 60 * time.Second
	runTimeout     = 60 * time.Second
	shutdownWorker = 10 * time.Second // FOUNDRYQ_SHUTDOWN_TIMEOUT in the worker containers
)

// TestContainers runs the images FROM scratch on one Docker network: NATS
// with nats-server.conf (users and permissions), the Foundry emulator and two
// workers, and drives runs through the mapped NATS port as the "client" user.
func TestContainers(t *testing.T) {
	dockerHost := requireDocker(t)
	img := buildImages(t, dockerHost)
	s := startStack(t, img)

	t.Run("run completes with the emulator's text", s.testComplete)
	t.Run("cancel reaches Foundry", s.testCancel)
	t.Run("the gateway container serves runs as NATS user gateway, refused nothing", s.testGatewayContainer)
	t.Run("KEDA sees the work queue in /jsz", s.testJSZ)
	t.Run("SIGTERM hands a run to the other worker", s.testHandoff)
	t.Run("with no worker running, a cancel is stored durably", s.testCancelNoWorker)
	t.Run("client used only allowed subjects", s.testClientClean)
	t.Run("client may not publish events or administer streams", s.testClientDenied)
	t.Run("worker may not store cancels or send clients' requests", s.testWorkerDenied)
	t.Run("anonymous connections are refused", s.testAnonymous)
	t.Run("the gateway role reads a queued run's time, not worker subjects", s.testGatewayRole)
	t.Run("the tools role serves a worker's call, and reads no events", s.testToolsRole)
	t.Run("an empty password stops the NATS image", func(t *testing.T) { testEmptyPassword(t, img) })
	t.Run("dev.conf runs JetStream without auth", func(t *testing.T) { testDevConf(t, img) })
	t.Run("the image's nats-server-tls.conf serves mutual TLS", func(t *testing.T) { testTLSConf(t, img) })
}

// requireDocker skips the test when no Docker engine answers, or fails it
// when FOUNDRYQ_REQUIRE_DOCKER=1 (CI). It returns the engine's address, for
// the docker CLI calls to reach the same engine as testcontainers (which
// falls back to the default socket when DOCKER_HOST does not answer).
func requireDocker(t *testing.T) string {
	t.Helper()
	required := os.Getenv("FOUNDRYQ_REQUIRE_DOCKER") == "1"
	if testing.Short() && !required {
		t.Skip("container tests are skipped by -short")
	}
	fail := t.Skipf
	if required {
		fail = t.Fatalf
	}
	for _, tool := range []string{"docker", "bash", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			fail("container tests need %s on PATH: %v", tool, err)
		}
	}
	if !required {
		testcontainers.SkipIfProviderIsNotHealthy(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	provider, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		fail("no Docker provider (FOUNDRYQ_REQUIRE_DOCKER=1 makes this a failure): %v", err)
	}
	defer provider.Close()
	if err := provider.Health(ctx); err != nil {
		fail("the Docker engine does not answer (FOUNDRYQ_REQUIRE_DOCKER=1 makes this a failure): %v", err)
	}
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		fail("docker client: %v", err)
	}
	defer cli.Close()
	return cli.DaemonHost()
}

// images names the two images built for the tests.
type images struct{ app, nats, tag string }

// built is the one build of the images that every container test of a run
// shares (two static builds cost tens of seconds); TestMain removes them.
var built struct {
	once sync.Once
	img  images
	env  []string // the environment of the docker CLI calls
	took time.Duration
	err  error
}

// buildImages builds foundryq and nats-server statically and both images
// FROM scratch with deploy/build-images.sh, under a tag unique to this test
// run, once per run.
func buildImages(t *testing.T, dockerHost string) images {
	t.Helper()
	built.once.Do(func() { built.img, built.env, built.took, built.err = buildImagesOnce(deployDir(t), dockerHost) })
	if built.err != nil {
		t.Fatalf("build the images: %v", built.err)
	}
	t.Logf("images %s and %s (built in %s)", built.img.app, built.img.nats, built.took.Round(time.Millisecond))
	return built.img
}

func buildImagesOnce(dir, dockerHost string) (images, []string, time.Duration, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return images{}, nil, 0, err
	}
	tag := "test-" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(dir, "build-images.sh"))
	env := append(os.Environ(), "DOCKER_HOST="+dockerHost)
	cmd.Env = append(env, "FOUNDRYQ_IMAGE_TAG="+tag, "FOUNDRYQ_IMAGE_PREFIX=")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	img := images{app: "foundryq:" + tag, nats: "foundryq-nats:" + tag, tag: tag}
	if err != nil {
		return img, env, 0, fmt.Errorf("build-images.sh: %w\n%s%s", err, stderr.String(), stdout.String())
	}
	lines := strings.Fields(stdout.String())
	if len(lines) < 2 || lines[len(lines)-2] != img.app || lines[len(lines)-1] != img.nats {
		return img, env, 0, fmt.Errorf("build-images.sh printed %q, want the image names %s and %s", stdout.String(), img.app, img.nats)
	}
	return img, env, time.Since(start), nil
}

// removeImages removes the images built by this run, if any.
func removeImages() {
	if built.img.tag == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rmi := exec.CommandContext(ctx, "docker", "rmi", "--force", built.img.app, built.img.nats)
	rmi.Env = built.env
	if out, err := rmi.CombinedOutput(); err != nil && !strings.Contains(string(out), "No such image") {
		fmt.Fprintf(os.Stderr, "remove images %s, %s: %v: %s\n", built.img.app, built.img.nats, err, out)
	}
}

func deployDir(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the deploy directory")
	}
	return filepath.Dir(file)
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// stack is NATS, the emulator and two workers on one network.
type stack struct {
	img                  images
	net                  *testcontainers.DockerNetwork
	nats, emulator       *testcontainers.DockerContainer
	natsLog              *logSink                                   // the NATS server's output
	workers              map[string]*testcontainers.DockerContainer // by FOUNDRYQ_WORKER_ID
	host                 string                                     // where published ports are reached
	natsURL, monitorURL  string                                     // mapped ports, no credentials
	emulatorURL          string
	workerPass, clientPW string
	gatewayPW, toolsPW   string

	nc       *nats.Conn // the client user
	js       jetstream.JetStream
	client   *events.Client
	asyncMu  sync.Mutex
	asyncErr []error // async errors on nc (permission violations)
}

func startStack(t *testing.T, img images) *stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*startTimeout)
	defer cancel()
	// Passwords start with a letter: nats-server parses the value of an
	// environment variable as a config token.
	s := &stack{img: img, workerPass: "w" + randomHex(t, 12), clientPW: "c" + randomHex(t, 12), gatewayPW: "g" + randomHex(t, 12), toolsPW: "t" + randomHex(t, 12), workers: map[string]*testcontainers.DockerContainer{}}

	nw, err := network.New(ctx)
	if err != nil {
		t.Fatalf("create network: %v", err)
	}
	testcontainers.CleanupNetwork(t, nw)
	s.net = nw

	step(t, "start NATS (nats-server.conf), the emulator and two workers on network %s", nw.Name)
	s.nats, s.natsLog = runLogged(ctx, t, "nats", img.nats,
		network.WithNetwork([]string{"nats"}, nw),
		testcontainers.WithEnv(map[string]string{"WORKER_PASSWORD": s.workerPass, "CLIENT_PASSWORD": s.clientPW, "GATEWAY_PASSWORD": s.gatewayPW, "TOOLS_PASSWORD": s.toolsPW}),
		testcontainers.WithExposedPorts("4222/tcp", "8222/tcp"),
		testcontainers.WithWaitStrategy(wait.ForLog("Server is ready").WithStartupTimeout(startTimeout)),
	)
	s.emulator = run(ctx, t, "emulator", img.app,
		network.WithNetwork([]string{"emulator"}, nw),
		testcontainers.WithCmd("emulator", "--addr", "0.0.0.0:8089"),
		testcontainers.WithEnv(map[string]string{"FOUNDRYQ_EMULATOR_API_KEY": emulatorKey, "LOG_FORMAT": "json"}),
		testcontainers.WithExposedPorts("8089/tcp"),
		testcontainers.WithWaitStrategy(wait.ForLog("Foundry emulator serving").WithStartupTimeout(startTimeout)),
	)
	s.host = reachableHost(ctx, t, s.nats, "4222/tcp")
	s.natsURL = "nats://" + s.endpoint(ctx, t, s.nats, "4222/tcp")
	s.monitorURL = "http://" + s.endpoint(ctx, t, s.nats, "8222/tcp")
	s.emulatorURL = "http://" + s.endpoint(ctx, t, s.emulator, "8089/tcp")
	testkit.WaitHTTP(t, startTimeout, s.emulatorURL+"/_emulator/stats", http.StatusOK, "")
	dumpOnFailure(t, s.monitorURL+"/jsz?acc=FOUNDRYQ&consumers=true", s.emulatorURL+"/_emulator/stats")

	for _, id := range []string{"worker-a", "worker-b"} {
		s.workers[id] = run(ctx, t, id, img.app,
			network.WithNetwork([]string{id}, nw),
			testcontainers.WithCmd("worker"),
			testcontainers.WithEnv(map[string]string{
				"NATS_URL":                  "nats://nats:4222",
				"NATS_USER":                 "worker",
				"NATS_PASSWORD":             s.workerPass,
				"FOUNDRY_ENDPOINT":          "http://emulator:8089/openai/v1/",
				"FOUNDRY_ALLOW_HTTP":        "true", // the emulator, on the test's private network
				"FOUNDRY_API_KEY":           emulatorKey,
				"FOUNDRYQ_WORKER_ID":        id,
				"FOUNDRYQ_CONCURRENCY":      "8",
				"FOUNDRYQ_SHUTDOWN_TIMEOUT": shutdownWorker.String(),
				"LOG_FORMAT":                "json",
			}),
			testcontainers.WithExposedPorts("9090/tcp"),
			testcontainers.WithWaitStrategy(wait.ForLog("worker started").WithStartupTimeout(startTimeout)),
		)
		testkit.WaitHTTP(t, startTimeout, "http://"+s.endpoint(ctx, t, s.workers[id], "9090/tcp")+"/healthz", http.StatusOK, "")
	}

	nc, err := events.Connect(s.natsURL, nats.UserInfo("client", s.clientPW), nats.Name("deploy-test-client"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			s.asyncMu.Lock()
			s.asyncErr = append(s.asyncErr, err)
			s.asyncMu.Unlock()
		}))
	if err != nil {
		t.Fatalf("connect as client to %s: %v", s.natsURL, err)
	}
	t.Cleanup(nc.Close)
	s.nc = nc
	if s.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	if s.client, err = events.NewClient(nc, events.ClientConfig{}); err != nil {
		t.Fatal(err)
	}
	return s
}

// run starts a container from a local image and removes it at the end. Its
// output is kept and printed if the test fails.
func run(ctx context.Context, t *testing.T, name, image string, opts ...testcontainers.ContainerCustomizer) *testcontainers.DockerContainer {
	t.Helper()
	ctr, _ := runLogged(ctx, t, name, image, opts...)
	return ctr
}

// runLogged is run, and also returns the container's output so far at
// any moment.
func runLogged(ctx context.Context, t *testing.T, name, image string, opts ...testcontainers.ContainerCustomizer) (*testcontainers.DockerContainer, *logSink) {
	t.Helper()
	logs := &logSink{}
	opts = append(opts, testcontainers.WithLogConsumers(logs))
	// The log consumer lives as long as the context given to Run: use one
	// that outlives this call. The wait strategies bound the start.
	ctr, err := testcontainers.Run(context.WithoutCancel(ctx), image, opts...)
	testcontainers.CleanupContainer(t, ctr)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- %s (%s) output:\n%s", name, image, logs.String())
		}
	})
	if err != nil {
		t.Fatalf("start %s from %s: %v", name, image, err)
	}
	return ctr, logs
}

// logSink collects a container's output (testcontainers.LogConsumer).
type logSink struct{ testkit.Buffer }

func (b *logSink) Accept(l testcontainers.Log) { _, _ = b.Write(l.Content) }

// reachableHost finds the address at which this process reaches ctr's
// published port. testcontainers guesses the Docker network gateway when the
// tests run inside a container (/.dockerenv); that is right when the engine
// runs elsewhere (socket mounted in), wrong when it runs in the same
// container, so each candidate is dialled. TESTCONTAINERS_HOST_OVERRIDE, if
// set, is the only candidate.
func reachableHost(ctx context.Context, t *testing.T, ctr *testcontainers.DockerContainer, port string) string {
	t.Helper()
	mp, err := ctr.MappedPort(ctx, port)
	if err != nil {
		t.Fatalf("mapped port %s: %v", port, err)
	}
	var candidates []string
	if h := os.Getenv("TESTCONTAINERS_HOST_OVERRIDE"); h != "" {
		candidates = []string{h}
	} else {
		if h, err := ctr.Host(ctx); err == nil {
			candidates = append(candidates, strings.Replace(h, "localhost", "127.0.0.1", 1))
		}
		candidates = append(candidates, "127.0.0.1")
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for _, h := range candidates {
			conn, err := net.DialTimeout("tcp", net.JoinHostPort(h, mp.Port()), 500*time.Millisecond)
			if err == nil {
				conn.Close()
				return h
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("published port %s (host port %s) not reachable at any of %v", port, mp.Port(), candidates)
	return ""
}

// endpoint is host:port for ctr's published port.
func (s *stack) endpoint(ctx context.Context, t *testing.T, ctr *testcontainers.DockerContainer, port string) string {
	t.Helper()
	mp, err := ctr.MappedPort(ctx, port)
	if err != nil {
		t.Fatalf("mapped port %s: %v", port, err)
	}
	return net.JoinHostPort(s.host, mp.Port())
}

// watchAll follows a run to its terminal event, calling each(ev) on every
// event (each may act, e.g. cancel). It checks that seq goes 1, 2, 3, ...
// with exactly one terminal event at the end.
func (s *stack) watchAll(t *testing.T, ctx context.Context, runID string, each func(events.RunEvent)) []events.RunEvent {
	t.Helper()
	step(t, "watch run %s", runID)
	wctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	w := s.client.Watch(wctx, runID, events.WatchOptions{})
	defer w.Close()
	var evs []events.RunEvent
	for {
		ev, err := w.Next(wctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("watch %s after %d events: %v", runID, len(evs), err)
		}
		if want := uint64(len(evs) + 1); ev.Seq != want {
			t.Fatalf("run %s: event seq %d (%s), want %d", runID, ev.Seq, ev.Type, want)
		}
		evs = append(evs, ev)
		if each != nil {
			each(ev)
		}
	}
	if len(evs) == 0 || !evs[len(evs)-1].Type.Terminal() {
		t.Fatalf("run %s: watch ended without a terminal event: %v", runID, types(evs))
	}
	for _, ev := range evs[:len(evs)-1] {
		if ev.Type.Terminal() {
			t.Fatalf("run %s: two terminal events: %v", runID, types(evs))
		}
	}
	step(t, "run %s ended %s after %d events", runID, evs[len(evs)-1].Type, len(evs))
	return evs
}

func types(evs []events.RunEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = string(ev.Type)
	}
	return out
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

func responseID(t *testing.T, evs []events.RunEvent) string {
	t.Helper()
	for _, ev := range evs {
		if ev.ResponseID != "" {
			return ev.ResponseID
		}
	}
	t.Fatalf("no event carries a response id: %v", types(evs))
	return ""
}

func (s *stack) submit(t *testing.T, ctx context.Context, metadata map[string]string) string {
	t.Helper()
	id := events.NewRunID()
	step(t, "submit run %s (metadata %v)", id, metadata)
	if _, err := s.client.Submit(ctx, events.RunRequest{RunID: id, Model: "m", Input: json.RawMessage(`"hi"`), Metadata: metadata}); err != nil {
		t.Fatalf("submit %s: %v", id, err)
	}
	return id
}

// emulatorResponse is the part of a stored Responses object the tests read.
type emulatorResponse struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Output []struct {
		Type    string `json:"type"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
}

func (r emulatorResponse) text() string {
	var b strings.Builder
	for _, item := range r.Output {
		for _, c := range item.Content {
			if c.Type == "output_text" {
				b.WriteString(c.Text)
			}
		}
	}
	return b.String()
}

// emulatorStats is the part of GET /_emulator/stats the tests read.
type emulatorStats struct {
	ResponsesByRun    map[string]int    `json:"responses_by_run"`
	Statuses          map[string]string `json:"statuses"`
	CancelsReceived   int               `json:"cancels_received"`
	TokensAfterCancel int               `json:"tokens_after_cancel"`
}

func (s *stack) getJSON(t *testing.T, ctx context.Context, url string, auth bool, v any) {
	t.Helper()
	step(t, "GET %s", url)
	key := ""
	if auth {
		key = emulatorKey
	}
	getJSONKey(t, ctx, url, key, v)
}

func (s *stack) response(t *testing.T, ctx context.Context, id string) emulatorResponse {
	t.Helper()
	var r emulatorResponse
	s.getJSON(t, ctx, s.emulatorURL+"/openai/v1/responses/"+id, true, &r)
	return r
}

func (s *stack) stats(t *testing.T, ctx context.Context) emulatorStats {
	t.Helper()
	var st emulatorStats
	s.getJSON(t, ctx, s.emulatorURL+"/_emulator/stats", false, &st)
	return st
}

func (s *stack) testComplete(t *testing.T) {
	ctx := context.Background()
	id := s.submit(t, ctx, map[string]string{"emu_tokens": "40"})
	evs := s.watchAll(t, ctx, id, nil)
	last := evs[len(evs)-1]
	if last.Type != events.TypeRunCompleted || last.Status != "completed" {
		t.Fatalf("terminal event %s status %q, want run.completed/completed (events %v)", last.Type, last.Status, types(evs))
	}
	rid := responseID(t, evs)
	resp := s.response(t, ctx, rid)
	if resp.Status != "completed" {
		t.Errorf("emulator response %s status %q, want completed", rid, resp.Status)
	}
	if got, want := text(evs), resp.text(); got != want || want == "" {
		t.Errorf("relayed text %q\nwant the emulator's %q", got, want)
	}
	if n := s.stats(t, ctx).ResponsesByRun[id]; n != 1 {
		t.Errorf("emulator created %d responses for run %s, want 1", n, id)
	}
	step(t, "read the state of %s", id)
	st, _, err := s.client.State(ctx, id)
	if err != nil {
		t.Fatalf("state of %s: %v", id, err)
	}
	if st.Status != events.StatusCompleted {
		t.Errorf("state of %s: status %q, want completed", id, st.Status)
	}
}

func (s *stack) testCancel(t *testing.T) {
	ctx := context.Background()
	id := s.submit(t, ctx, map[string]string{"emu_tokens": "2000", "emu_token_ms": "20"}) // ~40s if not cancelled
	var cancelledAt time.Time
	evs := s.watchAll(t, ctx, id, func(ev events.RunEvent) {
		if ev.Type != events.TypeTextDelta || !cancelledAt.IsZero() {
			return
		}
		cancelledAt = time.Now()
		reply, err := s.client.Cancel(ctx, id, "deploy test")
		if err != nil {
			t.Errorf("cancel %s: %v", id, err)
			return
		}
		if reply.Result != events.CancelCancelling {
			t.Errorf("cancel %s: result %q, want cancelling", id, reply.Result)
		}
	})
	last := evs[len(evs)-1]
	if last.Type != events.TypeRunCancelled || last.Reason != events.ReasonRequested {
		t.Fatalf("terminal event %s reason %q, want run.cancelled/requested (events %v)", last.Type, last.Reason, types(evs))
	}
	if d := time.Since(cancelledAt); d > 15*time.Second {
		t.Errorf("run.cancelled came %s after the cancel", d)
	}
	rid := responseID(t, evs)
	if st := s.stats(t, ctx); st.Statuses[rid] != "cancelled" {
		t.Errorf("emulator status of %s: %q, want cancelled (cancels received %d)", rid, st.Statuses[rid], st.CancelsReceived)
	}
	if got := text(evs); len(got) == 0 || strings.Count(got, " ") > 1000 {
		t.Errorf("cancelled run relayed %d bytes of text; want some, far from the 2000 tokens", len(got))
	}
}

// testJSZ reads what KEDA's nats-jetstream scaler reads: the monitoring
// endpoint /jsz for account FOUNDRYQ, stream FOUNDRYQ_RUNS, consumer
// foundryq-workers (deploy/k8s/scaledobject.yaml).
func (s *stack) testJSZ(t *testing.T) {
	var jsz struct {
		AccountDetails []struct {
			Name    string `json:"name"`
			Streams []struct {
				Name      string `json:"name"`
				Consumers []struct {
					Name          string `json:"name"`
					NumPending    uint64 `json:"num_pending"`
					NumAckPending int    `json:"num_ack_pending"`
				} `json:"consumer_detail"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	s.getJSON(t, context.Background(), s.monitorURL+"/jsz?acc=FOUNDRYQ&consumers=true&config=true", false, &jsz)
	for _, acc := range jsz.AccountDetails {
		for _, st := range acc.Streams {
			for _, c := range st.Consumers {
				if acc.Name == "FOUNDRYQ" && st.Name == "FOUNDRYQ_RUNS" && c.Name == "foundryq-workers" {
					return
				}
			}
		}
	}
	t.Fatalf("/jsz?acc=FOUNDRYQ has no stream FOUNDRYQ_RUNS with consumer foundryq-workers: %+v", jsz)
}

// testHandoff stops the worker that owns a run with SIGTERM; the other
// worker re-attaches to the same Foundry response and finishes the run with
// no token lost or repeated.
func (s *stack) testHandoff(t *testing.T) {
	ctx := context.Background()
	id := s.submit(t, ctx, map[string]string{"emu_tokens": "300", "emu_token_ms": "20"}) // ~6s
	var (
		owner   string
		stopped = make(chan error, 1)
		deltas  int
	)
	evs := s.watchAll(t, ctx, id, func(ev events.RunEvent) {
		if ev.Type == events.TypeRunStarted && owner == "" {
			owner = ev.Worker
		}
		if ev.Type == events.TypeTextDelta {
			deltas++
		}
		if deltas == 3 && owner != "" {
			deltas++ // stop once
			ctr, ok := s.workers[owner]
			if !ok {
				t.Errorf("run.started names worker %q, not one of the test's", owner)
				stopped <- nil
				return
			}
			step(t, "SIGTERM to %s, the owner of run %s", owner, id)
			go func() {
				timeout := 3 * shutdownWorker
				stopped <- ctr.Stop(ctx, &timeout) // SIGTERM, SIGKILL after timeout
			}()
		}
	})
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("stop %s: %v", owner, err)
		}
	case <-time.After(4 * shutdownWorker):
		t.Fatalf("stopping %s did not return", owner)
	}
	last := evs[len(evs)-1]
	if last.Type != events.TypeRunCompleted {
		t.Fatalf("terminal event %s, want run.completed (events %v)", last.Type, types(evs))
	}
	var starts []string
	for _, ev := range evs {
		if ev.Type == events.TypeRunStarted {
			starts = append(starts, fmt.Sprintf("%s#%d", ev.Worker, ev.Attempt))
		}
	}
	if len(starts) < 2 || strings.HasPrefix(starts[len(starts)-1], owner+"#") {
		t.Errorf("run.started events %v: want a later start on the other worker than %s", starts, owner)
	}
	rid := responseID(t, evs)
	if got, want := text(evs), s.response(t, ctx, rid).text(); got != want {
		t.Errorf("text after the hand-off differs from the emulator's:\n got %q\nwant %q", got, want)
	}
	if n := s.stats(t, ctx).ResponsesByRun[id]; n != 1 {
		t.Errorf("emulator created %d responses for run %s, want 1 (re-attach, not re-create)", n, id)
	}
	insp, err := s.workers[owner].Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if insp.State.Running || insp.State.ExitCode != 0 {
		t.Errorf("%s after SIGTERM: running %v, exit code %d; want a clean exit", owner, insp.State.Running, insp.State.ExitCode)
	}
	delete(s.workers, owner)
}

// testCancelNoWorker stops the remaining workers; the client can still tell
// a queued run from the runs stream's subject counts (without reading the
// job), store a cancel durably on the cancels stream, and list the runs.
// These are wire-level checks of what Client.Submit and Client.Cancel do in
// the final design (clients never write run state).
func (s *stack) testCancelNoWorker(t *testing.T) {
	ctx := context.Background()
	for id, ctr := range s.workers {
		step(t, "stop %s", id)
		timeout := 3 * shutdownWorker
		if err := ctr.Stop(ctx, &timeout); err != nil {
			t.Fatalf("stop %s: %v", id, err)
		}
		delete(s.workers, id)
	}
	names := s.client.Names()
	ensureCancelsStream(t, ctx, s.natsURL, s.workerPass, names)
	id := s.submit(t, ctx, nil)
	runs, err := s.js.Stream(ctx, names.RunsStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := runs.Info(ctx, jetstream.WithSubjectFilter(names.RunSubject(id)))
	if err != nil || info.State.Subjects[names.RunSubject(id)] != 1 {
		t.Fatalf("queued run %s by the runs stream's subject counts: %v, %v", id, info, err)
	}
	ack, err := s.js.Publish(ctx, names.CancelRecordSubject(id), []byte(`{"reason":"no worker"}`))
	if err != nil || ack.Stream != names.CancelsStream() {
		t.Fatalf("durable cancel record of %s: %+v, %v", id, ack, err)
	}
	if _, err := s.nc.Request(names.CancelSubject(id), []byte(`{"reason":"no worker"}`), 5*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("cancel request with no worker: %v, want no responders", err)
	}
	// Listing runs (foundryq runs) reads the bucket stream's subjects.
	kvStream, err := s.js.Stream(ctx, "KV_"+names.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kvStream.Info(ctx, jetstream.WithSubjectFilter("$KV."+names.Bucket()+".>")); err != nil {
		t.Fatalf("list run states: %v", err)
	}
}

// ensureCancelsStream creates the durable cancel records stream as the
// worker user if the workers' foundryq does not create it yet.
func ensureCancelsStream(t *testing.T, ctx context.Context, natsURL, workerPass string, names events.Names) {
	t.Helper()
	nc, err := events.Connect(natsURL, nats.UserInfo("worker", workerPass))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, names.CancelsStream()); errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: names.CancelsStream(), Subjects: []string{names.CancelRecordsWildcard()}, MaxAge: time.Hour}); err != nil {
			t.Fatalf("create %s: %v", names.CancelsStream(), err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
}

// testClientClean checks that everything the client did so far (submit,
// watch, state, cancel, list) stayed inside the client user's permissions.
func (s *stack) testClientClean(t *testing.T) {
	if err := s.nc.FlushTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	s.asyncMu.Lock()
	defer s.asyncMu.Unlock()
	for _, err := range s.asyncErr {
		t.Errorf("client connection error: %v", err)
	}
}

// denied connects as user and returns a channel of the permission
// violations the server reports to that connection.
func (s *stack) denied(t *testing.T, user, pass string) (*nats.Conn, <-chan error) {
	t.Helper()
	errs := make(chan error, 16)
	nc, err := events.Connect(s.natsURL, nats.UserInfo(user, pass), nats.Name("deploy-test-"+user),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

// expectViolation waits for the server's permission violation on subject.
func expectViolation(t *testing.T, errs <-chan error, subject string) {
	t.Helper()
	deadline := time.After(deniedWait)
	for {
		select {
		case err := <-errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return
			}
			t.Logf("other async error: %v", err)
		case <-deadline:
			t.Fatalf("no permission violation reported for %s", subject)
		}
	}
}

func (s *stack) testClientDenied(t *testing.T) {
	nc, errs := s.denied(t, "client", s.clientPW)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	subject := "foundryq.events." + events.NewRunID()
	if _, err := js.Publish(pctx, subject, []byte(`{}`)); err == nil {
		t.Fatalf("client published a run event on %s", subject)
	}
	expectViolation(t, errs, subject)

	if err := nc.Publish("foundryq.dead.x", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	expectViolation(t, errs, "foundryq.dead.x")

	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := js.DeleteStream(actx, "FOUNDRYQ_RUNS"); err == nil {
		t.Fatal("client deleted stream FOUNDRYQ_RUNS")
	}
	expectViolation(t, errs, "$JS.API.STREAM.DELETE.FOUNDRYQ_RUNS")

	kctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := js.Publish(kctx, "$KV.foundryq-runs.x", []byte(`{}`)); err == nil {
		t.Fatal("client wrote the state bucket")
	}
	expectViolation(t, errs, "$KV.foundryq-runs.x")
	if _, err := nc.Subscribe("_INBOX.worker.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	expectViolation(t, errs, "_INBOX.worker.>")
	if _, err := s.js.Stream(ctx, "FOUNDRYQ_RUNS"); err != nil {
		t.Fatalf("stream FOUNDRYQ_RUNS after the denied delete: %v", err)
	}
}

// A worker may queue a waiting run's own request again (the next step of a
// run that asks), but never stores a cancel record nor sends what only
// clients send: cancel requests and answers.
func (s *stack) testWorkerDenied(t *testing.T) {
	nc, errs := s.denied(t, "worker", s.workerPass)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	subject := "foundryq.cancels." + events.NewRunID()
	if _, err := js.Publish(pctx, subject, []byte(`{"reason":"forged"}`)); err == nil {
		t.Fatalf("worker stored a cancel record on %s", subject)
	}
	expectViolation(t, errs, subject)
	for _, subject := range []string{"foundryq.cancel.x", "foundryq.input.x"} {
		if err := nc.Publish(subject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		expectViolation(t, errs, subject)
	}
}

func (s *stack) testAnonymous(t *testing.T) {
	nc, err := nats.Connect(s.natsURL, nats.Timeout(5*time.Second))
	if err == nil {
		nc.Close()
		t.Fatal("connected without credentials")
	}
	if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("connect without credentials: %v, want an authorization violation", err)
	}
	if _, err := nats.Connect(s.natsURL, nats.UserInfo("client", "wrong"), nats.Timeout(5*time.Second)); err == nil {
		t.Fatal("connected with a wrong password")
	}
}

// testDevConf starts the NATS image as docker-compose.yml does.
func testDevConf(t *testing.T, img images) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	ctr := run(ctx, t, "nats-dev", img.nats,
		testcontainers.WithCmd("--config", "/etc/nats/dev.conf"),
		testcontainers.WithExposedPorts("4222/tcp"),
		testcontainers.WithWaitStrategy(wait.ForLog("Server is ready").WithStartupTimeout(startTimeout)),
	)
	host := reachableHost(ctx, t, ctr, "4222/tcp")
	mp, err := ctr.MappedPort(ctx, "4222/tcp")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("nats://"+net.JoinHostPort(host, mp.Port()), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect to the dev server: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// A file stream proves /data is writable by the image's user 65534.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "PROBE", Subjects: []string{"probe.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("create a file stream on the dev server: %v", err)
	}
	if _, err := js.Publish(ctx, "probe.x", []byte("x")); err != nil {
		t.Fatalf("publish to the file stream: %v", err)
	}
}

// testTLSConf starts the NATS image with nats-server-tls.conf, as in
// Kubernetes: certificates mounted at /etc/nats/tls (made by the test), the
// passwords and the store key in the environment. It checks the image
// carries the file and what it includes, and that a client needs TLS and
// its certificate.
func testTLSConf(t *testing.T, img images) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*startTimeout)
	defer cancel()
	certs := tlstest.New(t)
	var files []testcontainers.ContainerFile
	for src, dst := range map[string]string{certs.ServerCert: "tls.crt", certs.ServerKey: "tls.key", certs.CA: "ca.crt"} {
		files = append(files, testcontainers.ContainerFile{HostFilePath: src, ContainerFilePath: "/etc/nats/tls/" + dst, FileMode: 0o644})
	}
	clientPW := "c" + randomHex(t, 12)
	ctr := run(ctx, t, "nats-tls", img.nats,
		testcontainers.WithCmd("--config", "/etc/nats/nats-server-tls.conf"),
		testcontainers.WithFiles(files...),
		testcontainers.WithEnv(map[string]string{"WORKER_PASSWORD": "w" + randomHex(t, 12), "CLIENT_PASSWORD": clientPW, "GATEWAY_PASSWORD": "g" + randomHex(t, 12), "TOOLS_PASSWORD": "t" + randomHex(t, 12), "JETSTREAM_KEY": "k" + randomHex(t, 16)}),
		testcontainers.WithExposedPorts("4222/tcp"),
		testcontainers.WithWaitStrategy(wait.ForLog("Server is ready").WithStartupTimeout(startTimeout)),
	)
	host := reachableHost(ctx, t, ctr, "4222/tcp")
	mp, err := ctr.MappedPort(ctx, "4222/tcp")
	if err != nil {
		t.Fatal(err)
	}
	url := "tls://" + net.JoinHostPort(host, mp.Port())
	cert, err := tls.LoadX509KeyPair(certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(certs.CA)
	if err != nil || !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("read CA: %v", err)
	}
	// The certificate names localhost; the published port may be reached
	// through another address.
	tlsConfig := &tls.Config{ServerName: "localhost", RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	nc, err := events.Connect(url, nats.UserInfo("client", clientPW), nats.Secure(tlsConfig), nats.Timeout(10*time.Second))
	if err != nil {
		t.Fatalf("connect over mutual TLS: %v", err)
	}
	nc.Close()
	noCert := &tls.Config{ServerName: "localhost", RootCAs: pool, MinVersion: tls.VersionTLS12}
	if nc, err := events.Connect(url, nats.UserInfo("client", clientPW), nats.Secure(noCert), nats.Timeout(10*time.Second)); err == nil {
		nc.Close()
		t.Fatal("connected without a client certificate")
	}
}

// testGatewayRole connects as the gateway user of the image's
// nats-server.conf: it may read a queued request (the time GET
// /v1/runs/{id} reports) and may not publish workers' notices.
func (s *stack) testGatewayRole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	errs := make(chan error, 16)
	nc, err := events.Connect(s.natsURL, nats.UserInfo("gateway", s.gatewayPW), nats.Timeout(5*time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connect as gateway: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names := events.Names{}
	runs, err := js.Stream(ctx, names.RunsStream())
	if err != nil {
		t.Fatalf("gateway: runs stream info: %v", err)
	}
	// No request of this id is queued: the look-up is allowed and finds none.
	if _, err := runs.GetLastMsgForSubject(ctx, names.RunSubject("gw-container-none")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("gateway: look up a queued request: %v, want not found (allowed)", err)
	}
	if err := nc.Publish(names.NoticeSubject("gw-container"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	expectViolation(t, errs, names.NoticeSubject("gw-container"))
	// The server logs it as a violation of the gateway user: what
	// testGatewayContainer finds none of is there to be found.
	testkit.Eventually(t, deniedWait, "the NATS log's line for the gateway user's violation", func() bool {
		return slices.ContainsFunc(violationsOf(s.natsLog.String(), "gateway"), func(l string) bool {
			return strings.Contains(l, names.NoticeSubject("gw-container"))
		})
	})
}

// testGatewayContainer runs `foundryq gateway` from the app image on the
// test network as the NATS user "gateway" of the image's nats-server.conf
// (least privilege), with a bearer token, and drives it as a client
// would: submit a run and GET it, follow its event stream to the end,
// cancel a second one mid-stream. The NATS server must have logged no
// permission violation of the gateway user meanwhile (testGatewayRole,
// later, shows that such a violation is logged).
func (s *stack) testGatewayContainer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*runTimeout)
	defer cancel()
	if v := violationsOf(s.natsLog.String(), "gateway"); len(v) > 0 {
		t.Fatalf("violations of the gateway user before its container started: %q", v)
	}
	token := "tok" + randomHex(t, 16)
	sum := sha256.Sum256([]byte(token))
	gw := run(ctx, t, "gateway", s.img.app,
		network.WithNetwork([]string{"gateway"}, s.net),
		testcontainers.WithCmd("gateway", "--addr", "0.0.0.0:8080"),
		testcontainers.WithEnv(map[string]string{
			"NATS_URL":                "nats://nats:4222",
			"NATS_USER":               "gateway",
			"NATS_PASSWORD":           s.gatewayPW,
			"FOUNDRYQ_GATEWAY_TOKENS": "sha256:" + hex.EncodeToString(sum[:]),
		}),
		testcontainers.WithExposedPorts("8080/tcp"),
		testcontainers.WithWaitStrategy(wait.ForLog("gateway listening").WithStartupTimeout(startTimeout)),
	)
	base := "http://" + s.endpoint(ctx, t, gw, "8080/tcp")
	call := func(method, path string, body any) (int, string) {
		t.Helper()
		resp := testkit.Do(t, ctx, http.DefaultClient, method, base+path, body, "Authorization", "Bearer "+token)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s: read: %v", method, path, err)
		}
		return resp.StatusCode, string(b)
	}

	step(t, "gateway: submit a run, GET it, follow its events to the end")
	id := events.NewRunID()
	if code, out := call(http.MethodPost, "/v1/runs", map[string]any{"run_id": id, "model": "m", "input": "hi", "metadata": map[string]string{"emu_tokens": "20"}}); code != http.StatusCreated {
		t.Fatalf("POST /v1/runs: %d %s", code, out)
	}
	var st events.RunState
	code, out := call(http.MethodGet, "/v1/runs/"+id, nil)
	if err := json.Unmarshal([]byte(out), &st); code != http.StatusOK || err != nil || st.RunID != id {
		t.Fatalf("GET /v1/runs/%s: %d %s (%v)", id, code, out, err)
	}
	if code, out := call(http.MethodGet, "/v1/runs/"+id+"/events", nil); code != http.StatusOK || !strings.Contains(out, "event: "+string(events.TypeRunCompleted)) {
		t.Fatalf("GET events of %s: %d %s", id, code, out)
	}

	step(t, "gateway: cancel a running run")
	long := events.NewRunID()
	if code, out := call(http.MethodPost, "/v1/runs", map[string]any{"run_id": long, "model": "m", "input": "hi", "metadata": map[string]string{"emu_tokens": "2000", "emu_token_ms": "20"}}); code != http.StatusCreated {
		t.Fatalf("POST /v1/runs: %d %s", code, out)
	}
	testkit.Eventually(t, runTimeout, "run "+long+" running", func() bool {
		_, out := call(http.MethodGet, "/v1/runs/"+long, nil)
		return strings.Contains(out, `"status":"running"`)
	})
	if code, out := call(http.MethodPost, "/v1/runs/"+long+"/cancel", map[string]string{"reason": "deploy test"}); code != http.StatusOK {
		t.Fatalf("POST cancel %s: %d %s", long, code, out)
	}
	if code, out := call(http.MethodGet, "/v1/runs/"+long+"/events", nil); code != http.StatusOK || !strings.Contains(out, "event: "+string(events.TypeRunCancelled)) {
		t.Fatalf("GET events of the cancelled %s: %d %s", long, code, out)
	}
	if v := violationsOf(s.natsLog.String(), "gateway"); len(v) > 0 {
		t.Errorf("the NATS server refused the gateway:\n%s", strings.Join(v, "\n"))
	}
}

// violationsOf returns the lines of a nats-server log that report a
// permission violation (publish, subscribe, reply) by a connection of
// user, which the server labels "ACCOUNT/user:NAME".
func violationsOf(log, user string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "Violation") && strings.Contains(l, "/user:"+user+`"`) {
			out = append(out, l)
		}
	}
	return out
}

// testToolsRole serves a function tool as the tools user of the image's
// nats-server.conf: a call made as the worker user gets its answer (and
// the progress before it), and the tools user may not read run events.
func (s *stack) testToolsRole(t *testing.T) {
	dial := func(user, password string) *natsUser {
		u, err := dialURL(s.natsURL, user, password)
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(u.nc.Close)
		return u
	}
	toolsUser, worker := dial("tools", s.toolsPW), dial("worker", s.workerPass)
	names := events.Names{}
	probe := serveProbe(t, toolsUser, "container_probe", "probed")
	reply := callTool(t, worker, names, "container_probe", "container-tool-run", "call_c", `{}`)
	probe.nextStart(t)
	if answer := progressThenAnswer(t, reply, 1, func() { probe.release <- struct{}{} }); string(answer.Data) != "probed" {
		t.Fatalf("the call answered %q %v", answer.Data, answer.Header)
	}
	toolsUser.clean(t)
	worker.clean(t)
	toolsUser.subDenied(t, names.EventsWildcard())
}

// testEmptyPassword: the NATS image refuses to start nats-server.conf
// with a password variable set but empty (its entrypoint, nats-guard),
// where nats-server alone would let anyone log in as that user.
func testEmptyPassword(t *testing.T, img images) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	ctr := run(ctx, t, "nats-empty-password", img.nats,
		testcontainers.WithEnv(map[string]string{"WORKER_PASSWORD": "w" + randomHex(t, 12), "CLIENT_PASSWORD": "", "GATEWAY_PASSWORD": "g" + randomHex(t, 12), "TOOLS_PASSWORD": "t" + randomHex(t, 12)}),
		testcontainers.WithWaitStrategy(wait.ForExit().WithExitTimeout(startTimeout)),
	)
	state, err := ctr.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	logs, err := ctr.Logs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(logs)
	// The reason, not any refusal: the client user's password (the
	// second user of the account) came out empty.
	const reason = "nats-guard: refusing to start nats-server: nats config /etc/nats/nats-server.conf: " +
		"empty secret in nats config: accounts.FOUNDRYQ.users[1].password is empty"
	if state.Running || state.ExitCode == 0 || !strings.Contains(string(out), reason) || strings.Contains(string(out), "Server is ready") {
		t.Fatalf("NATS with CLIENT_PASSWORD empty: running %v exit %d, output:\n%s\nwant nats-guard's refusal %q", state.Running, state.ExitCode, out, reason)
	}
}
