package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one process of the system under test: a foundryq subcommand
// started from Config.Binary.
type process struct {
	name string
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done is closed
}

// startProcess runs bin with args as the process called name.
func startProcess(name, bin string, env []string, args ...string) (*process, error) {
	p := &process{name: name, out: &tailBuffer{max: 8 << 10}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	// Its own process group: a terminal's Ctrl-C reaches the bench, which
	// stops its processes in order. Should the bench be killed outright,
	// the kernel ends them (SIGKILL when the parent dies).
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// pid is the process id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// usage reads the process's CPU time and RSS.
func (p *process) usage() (ProcUsage, error) {
	u, err := readProcUsage(p.pid())
	if err != nil {
		return u, fmt.Errorf("%s: %w", p.name, err)
	}
	return u, nil
}

// exited describes how the process ended, with the end of its output.
func (p *process) exited() error {
	return fmt.Errorf("%s exited (%v); its last output:\n%s", p.name, p.err, p.out.String())
}

// waitReady polls ready until it succeeds, the process exits or limit ends.
func (p *process) waitReady(ctx context.Context, limit time.Duration, ready func(context.Context) error) error {
	deadline := time.Now().Add(limit)
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return p.exited()
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %w; its last output:\n%s", p.name, limit, err, p.out.String())
		}
	}
}

// stop asks the process to end (SIGTERM), and kills it after grace.
func (p *process) stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %s: killed", p.name, grace)
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// freePort returns a loopback TCP port that was free a moment ago and that
// it never returned before.
func freePort() (int, error) {
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		// The kernel may hand out a port again as soon as it is free: never
		// twice to this process's processes.
		portsGiven.Lock()
		again := portsGiven.m[port]
		portsGiven.m[port] = true
		portsGiven.Unlock()
		if !again {
			return port, nil
		}
	}
	return 0, errors.New("find a free port: 100 tries gave only ports handed out before")
}

// portsGiven are the ports freePort returned.
var portsGiven = struct {
	sync.Mutex
	m map[int]bool
}{m: make(map[int]bool)}

// httpGet fetches url into a byte slice (status 200 only).
func httpGet(ctx context.Context, hc *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return body, nil
}

// GoStats are a Go process's own figures, from its Prometheus /metrics.
type GoStats struct {
	// HeapInuse is go_memstats_heap_inuse_bytes.
	HeapInuse int64
	// Goroutines is go_goroutines.
	Goroutines int64
	// StackInuse is go_memstats_stack_inuse_bytes: goroutine stacks.
	StackInuse int64
}

// readGoStats reads heap in use and goroutines from a /metrics page.
func readGoStats(ctx context.Context, hc *http.Client, url string) (GoStats, error) {
	body, err := httpGet(ctx, hc, url)
	if err != nil {
		return GoStats{}, err
	}
	var s GoStats
	found := 0
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var dst *int64
		switch name {
		case "go_memstats_heap_inuse_bytes":
			dst = &s.HeapInuse
		case "go_goroutines":
			dst = &s.Goroutines
		case "go_memstats_stack_inuse_bytes":
			dst = &s.StackInuse
		default:
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return s, fmt.Errorf("metrics %s: %w", name, err)
		}
		*dst = int64(f)
		found++
	}
	if found != 3 {
		return s, errors.New("metrics: go_memstats_heap_inuse_bytes, go_memstats_stack_inuse_bytes or go_goroutines missing")
	}
	return s, nil
}
