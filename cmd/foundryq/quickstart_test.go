package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/foundryq/foundryq/internal/testkit"
)

// quickStartEnv, set to 1, runs TestReadmeQuickStart (.ci/run does): it
// clones the repository and builds the binary, which takes longer than a
// test of go test ./... should.
const quickStartEnv = "FOUNDRYQ_QUICKSTART"

// The README's quick start, as a newcomer follows it: in a clone of the
// repository at HEAD, with no file edited, build the binary as the README
// says, start dev, run the commands it shows in order (a streamed run, a
// slow run watched and cancelled, the listing, the binary's exit code of
// the cancelled run), and open the console at the URL it names. The
// commands are read out of README.md, so that the two cannot drift. Only
// the ports move (through dev's documented environment variables, and
// NATS_URL for the clients): the defaults may be taken on this machine.
func TestReadmeQuickStart(t *testing.T) {
	if os.Getenv(quickStartEnv) != "1" {
		t.Skip(quickStartEnv + "=1 runs it (as .ci/run does): it clones the repository and builds the binary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := cloneHead(t, ctx)
	qs := readQuickStart(t, filepath.Join(dir, "README.md"))

	// Build as the README says, once: every command then runs the binary.
	build := shellWords(qs.build)
	if out, err := groupCommand(ctx, dir, os.Environ(), build[0], build[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", qs.build, err, out)
	}
	bin := filepath.Join(dir, "foundryq")

	p := testkit.FreePorts(t, 4)
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(p[i]) }
	env := quickStartEnvironment(map[string]string{
		"FOUNDRYQ_DEV_NATS_PORT":    strconv.Itoa(p[0]),
		"FOUNDRYQ_EMULATOR_ADDR":    addr(1),
		"FOUNDRYQ_DEV_GATEWAY_ADDR": addr(2),
		"FOUNDRYQ_HTTP_ADDR":        addr(3),
		"NATS_URL":                  "nats://" + addr(0),
	})
	portOf := map[string]string{qs.ports["NATS"]: addr(0), qs.ports["emulator"]: addr(1), qs.ports["gateway and console"]: addr(2), qs.ports["metrics"]: addr(3)}

	dev := startQuickStartDev(t, ctx, dir, env, bin, qs.dev)
	testkit.Eventually(t, 60*time.Second, "dev's banner", func() bool { return strings.Contains(dev.stdout.String(), "Stop with Ctrl-C.") })
	if !strings.Contains(dev.stdout.String(), "nats://"+addr(0)) {
		t.Fatalf("dev does not listen where its environment says:\n%s", dev.stdout.String())
	}
	testkit.WaitHTTP(t, time.Minute, "http://"+addr(3)+"/readyz", http.StatusOK, "ok")

	// The console, at the URL the README names (on its moved port).
	consoleURL := strings.Replace(qs.consoleURL, "127.0.0.1:"+qs.ports["gateway and console"], portOf[qs.ports["gateway and console"]], 1) + "/"
	if !strings.Contains(dev.stdout.String(), "Console:  "+consoleURL) {
		t.Fatalf("dev's banner does not name the console at %s:\n%s", consoleURL, dev.stdout.String())
	}
	checkGatewayServes(t, consoleURL, "")

	runQuickStartCommands(t, ctx, dir, env, bin, qs.commands)
}

// quickStart is what the README's quick start says.
type quickStart struct {
	dev        string            // the command that starts dev
	commands   []string          // the commands to try, in order, as shown
	build      string            // how to build the binary where you are
	ports      map[string]string // dev's default ports, by what listens
	consoleURL string            // where the console is
}

// readQuickStart reads the README's "Quick start" section: its shell
// blocks, the ports dev listens on and the console's URL.
func readQuickStart(t *testing.T, path string) quickStart {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	start, end := strings.Index(src, "## Quick start"), strings.Index(src, "## Using it")
	if start < 0 || end < start {
		t.Fatal("README: no Quick start section before Using it")
	}
	section := src[start:end]
	qs := quickStart{ports: map[string]string{}}
	for _, m := range regexp.MustCompile(`(\d+) \(([a-zA-Z ]+)\)`).FindAllStringSubmatch(section, -1) {
		qs.ports[m[2]] = m[1]
	}
	for _, what := range []string{"NATS", "emulator", "gateway and console", "metrics"} {
		if qs.ports[what] == "" {
			t.Fatalf("README's quick start names no port for %s: %v", what, qs.ports)
		}
	}
	for _, line := range shellLines(section) {
		switch {
		case strings.HasPrefix(line, "go run ./cmd/foundryq dev"):
			qs.dev = line
		case strings.HasPrefix(line, "go run ./cmd/foundryq "):
			qs.commands = append(qs.commands, line)
		case strings.HasPrefix(line, "foundryq "):
			qs.commands = append(qs.commands, line)
		}
	}
	if m := regexp.MustCompile("go build -o foundryq ./cmd/foundryq").FindString(section); m != "" {
		qs.build = m
	}
	// The console's URL, as the README's curl examples use it.
	if m := regexp.MustCompile(`(?m)^G=(http://\S+)`).FindStringSubmatch(src); m != nil {
		qs.consoleURL = m[1]
	}
	if qs.dev == "" || len(qs.commands) == 0 || qs.build == "" || qs.consoleURL == "" {
		t.Fatalf("README's quick start: dev %q, commands %q, build %q, console %q", qs.dev, qs.commands, qs.build, qs.consoleURL)
	}
	return qs
}

// shellLines are the commands of the ```sh blocks of text: continuation
// lines joined, comments dropped.
func shellLines(text string) []string {
	var lines []string
	inBlock, cont := false, ""
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			inBlock = true
			continue
		case strings.HasPrefix(line, "```"):
			inBlock = false
			continue
		case !inBlock:
			continue
		}
		line = cont + strings.TrimSpace(stripComment(line))
		if strings.HasSuffix(line, "\\") {
			cont = strings.TrimSuffix(line, "\\")
			continue
		}
		cont = ""
		if line != "" {
			lines = append(lines, line)
		}
	}
	return lines
}

// stripComment drops a shell comment: a # at the start of a word, outside
// double quotes.
func stripComment(line string) string {
	quoted := false
	for i, r := range line {
		switch {
		case r == '"':
			quoted = !quoted
		case r == '#' && !quoted && (i == 0 || line[i-1] == ' '):
			return line[:i]
		}
	}
	return line
}

// runQuickStartCommands runs the quick start's commands, in order, with the
// binary for go run ./cmd/foundryq and foundryq, checking what each shows.
func runQuickStartCommands(t *testing.T, ctx context.Context, dir string, env []string, bin string, commands []string) {
	t.Helper()
	var watching *process // a watch started in the background, ended by a cancel
	seen := map[string]bool{}
	for _, line := range commands {
		name, args := quickStartStep(line)
		seen[name] = true
		t.Logf("README: %s", line)
		switch name {
		case "submit --watch":
			code, stdout, stderr := runBin(t, ctx, dir, env, bin, args...)
			if code != exitOK || len(strings.TrimSpace(stdout)) < 20 || !strings.Contains(stderr, "[run completed") {
				t.Fatalf("%s: exit %d\nstdout %q\nstderr %q", line, code, stdout, stderr)
			}
		case "submit":
			if code, stdout, stderr := runBin(t, ctx, dir, env, bin, args...); code != exitOK || stdout != argAfter(args, "--run-id")+"\n" {
				t.Fatalf("%s: exit %d, stdout %q, stderr %q", line, code, stdout, stderr)
			}
		case "watch":
			if watching != nil {
				// The watched run was cancelled: the binary's exit code says so.
				if code, _, stderr := runBin(t, ctx, dir, env, bin, args...); code != exitCancelled {
					t.Fatalf("%s: exit %d, want %d (cancelled): %s", line, code, exitCancelled, stderr)
				}
				continue
			}
			watching = startBin(t, ctx, dir, env, bin, args...)
			testkit.Eventually(t, 60*time.Second, "text streaming from "+line, func() bool { return len(watching.stdout.String()) > 20 })
		case "cancel":
			if code, stdout, stderr := runBin(t, ctx, dir, env, bin, args...); code != exitOK || !strings.Contains(stdout, "cancelling") {
				t.Fatalf("%s: exit %d, stdout %q, stderr %q", line, code, stdout, stderr)
			}
			if watching == nil {
				t.Fatalf("%s: the README cancels a run it did not watch", line)
			}
			if code := watching.wait(t); code != exitCancelled || !strings.Contains(watching.stderr.String(), "[run cancelled: a cancel was requested") {
				t.Fatalf("the watch of the cancelled run: exit %d, stderr %q", code, watching.stderr.String())
			}
		case "runs":
			if code, stdout, stderr := runBin(t, ctx, dir, env, bin, args...); code != exitOK || !strings.Contains(stdout, "cancelled") {
				t.Fatalf("%s: exit %d, stdout %q, stderr %q", line, code, stdout, stderr)
			}
		case "demo":
			// Self-contained (its own NATS and emulator): TestDemo runs it.
		default:
			t.Fatalf("the README's quick start shows %q, which this test does not know: teach it", line)
		}
	}
	for _, want := range []string{"submit --watch", "watch", "cancel"} {
		if !seen[want] {
			t.Errorf("the README's quick start no longer shows %s", want)
		}
	}
}

// quickStartSteps are the kinds of command TestReadmeQuickStart knows how
// to run and check.
var quickStartSteps = []string{"submit --watch", "submit", "watch", "cancel", "runs", "demo"}

// quickStartStep is what a quick start command does (one of
// quickStartSteps, or something else) and its arguments to the binary.
func quickStartStep(line string) (name string, args []string) {
	line, _, _ = strings.Cut(line, ";") // foundryq watch slow1; echo "exit $?"
	words := shellWords(line)
	if words[0] == "go" {
		words = words[2:] // go run ./cmd/foundryq
	}
	args = words[1:]
	if len(args) == 0 {
		return "", nil
	}
	name = args[0]
	if name == "submit" && hasArg(args, "--watch") {
		name = "submit --watch"
	}
	return name, args
}

// Without cloning anything: the README's quick start, as it is in this
// work tree, is one TestReadmeQuickStart can follow (every command one it
// knows, the ports and the console named), so that an edit that it could
// not follow fails in go test ./... too.
func TestReadmeQuickStartIsFollowable(t *testing.T) {
	t.Parallel()
	qs := readQuickStart(t, filepath.Join("..", "..", "README.md"))
	for _, line := range qs.commands {
		if name, _ := quickStartStep(line); !slices.Contains(quickStartSteps, name) {
			t.Errorf("the README's quick start shows %q, which TestReadmeQuickStart does not know: teach it", line)
		}
	}
}

func hasArg(args []string, want string) bool {
	for _, a := range args {
		if a == want {
			return true
		}
	}
	return false
}

func argAfter(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// cloneHead clones the repository this test runs in, at HEAD, into a
// temporary directory (sharing its objects: nothing is copied).
func cloneHead(t *testing.T, ctx context.Context) string {
	t.Helper()
	top, err := groupCommand(ctx, ".", os.Environ(), "git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v (the test clones the repository it runs in)", err)
	}
	head, err := groupCommand(ctx, ".", os.Environ(), "git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "foundryq")
	for _, args := range [][]string{
		{"clone", "--quiet", "--no-checkout", "--shared", strings.TrimSpace(string(top)), dir},
		{"-C", dir, "checkout", "--quiet", strings.TrimSpace(string(head))},
	} {
		if out, err := groupCommand(ctx, ".", os.Environ(), "git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return dir
}

// quickStartEnvironment is this process's environment without any
// foundryq, Foundry or NATS setting of the caller's (dev must use its
// emulator), with set added.
func quickStartEnvironment(set map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "FOUNDRYQ_") && !strings.HasPrefix(k, "FOUNDRY_") && !strings.HasPrefix(k, "NATS_") {
			env = append(env, kv)
		}
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return env
}

// groupCommand is a command in its own process group, so that everything it
// starts can be stopped together.
func groupCommand(ctx context.Context, dir string, env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd
}

// process is a command started in the background.
type process struct {
	cmd            *exec.Cmd
	stdout, stderr *testkit.Buffer
	done           chan struct{}
	err            error
}

func startBin(t *testing.T, ctx context.Context, dir string, env []string, bin string, args ...string) *process {
	t.Helper()
	p := &process{cmd: groupCommand(ctx, dir, env, bin, args...), stdout: &testkit.Buffer{}, stderr: &testkit.Buffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.stop(t) })
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *process) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s did not exit", p.cmd)
	}
	var exit *exec.ExitError
	if errors.As(p.err, &exit) {
		return exit.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("%s: %v", p.cmd, p.err)
	}
	return 0
}

// stop interrupts the process group (as Ctrl-C does), then kills it if it
// has not exited in time.
func (p *process) stop(t *testing.T) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		t.Errorf("%s did not stop at an interrupt; killed", p.cmd)
	}
}

func startQuickStartDev(t *testing.T, ctx context.Context, dir string, env []string, bin, line string) *process {
	t.Helper()
	words := shellWords(line)
	return startBin(t, ctx, dir, env, bin, words[3:]...) // go run ./cmd/foundryq dev
}

// runBin runs the binary to its end and returns its exit code and output.
func runBin(t *testing.T, ctx context.Context, dir string, env []string, bin string, args ...string) (int, string, string) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	p := startBin(t, cctx, dir, env, bin, args...)
	return p.wait(t), p.stdout.String(), p.stderr.String()
}
