package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
	"github.com/foundryq/foundryq/internal/natsembed"
)

// runsStack is a devstack on a TCP port with one worker, and three runs:
// runs-done (completed), runs-stop (cancelled) and runs-slow (running), plus
// a record of a run that ended two hours ago.
func runsStack(t *testing.T) (*devstack.Stack, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := devstack.StartT(t, devstack.Config{
		NATS:     natsembed.Config{StoreDir: t.TempDir()},
		Emulator: foundrytest.Config{APIKey: "k", DefaultTokenDelay: time.Millisecond},
		Workers:  1,
		Worker:   consumer.Config{WorkerID: "w1"},
		Client:   events.ClientConfig{CancelTimeout: 30 * time.Second},
	})
	req := func(id string, md map[string]string) events.RunRequest {
		return events.RunRequest{RunID: id, Model: "m", Input: json.RawMessage(`"tell me a story"`), Metadata: md}
	}
	submit := func(r events.RunRequest) {
		if _, err := s.Client.Submit(ctx, r); err != nil {
			t.Fatalf("submit %s: %v", r.RunID, err)
		}
	}
	waitFor := func(id string, typ events.EventType) {
		w := s.Client.Watch(ctx, id, events.WatchOptions{NoHeartbeat: true})
		defer w.Close()
		for {
			ev, err := w.Next(ctx)
			if err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("run %s: waiting for %s: %v", id, typ, err)
			}
			if errors.Is(err, io.EOF) || ev.Type == typ {
				return
			}
		}
	}
	// A record from long ago (as a worker wrote it then).
	kv := stateBucket(t, ctx, s.Conn)
	old := time.Now().Add(-2 * time.Hour).UTC()
	rec, _ := json.Marshal(events.RunState{RunID: "runs-old", Schema: 1, Status: events.StatusCompleted, Terminal: events.TypeRunCompleted,
		CreatedAt: old, UpdatedAt: old, FinishedAt: &old, Usage: &events.Usage{InputTokens: 1, OutputTokens: 2, TotalTokens: 3}})
	if _, err := kv.Create(ctx, "runs-old", rec); err != nil {
		t.Fatal(err)
	}

	done := req("runs-done", nil)
	done.FairnessKey, done.Priority = "team-a", events.PriorityHigh
	submit(done)
	waitFor("runs-done", events.TypeRunCompleted)
	submit(req("runs-stop", map[string]string{"emu_tokens": "400", "emu_token_ms": "20"}))
	waitFor("runs-stop", events.TypeTextDelta)
	if _, err := s.Client.Cancel(ctx, "runs-stop", "test"); err != nil {
		t.Fatal(err)
	}
	waitFor("runs-stop", events.TypeRunCancelled)
	submit(req("runs-slow", map[string]string{"emu_tokens": "100000", "emu_token_ms": "50"}))
	waitFor("runs-slow", events.TypeTextDelta)
	return s, s.NATS.ClientURL()
}

// stateBucket opens the state bucket, to write records as a worker would.
func stateBucket(t *testing.T, ctx context.Context, nc *nats.Conn) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "foundryq-runs")
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// column returns the first column of each table row (not the header).
func column(out string) []string {
	var ids []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for i := 0; sc.Scan(); i++ {
		if f := strings.Fields(sc.Text()); i > 0 && len(f) > 0 {
			ids = append(ids, f[0])
		}
	}
	return ids
}

func TestRunsCommand(t *testing.T) {
	s, url := runsStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	runs := func(args ...string) (int, string, string) {
		t.Helper()
		return runCmd(t, ctx, append([]string{"runs", "--nats-url", url}, args...)...)
	}

	// Most recently updated first; the running run's lease renewals do
	// not write its record, so the order of the finished ones is fixed.
	var want []string
	for st, err := range s.Client.Runs(ctx, events.RunFilter{}) {
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, st.RunID)
	}
	code, out, stderr := runs()
	if code != 0 || strings.Join(column(out), " ") != strings.Join(want, " ") || len(want) != 4 {
		t.Fatalf("runs: %d %s\n%s\nwant the order %v", code, stderr, out, want)
	}
	for _, h := range []string{"PRIORITY", "KEY", "ATTEMPT", "AGE", "RESPONSE", "USAGE"} {
		if !strings.Contains(out, h) {
			t.Errorf("runs: no %s column:\n%s", h, out)
		}
	}
	done, _, err := s.Client.State(ctx, "runs-done")
	if err != nil || done.Usage == nil || done.ResponseID == "" || done.Usage.OutputTokens == 0 {
		t.Fatalf("state of runs-done: %+v, %v", done, err)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "runs-done ") {
			for _, cell := range []string{"completed", " high ", " team-a ", done.ResponseID, "in=" + itoa(done.Usage.InputTokens) + " out=" + itoa(done.Usage.OutputTokens), "run.completed completed"} {
				if !strings.Contains(l, cell) {
					t.Errorf("runs-done row %q lacks %q", l, cell)
				}
			}
		}
	}

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"running", []string{"--status", "running"}, "runs-slow"},
		{"finished, last updated", []string{"--status", "completed,cancelled,failed", "--limit", "1"}, "runs-stop"},
		{"updated within an hour", []string{"--since", "1h", "--status", "completed"}, "runs-done"},
		{"completed, any time", []string{"--status", "completed"}, "runs-done runs-old"},
	} {
		code, out, stderr := runs(c.args...)
		if got := strings.Join(column(out), " "); code != 0 || got != c.want {
			t.Errorf("runs %s (%s): %d %q %s, want %s", strings.Join(c.args, " "), c.name, code, got, stderr, c.want)
		}
	}

	code, out, _ = runs("--json", "--status", "completed")
	var listed []events.RunState
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var st events.RunState
		if err := json.Unmarshal([]byte(l), &st); err != nil {
			t.Fatalf("runs --json line %q: %v", l, err)
		}
		listed = append(listed, st)
	}
	if code != 0 || len(listed) != 2 || listed[0].RunID != "runs-done" || listed[0].Usage == nil || *listed[0].Usage != *done.Usage {
		t.Fatalf("runs --json: %d %s", code, out)
	}

	// One run: its record and a summary of its events, flags after RUN_ID.
	code, out, stderr = runs("runs-stop", "--json")
	var one struct {
		State   events.RunState `json:"state"`
		Summary struct {
			Counts         map[events.EventType]int `json:"counts"`
			Attempts       int                      `json:"attempts"`
			DurationMS     float64                  `json:"duration_ms"`
			TTFTMS         *float64                 `json:"time_to_first_token_ms"`
			Usage          *events.Usage            `json:"usage"`
			Terminal       events.EventType         `json:"terminal"`
			Reason         string                   `json:"reason"`
			UpstreamStatus string                   `json:"upstream_status"`
			Finished       bool                     `json:"finished"`
		} `json:"summary"`
	}
	if err := json.Unmarshal([]byte(out), &one); code != 0 || err != nil {
		t.Fatalf("runs runs-stop --json: %d %v %s %s", code, err, out, stderr)
	}
	evs, err := s.Client.Events(ctx, "runs-stop")
	if err != nil {
		t.Fatal(err)
	}
	deltas := 0
	for _, ev := range evs {
		if ev.Type == events.TypeTextDelta {
			deltas++
		}
	}
	sum := one.Summary
	if sum.Counts[events.TypeTextDelta] != deltas || deltas == 0 || sum.Counts[events.TypeRunCancelled] != 1 || sum.Attempts != 1 ||
		sum.Terminal != events.TypeRunCancelled || sum.Reason != "requested" || sum.UpstreamStatus != "cancelled" || !sum.Finished ||
		sum.TTFTMS == nil || *sum.TTFTMS <= 0 || sum.DurationMS < *sum.TTFTMS || sum.Usage == nil || one.State.Usage == nil || *sum.Usage != *one.State.Usage {
		t.Fatalf("summary of runs-stop: %+v (state usage %+v, %d deltas stored)", sum, one.State.Usage, deltas)
	}

	code, out, _ = runs("runs-done")
	if code != 0 || !strings.Contains(out, "key team-a, priority high") {
		t.Errorf("runs runs-done: %d, no fairness key and priority in\n%s", code, out)
	}
	code, out, _ = runs("runs-slow")
	for _, want := range []string{"status", "running", "so far", "first token", "text.delta", "owner", "w1, attempt 1", "key default, priority normal"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("runs runs-slow: %d, no %q in\n%s", code, want, out)
		}
	}
	code, out, _ = runs("runs-old")
	if code != 0 || !strings.Contains(out, "input 1, output 2, total 3") || !strings.Contains(out, "none stored") {
		t.Errorf("runs runs-old (events expired, the record keeps the usage): %d\n%s", code, out)
	}

	for _, bad := range [][]string{{"--status", "done"}, {"--since", "-1h"}, {"--limit", "-1"}, {"a", "b"}} {
		code, _, stderr := runs(bad...)
		if code != exitUsage || !strings.Contains(stderr, "runs") {
			t.Errorf("runs %v: %d %q, want a usage error", bad, code, stderr)
		}
	}
	if code, _, stderr := runs("--status", "done"); !strings.Contains(stderr, "--status") || !strings.Contains(stderr, "want queued, running") {
		t.Errorf("runs --status done: %d %q, want the setting and its accepted values", code, stderr)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestSinceFormat(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		ago  time.Duration
		want string
	}{
		{0, "0s"}, {1400 * time.Millisecond, "1s"}, {59 * time.Second, "59s"}, {61 * time.Second, "1m1s"},
		{59*time.Minute + 59*time.Second, "59m59s"}, {3*time.Hour + 4*time.Minute, "3h4m"}, {50 * time.Hour, "2d2h"},
		{59*time.Minute + 59*time.Second + 600*time.Millisecond, "1h0m"}, {59*time.Second + 700*time.Millisecond, "1m0s"},
		{-time.Second, "0s"}, // a clock a little ahead
	} {
		if got := since(now, now.Add(-c.ago)); got != c.want {
			t.Errorf("since %s ago = %q, want %q", c.ago, got, c.want)
		}
	}
	if got := since(now, time.Time{}); got != "-" {
		t.Errorf("since the zero time = %q, want -", got)
	}
}

func TestRunRowNotes(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	for _, c := range []struct {
		name  string
		st    events.RunState
		notes string
	}{
		{"plain running", events.RunState{RunID: "r", Status: events.StatusRunning}, "-"},
		{"stalled", events.RunState{RunID: "r", Status: events.StatusRunning, StalledAt: at(-2 * time.Minute)}, "stalled since 2m0s"},
		{"deadline ahead", events.RunState{RunID: "r", Status: events.StatusRunning, Deadline: at(4*time.Minute + 30*time.Second)}, "deadline in 4m30s"},
		{"deadline passed", events.RunState{RunID: "r", Status: events.StatusRunning, Deadline: at(-12 * time.Second)}, "deadline passed 12s ago"},
		{"stalled, with a deadline", events.RunState{RunID: "r", Status: events.StatusRunning, StalledAt: at(-90 * time.Second), Deadline: at(time.Hour)},
			"stalled since 1m30s; deadline in 1h0m"},
		{"cancelling", events.RunState{RunID: "r", Status: events.StatusCancelling,
			Cancel: &events.CancelRecord{Reason: events.ReasonRequested, At: now.Add(-10 * time.Second)}}, "cancel waits for Foundry since 10s"},
		{"waiting for a cap", events.RunState{RunID: "r", Status: events.StatusQueued, QueueReason: events.QueueReasonCap},
			"waits: its fairness key is at its concurrency cap"},
		{"waiting for the budget", events.RunState{RunID: "r", Status: events.StatusQueued, QueueReason: events.QueueReasonBudget},
			"waits: its deployment's token budget is spent"},
		{"finished: no notes", events.RunState{RunID: "r", Status: events.StatusCancelled, Terminal: events.TypeRunCancelled,
			StalledAt: at(-time.Minute), Deadline: at(-time.Minute)}, "-"},
	} {
		cells := strings.Split(runRow(c.st, now), "\t")
		if len(cells) != 12 || cells[1] != string(c.st.Status) || cells[11] != c.notes {
			t.Errorf("%s: row %q, want status %s and notes %q", c.name, cells, c.st.Status, c.notes)
		}
	}
}

// foundryq runs shows a cancelling run, marks a stalled one and shows a
// running run's deadline, in the list and in the one-run view.
func TestRunsCommandCancellingAndStalled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := devstack.StartT(t, devstack.Config{NATS: natsembed.Config{StoreDir: t.TempDir()}})
	js, err := jetstream.New(s.Conn)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, s.Client.Names().Bucket())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	stalled, deadline := now.Add(-2*time.Minute), now.Add(time.Hour)
	for _, st := range []events.RunState{
		{RunID: "stuck-1", Schema: 1, Status: events.StatusRunning, Owner: "w1", Attempt: 1, ResponseID: "resp_1",
			CreatedAt: now, UpdatedAt: now, StartedAt: &now, StalledAt: &stalled, Deadline: &deadline},
		{RunID: "stopping-1", Schema: 1, Status: events.StatusCancelling, Owner: "w1", Attempt: 1, ResponseID: "resp_2",
			CreatedAt: now, UpdatedAt: now.Add(-time.Second), StartedAt: &now,
			Cancel: &events.CancelRecord{Reason: events.ReasonRequested, At: now, UpstreamError: "503 service unavailable"}},
	} {
		data, _ := json.Marshal(st)
		if _, err := kv.Create(ctx, st.RunID, data); err != nil {
			t.Fatal(err)
		}
	}
	url := s.NATS.ClientURL()
	code, out, stderr := runCmd(t, ctx, "runs", "--nats-url", url)
	if code != 0 || !strings.Contains(out, "NOTES") {
		t.Fatalf("runs: %d %s\n%s", code, stderr, out)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			rows[f[0]] = l
		}
	}
	for id, cells := range map[string][]string{
		"stuck-1":    {"running", "stalled since 2m", "deadline in "},
		"stopping-1": {"cancelling", "cancel waits for Foundry since"},
	} {
		for _, c := range cells {
			if !strings.Contains(rows[id], c) {
				t.Errorf("row of %s %q lacks %q", id, rows[id], c)
			}
		}
	}
	code, out, _ = runCmd(t, ctx, "runs", "--nats-url", url, "--status", "cancelling")
	if got := strings.Join(column(out), " "); code != 0 || got != "stopping-1" {
		t.Errorf("runs --status cancelling: %d %q", code, got)
	}
	code, out, _ = runCmd(t, ctx, "runs", "--nats-url", url, "stuck-1")
	for _, want := range []string{deadline.Format(time.RFC3339) + " (deadline in ", "stalled", "Foundry's stream has sent nothing"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("runs stuck-1: %d, no %q in\n%s", code, want, out)
		}
	}
	code, out, _ = runCmd(t, ctx, "runs", "--nats-url", url, "stopping-1")
	for _, want := range []string{"cancelling", "Foundry's cancel answered: 503 service unavailable (retrying)"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("runs stopping-1: %d, no %q in\n%s", code, want, out)
		}
	}
}

// runs RUN_ID of an id that names no run says so (exit 6), like watch; a
// run still in the queue, no worker having taken it, is shown as queued.
func TestRunsOfAnUnknownOrQueuedRun(t *testing.T) {
	s := devstack.StartT(t, devstack.Config{Workers: 0, NATS: natsembed.Config{Host: "127.0.0.1", StoreDir: t.TempDir()}})
	natsURL := s.NATS.ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if code, stdout, stderr := runCmd(t, ctx, "runs", "--nats-url", natsURL, "no-such-run"); code != exitNotFound ||
		!strings.Contains(stderr, "runs no-such-run: no such run (none recorded, none queued)") || stdout != "" {
		t.Fatalf("runs of an unknown run: code %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr := runCmd(t, ctx, "submit", "--nats-url", natsURL, "--model", "m", "--input", "hi", "--run-id", "queued-1"); code != exitOK {
		t.Fatalf("submit: %d %s", code, stderr)
	}
	if code, stdout, stderr := runCmd(t, ctx, "runs", "--nats-url", natsURL, "queued-1"); code != exitOK ||
		!strings.Contains(stdout, "run queued-1: queued, waiting for a worker (no worker has taken it yet; none is running to tell its place)") {
		t.Fatalf("runs of a queued run: code %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, stderr := runCmd(t, ctx, "runs", "--nats-url", natsURL, "--json", "queued-1")
	var got struct {
		State   events.RunState   `json:"state"`
		Summary events.RunSummary `json:"summary"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); code != exitOK || err != nil || got.State.Status != events.StatusQueued ||
		got.State.RunID != "queued-1" || got.Summary.Status != events.StatusQueued {
		t.Fatalf("runs --json of a queued run: code %d, %v, stdout %q, stderr %q", code, err, stdout, stderr)
	}

	// A run given back after a failed attempt: when the next try comes.
	kv := stateBucket(t, ctx, s.Conn)
	now := time.Now().UTC()
	next := now.Add(time.Hour)
	rec, _ := json.Marshal(events.RunState{RunID: "retry-1", Schema: 1, Status: events.StatusRunning, Attempt: 1, Failures: 1, MaxFailures: 10,
		LastError: "create: 500", RetryAt: &next, CreatedAt: now, UpdatedAt: now})
	if _, err := kv.Create(ctx, "retry-1", rec); err != nil {
		t.Fatal(err)
	}
	if code, stdout, _ := runCmd(t, ctx, "runs", "--nats-url", natsURL, "retry-1"); code != exitOK ||
		!strings.Contains(stdout, "attempt 1 of 10 failed: create: 500; next try in 1h0m") {
		t.Fatalf("runs of a run waiting for its next try: code %d, stdout %q", code, stdout)
	}
}

// eventsText counts every type stored: the v1 types in lifecycle order
// (refusal.delta with the text), then any type this version does not know.
func TestEventsTextCountsEveryType(t *testing.T) {
	t.Parallel()
	counts := map[events.EventType]int{}
	all := []events.EventType{events.TypeRunStarted, events.TypeTextDelta, events.TypeRefusalDelta, events.TypeToolStarted,
		events.TypeToolCompleted, events.TypeToolFailed, events.TypeInputRequired, events.TypeInputReceived, events.TypeStepStarted,
		events.TypeRunCompleted, events.TypeRunFailed, events.TypeRunCancelled, "x.later", "a.future"}
	total := 0
	for i, typ := range all {
		if i < len(all)-2 && !typ.Known() {
			t.Fatalf("%s is not a v1 type", typ)
		}
		counts[typ] = i + 1
		total += i + 1
	}
	got := eventsText(events.RunSummary{Events: total, LastSeq: uint64(total), Counts: counts})
	want := fmt.Sprintf("%d stored: run.started 1, text.delta 2, refusal.delta 3, tool.started 4, tool.completed 5, tool.failed 6, "+
		"input.required 7, input.received 8, step.started 9, run.completed 10, run.failed 11, run.cancelled 12, a.future 14, x.later 13", total)
	if got != want {
		t.Fatalf("eventsText:\n got %s\nwant %s", got, want)
	}

	// A refused run: its refusal deltas are counted.
	got = eventsText(events.RunSummary{Events: 5, LastSeq: 5, Counts: map[events.EventType]int{
		events.TypeRunStarted: 1, events.TypeRefusalDelta: 3, events.TypeRunCompleted: 1}})
	if want := "5 stored: run.started 1, refusal.delta 3, run.completed 1"; got != want {
		t.Fatalf("eventsText of a refusal: %q, want %q", got, want)
	}
}

// placeText says where a queued run waits, from each kind of answer a
// worker gives (or none).
func TestPlaceText(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	sub := now.Add(-90 * time.Second)
	lane := events.QueuePosition{Where: events.WhereLane, Priority: events.PriorityNormal, FairnessKey: "acme",
		Position: 3, LaneWaiting: 120, HigherWaiting: 5, SubmittedAt: &sub}
	capped := lane
	capped.Position, capped.PositionCapped, capped.HigherWaiting = events.MaxCountedPosition+1, true, 0
	tests := []struct {
		pos  *events.QueuePosition
		want string
	}{
		{nil, "queued, waiting for a worker (no worker has taken it yet; none is running to tell its place)"},
		{&lane, "queued in lane normal/acme, number 3 of the 120 waiting there; 5 runs of higher priority wait and start first; submitted 1m30s ago"},
		{&capped, "queued in lane normal/acme, behind the first 1000 of the 120 waiting there; submitted 1m30s ago"},
		{&events.QueuePosition{Where: events.WhereIntake, SubmittedAt: &sub}, "queued, waiting for a worker (no worker has taken it yet; it waits in the intake, submitted 1m30s ago)"},
		{&events.QueuePosition{Where: events.WhereTaken}, "queued, a worker has just taken it (ask again for its state)"},
		{&events.QueuePosition{Where: events.WhereNone}, "queued, waiting for a worker (no worker has taken it yet)"},
	}
	for _, tt := range tests {
		if got := placeText(tt.pos, now); got != tt.want {
			t.Errorf("placeText(%+v)\n got %q\nwant %q", tt.pos, got, tt.want)
		}
	}
}
