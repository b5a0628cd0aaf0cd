package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foundryq/foundryq/events"
)

// load submits runs at a steady pace and follows each one with a watcher
// from submission to its terminal event, through whatever fault happens
// meanwhile.
type load struct {
	c       *cluster
	stop    chan struct{}
	stopped chan struct{} // the submit loop has returned
	watches sync.WaitGroup

	mu      sync.Mutex
	runs    []*loadRun
	active  int   // watchers that have not seen a terminal event
	fatal   error // a submit that did not succeed in time
	started time.Time
}

// loadRun is one run and what its watcher saw.
type loadRun struct {
	id     string
	events []events.RunEvent
	err    error // the watcher's verdict: gap, duplicate, second terminal, error
}

// startLoad starts submitting runs, one every clusterInterval, until finish.
func (c *cluster) startLoad(ctx context.Context, t *testing.T) *load {
	t.Helper()
	l := &load{c: c, stop: make(chan struct{}), stopped: make(chan struct{}), started: time.Now()}
	step(t, "start the load: a run (%v) every %s", clusterRunMetadata, clusterInterval)
	go l.submitLoop(ctx)
	return l
}

func (l *load) submitLoop(ctx context.Context) {
	defer close(l.stopped)
	tick := time.NewTicker(clusterInterval)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r := &loadRun{id: events.NewRunID()}
		if err := l.submit(ctx, r.id); err != nil {
			l.mu.Lock()
			l.fatal = err
			l.mu.Unlock()
			return
		}
		l.mu.Lock()
		l.runs = append(l.runs, r)
		l.active++
		l.mu.Unlock()
		l.watches.Add(1)
		go l.follow(ctx, r)
	}
}

// submit submits a run, retrying with the same run id (a submit is
// idempotent by run id) while its node is away: a client keeps a run it
// could not confirm.
func (l *load) submit(ctx context.Context, id string) error {
	req := events.RunRequest{RunID: id, Model: "m", Input: json.RawMessage(`"hi"`), Metadata: clusterRunMetadata}
	deadline := time.Now().Add(clusterRecover)
	for {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := l.c.client.Submit(sctx, req)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("submit %s: %w", id, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// follow watches a run to its terminal event and records what it saw.
func (l *load) follow(ctx context.Context, r *loadRun) {
	defer l.watches.Done()
	evs, err := watchRun(ctx, l.c.client, r.id, clusterDrain+clusterRecover)
	l.mu.Lock()
	r.events, r.err = evs, err
	l.active--
	l.mu.Unlock()
}

// watchRun reads a run's events from the first to the terminal one and
// checks that seq goes 1, 2, 3, ... with exactly one terminal event, last.
func watchRun(ctx context.Context, client *events.Client, id string, timeout time.Duration) ([]events.RunEvent, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w := client.Watch(wctx, id, events.WatchOptions{})
	defer w.Close()
	var evs []events.RunEvent
	for {
		ev, err := w.Next(wctx)
		if errors.Is(err, io.EOF) {
			if len(evs) == 0 || !evs[len(evs)-1].Type.Terminal() {
				return evs, fmt.Errorf("watch ended without a terminal event: %v", types(evs))
			}
			return evs, nil
		}
		if err != nil {
			return evs, fmt.Errorf("watch after %d events: %w", len(evs), err)
		}
		if want := uint64(len(evs) + 1); ev.Seq != want {
			return evs, fmt.Errorf("event seq %d (%s) after %d events: a gap or a duplicate", ev.Seq, ev.Type, len(evs))
		}
		if len(evs) > 0 && evs[len(evs)-1].Type.Terminal() {
			return evs, fmt.Errorf("event %s after the terminal %s", ev.Type, evs[len(evs)-1].Type)
		}
		evs = append(evs, ev)
	}
}

// waitInFlight waits until at least n runs are being followed, so that the
// next fault hits runs mid-stream.
func (l *load) waitInFlight(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(clusterRecover)
	for {
		l.mu.Lock()
		active, fatal := l.active, l.fatal
		l.mu.Unlock()
		if fatal != nil {
			t.Fatalf("load: %v", fatal)
		}
		if active >= n {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("fewer than %d runs in flight after %s (%d)", n, clusterRecover, active)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// finish keeps submitting until clusterMinRuns were, stops, and waits for
// every watcher.
func (l *load) finish(ctx context.Context, t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(clusterDrain)
	for {
		l.mu.Lock()
		n, fatal := len(l.runs), l.fatal
		l.mu.Unlock()
		if fatal != nil {
			t.Fatalf("load: %v", fatal)
		}
		if n >= clusterMinRuns {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("only %d runs submitted, want %d", n, clusterMinRuns)
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(l.stop)
	<-l.stopped
	step(t, "load stopped after %d runs in %s; wait for every run to end", len(l.runs), time.Since(l.started).Round(time.Second))
	done := make(chan struct{})
	go func() { l.watches.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(clusterDrain + clusterRecover + 10*time.Second):
		l.mu.Lock()
		active := l.active
		l.mu.Unlock()
		t.Fatalf("%d watchers still running after the drain bound", active)
	}
}

// check verifies every run against the emulator, the state bucket and a
// second reading of its events, and logs a table of the outcome.
func (c *cluster) check(ctx context.Context, t *testing.T, l *load) {
	t.Helper()
	step(t, "check %d runs", len(l.runs))
	var st emulatorStats
	getJSONKey(t, ctx, c.emulatorURL+"/_emulator/stats", "", &st)
	var (
		outcome  = map[string]int{}
		problems []string
		moved    int // runs started more than once: a fault hit them mid-run
	)
	for _, r := range l.runs {
		starts := 0
		for _, ev := range r.events {
			if ev.Type == events.TypeRunStarted {
				starts++
			}
		}
		if starts > 1 {
			moved++
		}
		end := "none"
		if len(r.events) > 0 {
			last := r.events[len(r.events)-1]
			end = string(last.Type)
			if last.Error != nil {
				end += "/" + last.Error.Code
			}
		}
		outcome[end]++
		if err := c.checkRun(ctx, t, r, st); err != nil {
			problems = append(problems, fmt.Sprintf("run %s: %v", r.id, err))
		}
	}
	var keys []string
	for k := range outcome {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var table strings.Builder
	fmt.Fprintf(&table, "%-28s %6d\n", "submitted", len(l.runs))
	for _, k := range keys {
		fmt.Fprintf(&table, "%-28s %6d\n", k, outcome[k])
	}
	fmt.Fprintf(&table, "%-28s %6d\n", "started more than once", moved)
	fmt.Fprintf(&table, "%-28s %6d\n", "runs with a problem", len(problems))
	t.Logf("cluster run outcome:\n%s", table.String())
	for i, p := range problems {
		if i == 20 {
			t.Errorf("... and %d more", len(problems)-20)
			break
		}
		t.Error(p)
	}
	c.asyncMu.Lock()
	defer c.asyncMu.Unlock()
	for _, err := range c.asyncErr {
		if strings.Contains(strings.ToLower(err.Error()), "permission") {
			t.Errorf("client connection: %v", err)
		}
	}
}

// checkRun: one terminal event, run.completed; the text is the emulator's;
// one upstream response; the state record says completed; a second
// reading of the stream gives the same events.
func (c *cluster) checkRun(ctx context.Context, t *testing.T, r *loadRun, st emulatorStats) error {
	if r.err != nil {
		return fmt.Errorf("watcher: %w (events %v)", r.err, types(r.events))
	}
	last := r.events[len(r.events)-1]
	if last.Type != events.TypeRunCompleted {
		return fmt.Errorf("ended %s (%+v), want run.completed; events %v", last.Type, last.Error, types(r.events))
	}
	var rid string
	for _, ev := range r.events {
		if ev.ResponseID != "" {
			rid = ev.ResponseID
			break
		}
	}
	if rid == "" {
		return fmt.Errorf("no event carries a response id: %v", types(r.events))
	}
	var resp emulatorResponse
	getJSONKey(t, ctx, c.emulatorURL+"/openai/v1/responses/"+rid, composeEmuKey, &resp)
	if got, want := text(r.events), resp.text(); got != want || want == "" {
		return fmt.Errorf("text differs from the emulator's:\n got %q\nwant %q", got, want)
	}
	if n := st.ResponsesByRun[r.id]; n != 1 {
		return fmt.Errorf("the emulator created %d responses, want 1", n)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	state, _, err := c.client.State(sctx, r.id)
	cancel()
	if err != nil || state.Status != events.StatusCompleted {
		return fmt.Errorf("state %q, %v; want completed", state.Status, err)
	}
	again, err := watchRun(ctx, c.client, r.id, 30*time.Second)
	if err != nil {
		return fmt.Errorf("second reading: %w", err)
	}
	if len(again) != len(r.events) {
		return fmt.Errorf("second reading has %d events, the watcher saw %d", len(again), len(r.events))
	}
	return nil
}

// getJSONKey decodes the JSON body of url (with the emulator's api-key
// header if key is set), failing t on any error.
func getJSONKey(t *testing.T, ctx context.Context, url, key string, v any) {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("api-key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: decode: %v: %s", url, err, body)
	}
}
