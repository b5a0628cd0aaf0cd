package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/testkit"
)

// The development stack of docker-compose.yml, started and stopped by
// deploy/up.sh as deploy/README.md shows it.

const (
	composeStartTimeout = buildTimeout + 3*time.Minute // up.sh: the image build, then compose up
	composeStopTimeout  = 3 * time.Minute
	// composeGatewayToken is the gateway's development token in
	// docker-compose.yml (deploy/README.md names it).
	composeGatewayToken = "foundryq-dev"
)

// composePortVars are the variables of docker-compose.yml's host ports.
var composePortVars = []string{
	"FOUNDRYQ_COMPOSE_NATS_PORT", "FOUNDRYQ_COMPOSE_NATS_MONITOR_PORT", "FOUNDRYQ_COMPOSE_EMULATOR_PORT",
	"FOUNDRYQ_COMPOSE_GATEWAY_PORT", "FOUNDRYQ_COMPOSE_WORKER_1_PORT", "FOUNDRYQ_COMPOSE_WORKER_2_PORT",
}

// TestComposeStack runs the command of deploy/README.md that starts the
// compose stack (deploy/up.sh: it builds the images, then runs compose
// up), read out of that page, under a project name, an image tag and host
// ports of its own. It waits for every service's health, follows a run submitted
// through NATS and one through the gateway's HTTP API to completion,
// fetches the console, and stops the stack with the page's command. A
// plain compose up of the file, without up.sh, must fail before creating
// anything and name deploy/up.sh.
func TestComposeStack(t *testing.T) {
	dockerHost := requireDocker(t)
	compose := requireCompose(t, dockerHost)
	up, down := readmeComposeCommands(t)
	s := newComposeStack(t, dockerHost, compose)
	t.Run("plain compose up names deploy/up.sh", s.testPlainUp)
	s.start(t, up)
	t.Run("a run submitted through NATS streams and completes", s.testNATSRun)
	t.Run("a run created through the gateway streams and completes", s.testGatewayRun)
	t.Run("the gateway serves the console", s.testConsole)
	s.stop(t, down)
}

// readmeComposeCommands returns the lines of deploy/README.md's Docker
// Compose section that start and stop the stack, as written there (the
// top-level README points to that section).
func readmeComposeCommands(t *testing.T) (up, down string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(deployDir(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n## Run it with Docker Compose\n")
	if !ok {
		t.Fatal("deploy/README.md has no section \"## Run it with Docker Compose\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "```sh\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok {
		t.Fatal("deploy/README.md: the Docker Compose section has no sh block")
	}
	for _, line := range strings.Split(block, "\n") {
		cmd, _, _ := strings.Cut(line, "#")
		switch strings.Join(strings.Fields(cmd), " ") {
		case "deploy/up.sh":
			up = line
		case "deploy/up.sh down":
			down = line
		}
	}
	if up == "" || down == "" {
		t.Fatalf("deploy/README.md: the Docker Compose section's sh block has no line \"deploy/up.sh\" (%q) or \"deploy/up.sh down\" (%q):\n%s", up, down, block)
	}
	return up, down
}

// Without Docker: deploy/README.md shows the two commands TestComposeStack
// runs, so that an edit of the page that it could not follow fails in go
// test ./... too.
func TestReadmeComposeCommands(t *testing.T) {
	up, down := readmeComposeCommands(t)
	if !strings.HasPrefix(up, "deploy/up.sh ") || !strings.HasPrefix(down, "deploy/up.sh down ") {
		t.Fatalf("deploy/README.md: up %q, down %q", up, down)
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	return filepath.Dir(deployDir(t))
}

// composeStack is the test's project of docker-compose.yml.
type composeStack struct {
	// p holds the Compose command, the file, the project name and the
	// environment of every call; only its Compose and docker helpers are
	// used (the cluster test's, for a project of another file).
	p           *cluster
	root        string            // the repository, where the README's commands run
	tag         string            // FOUNDRYQ_IMAGE_TAG
	ports       map[string]string // host port by variable
	natsURL     string
	monitorURL  string
	emulatorURL string
	gatewayURL  string
}

func newComposeStack(t *testing.T, dockerHost string, compose []string) *composeStack {
	t.Helper()
	root := repoRoot(t)
	s := &composeStack{root: root, tag: "test-" + randomHex(t, 6), ports: map[string]string{}}
	s.p = &cluster{compose: compose, file: filepath.Join(root, "docker-compose.yml"), project: "fqcompose" + randomHex(t, 5)}
	env := os.Environ()
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "FOUNDRYQ_COMPOSE_") || strings.HasPrefix(k, "COMPOSE_") {
			env = withoutEnv(env, k)
		}
	}
	env = withoutEnv(withoutEnv(withoutEnv(env, "FOUNDRYQ_IMAGE_TAG"), "FOUNDRYQ_IMAGE_PREFIX"), "DOCKER_HOST")
	s.p.env = append(env, "DOCKER_HOST="+dockerHost, "COMPOSE_PROJECT_NAME="+s.p.project, "FOUNDRYQ_IMAGE_PREFIX=", "FOUNDRYQ_IMAGE_TAG="+s.tag)
	for i, port := range freePorts(t, len(composePortVars)) {
		s.ports[composePortVars[i]] = strconv.Itoa(port)
		s.p.env = append(s.p.env, composePortVars[i]+"="+s.ports[composePortVars[i]])
	}
	local := func(v string) string { return "127.0.0.1:" + s.ports[v] }
	s.natsURL = "nats://" + local("FOUNDRYQ_COMPOSE_NATS_PORT")
	s.monitorURL = "http://" + local("FOUNDRYQ_COMPOSE_NATS_MONITOR_PORT")
	s.emulatorURL = "http://" + local("FOUNDRYQ_COMPOSE_EMULATOR_PORT")
	s.gatewayURL = "http://" + local("FOUNDRYQ_COMPOSE_GATEWAY_PORT")
	return s
}

// testPlainUp: compose up of the file without the variable up.sh sets
// fails at once, naming deploy/up.sh, and creates (and pulls) nothing.
func (s *composeStack) testPlainUp(t *testing.T) {
	ctx := context.Background()
	plain := &cluster{compose: s.p.compose, file: s.p.file, project: s.p.project + "plain", env: withoutEnv(s.p.env, "FOUNDRYQ_IMAGE_TAG")}
	t.Cleanup(func() {
		plain.composeRun(context.Background(), composeStopTimeout, "down", "--volumes", "--timeout", "5")
	})
	step(t, "plain compose up of project %s, FOUNDRYQ_IMAGE_TAG unset", plain.project)
	out, err := plain.composeRun(ctx, time.Minute, "up", "-d")
	if err == nil || !strings.Contains(out, "deploy/up.sh") {
		t.Fatalf("plain compose up: %v\n%s\nwant a failure naming deploy/up.sh", err, out)
	}
	if strings.Contains(out, "Pulling") {
		t.Errorf("plain compose up tried to pull an image:\n%s", out)
	}
	t.Logf("plain compose up says:\n%s", out)
	for _, kind := range []string{"ps", "network ls", "volume ls"} {
		args := append(strings.Fields(kind), "-q", "--filter", "label=com.docker.compose.project="+plain.project)
		if kind == "ps" {
			args = append(args, "--all")
		}
		if out, err := plain.docker(ctx, time.Minute, args...); err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("docker %s of project %s after the refused up: %q, %v; want none", kind, plain.project, out, err)
		}
	}
}

// start runs the README's start command; cleanup always takes the project
// down with its volumes and removes the images.
func (s *composeStack) start(t *testing.T, up string) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background()
		if t.Failed() {
			out, err := s.p.composeRun(ctx, 2*time.Minute, "logs", "--no-color", "--timestamps", "--tail", "300")
			t.Logf("--- compose logs (%v):\n%s", err, out)
		}
		if out, err := s.p.composeRun(ctx, composeStopTimeout, "down", "--volumes", "--timeout", "5"); err != nil {
			t.Errorf("compose down: %v\n%s", err, out)
		}
		if out, err := s.p.docker(ctx, time.Minute, "rmi", "--force", "foundryq:"+s.tag, "foundryq-nats:"+s.tag); err != nil && !strings.Contains(out, "No such image") {
			t.Logf("remove the images: %v\n%s", err, out)
		}
	})
	dumpOnFailure(t, s.monitorURL+"/jsz?consumers=true", s.emulatorURL+"/_emulator/stats")
	step(t, "README: %s (project %s, tag %s, ports %v)", up, s.p.project, s.tag, s.ports)
	start := time.Now()
	out, err := s.readmeCommand(context.Background(), composeStartTimeout, up)
	if err != nil {
		t.Fatalf("%s: %v\n%s", up, err, out)
	}
	step(t, "%s took %s:\n%s", up, time.Since(start).Round(time.Second), out)
	for _, url := range []string{
		s.monitorURL + "/healthz",
		s.emulatorURL + "/_emulator/stats",
		"http://127.0.0.1:" + s.ports["FOUNDRYQ_COMPOSE_WORKER_1_PORT"] + "/readyz",
		"http://127.0.0.1:" + s.ports["FOUNDRYQ_COMPOSE_WORKER_2_PORT"] + "/readyz",
		s.gatewayURL + "/healthz",
	} {
		step(t, "wait for %s", url)
		testkit.WaitHTTP(t, startTimeout, url, http.StatusOK, "")
	}
}

// readmeCommand runs a line of the README with bash in the repository.
func (s *composeStack) readmeCommand(ctx context.Context, timeout time.Duration, line string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", line)
	cmd.Dir, cmd.Env = s.root, s.p.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// stop runs the README's stop command: no container of the project is
// left.
func (s *composeStack) stop(t *testing.T, down string) {
	t.Helper()
	step(t, "README: %s", down)
	if out, err := s.readmeCommand(context.Background(), composeStopTimeout, down); err != nil {
		t.Fatalf("%s: %v\n%s", down, err, out)
	}
	out, err := s.p.docker(context.Background(), time.Minute, "ps", "--all", "-q", "--filter", "label=com.docker.compose.project="+s.p.project)
	if err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("containers of project %s after %q: %q, %v; want none", s.p.project, down, out, err)
	}
}

func (s *composeStack) testNATSRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	nc, err := events.Connect(s.natsURL) // dev.conf: no authentication
	if err != nil {
		t.Fatalf("connect to %s: %v", s.natsURL, err)
	}
	defer nc.Close()
	client, err := events.NewClient(nc, events.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	id := events.NewRunID()
	step(t, "submit run %s through %s", id, s.natsURL)
	if _, err := client.Submit(ctx, events.RunRequest{RunID: id, Model: "m", Input: json.RawMessage(`"hi"`), Metadata: map[string]string{"emu_tokens": "30"}}); err != nil {
		t.Fatalf("submit %s: %v", id, err)
	}
	evs, err := watchRun(ctx, client, id, runTimeout)
	if err != nil {
		t.Fatalf("watch %s: %v", id, err)
	}
	last := evs[len(evs)-1]
	if last.Type != events.TypeRunCompleted || strings.Count(strings.Join(types(evs), " "), string(events.TypeTextDelta)) < 2 {
		t.Fatalf("run %s: events %v, want text.delta events, then run.completed", id, types(evs))
	}
	var resp emulatorResponse
	getJSONKey(t, ctx, s.emulatorURL+"/openai/v1/responses/"+responseID(t, evs), composeEmuKey, &resp)
	if got, want := text(evs), resp.text(); got != want {
		t.Errorf("relayed text %q\nwant the emulator's %q", got, want)
	}
}

func (s *composeStack) testGatewayRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	body := `{"model":"m","input":"hi","metadata":{"emu_tokens":"30"}}`
	if status, out := s.gateway(t, ctx, http.MethodPost, "/v1/runs", "", body); status != http.StatusUnauthorized {
		t.Errorf("POST /v1/runs without a token: %d %s, want 401", status, out)
	}
	status, out := s.gateway(t, ctx, http.MethodPost, "/v1/runs", composeGatewayToken, body)
	var created struct {
		RunID string `json:"run_id"`
	}
	if status != http.StatusCreated || json.Unmarshal([]byte(out), &created) != nil || created.RunID == "" {
		t.Fatalf("POST /v1/runs with the token: %d %s, want 201 and a run id", status, out)
	}
	step(t, "follow run %s through %s", created.RunID, s.gatewayURL)
	kinds := s.followSSE(t, ctx, created.RunID)
	if len(kinds) < 3 || kinds[len(kinds)-1] != string(events.TypeRunCompleted) || !strings.Contains(strings.Join(kinds, " "), "text.delta text.delta") {
		t.Fatalf("run %s over SSE: events %v, want text.delta events, then run.completed", created.RunID, kinds)
	}
	status, out = s.gateway(t, ctx, http.MethodGet, "/v1/runs/"+created.RunID, composeGatewayToken, "")
	if status != http.StatusOK || !strings.Contains(out, `"status":"completed"`) {
		t.Errorf("GET /v1/runs/%s: %d %s, want the completed record", created.RunID, status, out)
	}
}

// gateway sends a request to the gateway, with token as the bearer token
// unless empty, and returns the status and body.
func (s *composeStack) gateway(t *testing.T, ctx context.Context, method, path, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, s.gatewayURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// followSSE reads a run's event stream from the gateway until it ends and
// returns the event types in order, checking the ids count 1, 2, 3, ...
func (s *composeStack) followSSE(t *testing.T, ctx context.Context, runID string) []string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.gatewayURL+"/v1/runs/"+runID+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+composeGatewayToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET events of %s: %v", runID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET events of %s: %s %s", runID, resp.Status, resp.Header.Get("Content-Type"))
	}
	var kinds []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if id, ok := strings.CutPrefix(line, "id: "); ok && id != strconv.Itoa(len(kinds)+1) {
			t.Fatalf("run %s: event id %s after %d events", runID, id, len(kinds))
		}
		if kind, ok := strings.CutPrefix(line, "event: "); ok {
			kinds = append(kinds, kind)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read the events of %s after %v: %v", runID, kinds, err)
	}
	return kinds
}

func (s *composeStack) testConsole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for path, want := range map[string]string{"/": "<title>foundryq console</title>", "/app.js": "Bearer"} {
		if status, out := s.gateway(t, ctx, http.MethodGet, path, "", ""); status != http.StatusOK || !strings.Contains(out, want) {
			t.Errorf("GET %s%s: %d, body of %d bytes without %q", s.gatewayURL, path, status, len(out), want)
		}
	}
}

// TestUpScriptFindsCompose runs deploy/up.sh against stand-ins of docker
// and docker-compose that record their calls: it uses Compose v2 (docker
// compose) when there is one, else v1 (docker-compose), refuses to go on
// without either, always on docker-compose.yml under the project foundryq
// and the image tag dev unless set, and does not start the stack when the
// image build fails.
func TestUpScriptFindsCompose(t *testing.T) {
	for _, tc := range []struct {
		name       string
		v2, v1     bool
		engine     bool // docker version answers
		args       []string
		wantErr    string // in the output, on a failure
		wantCalled string // the Compose call, "" for none
	}{
		{name: "v2 only", v2: true, engine: true, args: []string{"ps"}, wantCalled: "docker compose -f {root}/docker-compose.yml ps"},
		{name: "v1 only", v1: true, engine: true, args: []string{"down", "-v"}, wantCalled: "docker-compose -f {root}/docker-compose.yml down -v"},
		{name: "both: v2", v2: true, v1: true, engine: true, args: []string{"logs", "worker-1"}, wantCalled: "docker compose -f {root}/docker-compose.yml logs worker-1"},
		{name: "neither", engine: true, args: []string{"ps"}, wantErr: "needs Docker Compose"},
		{name: "the build fails", v1: true, wantErr: "cannot reach the Docker engine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, calls, err := runUpScript(t, tc.v2, tc.v1, tc.engine, tc.args...)
			root := repoRoot(t)
			var composeCalls []string
			for _, c := range calls {
				call, _, _ := strings.Cut(c, " [")
				if (strings.HasPrefix(call, "docker compose ") || strings.HasPrefix(call, "docker-compose ")) && !strings.HasSuffix(call, " version") {
					composeCalls = append(composeCalls, c)
				}
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(out, tc.wantErr) || len(composeCalls) != 0 {
					t.Fatalf("up.sh %v: %v, output:\n%s\ncompose calls %q; want a failure saying %q and no compose call", tc.args, err, out, composeCalls, tc.wantErr)
				}
				return
			}
			want := strings.ReplaceAll(tc.wantCalled, "{root}", root) + " [FOUNDRYQ_IMAGE_TAG=dev COMPOSE_PROJECT_NAME=foundryq]"
			if err != nil || len(composeCalls) != 1 || composeCalls[0] != want {
				t.Fatalf("up.sh %v: %v, output:\n%s\ncompose calls %q, want exactly %q", tc.args, err, out, composeCalls, want)
			}
		})
	}
}

// runUpScript runs deploy/up.sh with stand-ins for docker and
// docker-compose first on the PATH; it returns the output and the calls
// the stand-ins recorded, each with the two variables up.sh must set.
func runUpScript(t *testing.T, v2, v1, engine bool, args ...string) (string, []string, error) {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "calls")
	record := `echo "$(basename "$0") $* [FOUNDRYQ_IMAGE_TAG=${FOUNDRYQ_IMAGE_TAG-} COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME-}]" >>` + strconv.Quote(log) + "\n"
	answer := func(ok bool) string {
		if ok {
			return "exit 0"
		}
		return "echo unavailable >&2; exit 1"
	}
	docker := "#!/bin/sh\n" + record +
		"case \"$1\" in\n  compose) " + answer(v2) + ";;\n  version) " + answer(engine) + ";;\nesac\nexit 0\n"
	compose := "#!/bin/sh\n" + record + answer(v1) + "\n"
	for name, body := range map[string]string{"docker": docker, "docker-compose": compose} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(deployDir(t), "up.sh"), args...)
	env := os.Environ()
	for _, k := range []string{"PATH", "FOUNDRYQ_IMAGE_TAG", "COMPOSE_PROJECT_NAME", "GOARCH"} {
		env = withoutEnv(env, k)
	}
	cmd.Env = append(env, "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Dir = t.TempDir() // up.sh finds the repository by itself
	out, err := cmd.CombinedOutput()
	raw, _ := os.ReadFile(log)
	calls := strings.Split(strings.TrimSpace(string(raw)), "\n")
	return string(out), calls, err
}

// TestComposeFilePorts: every host port of docker-compose.yml is
// published on 127.0.0.1, set by a FOUNDRYQ_COMPOSE_*_PORT variable whose
// default is none of foundryq dev's ports.
func TestComposeFilePorts(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	devPorts := map[string]bool{"4222": true, "8222": true, "8089": true, "8080": true, "9090": true}
	mapping := regexp.MustCompile(`^\s*- "([^"]*):(\d+)"\s*$`)
	port := regexp.MustCompile(`^127\.0\.0\.1:\$\{(FOUNDRYQ_COMPOSE_[A-Z0-9_]+_PORT)-(\d+)\}$`)
	seen := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		m := mapping.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		p := port.FindStringSubmatch(m[1])
		if p == nil {
			t.Errorf("docker-compose.yml: port %q, want 127.0.0.1:${FOUNDRYQ_COMPOSE_..._PORT-default}", strings.TrimSpace(line))
			continue
		}
		if devPorts[p[2]] {
			t.Errorf("docker-compose.yml: %s defaults to %s, a port of foundryq dev", p[1], p[2])
		}
		seen[p[1]] = true
	}
	for _, v := range composePortVars {
		if !seen[v] {
			t.Errorf("docker-compose.yml publishes no port with %s", v)
		}
	}
	if len(seen) != len(composePortVars) {
		t.Errorf("docker-compose.yml port variables %v, want %v", seen, composePortVars)
	}
}
