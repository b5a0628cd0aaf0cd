package consumer

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/foundryq/foundryq/events"
)

var (
	t0   = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	me   = owner{worker: "w1", attempt: 3}
	rec  = events.CancelRecord{Reason: events.ReasonRequested, Note: "stop", At: t0}
	done = events.RunEvent{RunID: "r", Seq: 7, Type: events.TypeRunCompleted, Time: t0, Status: "completed"}
)

func ptr[T any](v T) *T { return &v }

// running is a record that me owns.
func running() events.RunState {
	return events.RunState{RunID: "r", Schema: stateSchema, Status: events.StatusRunning, Digest: "d", Owner: "w1", Attempt: 3, StartedAt: ptr(t0)}
}

func finished(t events.EventType) events.RunState {
	s := running()
	markEnd(&s, events.RunEvent{Seq: 2, Type: t}, "", t0)
	return s
}

func TestClaimRun(t *testing.T) {
	later := t0.Add(time.Minute)
	tests := []struct {
		name   string
		state  events.RunState
		exists bool
		digest string
		err    error
		check  func(t *testing.T, s events.RunState)
	}{
		{name: "new run", state: events.RunState{RunID: "r"}, digest: "d", check: func(t *testing.T, s events.RunState) {
			if s.Status != events.StatusRunning || s.Owner != "w1" || s.Attempt != 3 || s.Digest != "d" || s.Schema != baseSchema ||
				s.StartedAt == nil || !s.StartedAt.Equal(later) || s.Failures != 0 {
				t.Fatalf("%+v", s)
			}
		}},
		{name: "released by a hand-off: not a failure", exists: true, digest: "d",
			state: events.RunState{RunID: "r", Status: events.StatusRunning, Digest: "d", Attempt: 2, StartedAt: ptr(t0), Failures: 1},
			check: func(t *testing.T, s events.RunState) {
				if s.Failures != 1 || !s.StartedAt.Equal(t0) {
					t.Fatalf("failures %d, started %v: a hand-off counted, or the start moved", s.Failures, s.StartedAt)
				}
			}},
		{name: "owner vanished: a failure", exists: true, digest: "d",
			state: events.RunState{RunID: "r", Status: events.StatusRunning, Digest: "d", Owner: "w0", Attempt: 2},
			check: func(t *testing.T, s events.RunState) {
				if s.Failures != 1 || s.LastError == "" || s.Owner != "w1" {
					t.Fatalf("%+v", s)
				}
			}},
		{name: "cancel on record is kept", exists: true, digest: "d",
			state: events.RunState{RunID: "r", Status: events.StatusQueued, Cancel: &rec},
			check: func(t *testing.T, s events.RunState) {
				if s.Cancel == nil || s.Digest != "d" {
					t.Fatalf("%+v", s)
				}
			}},
		{name: "same request, finished", exists: true, digest: "d", state: finished(events.TypeRunCompleted), err: errFinished},
		{name: "other request, finished", exists: true, digest: "x", state: finished(events.TypeRunCompleted), err: errReused},
		{name: "other request, running", exists: true, digest: "x", state: running(), err: errReused},
		{name: "finished record without digest", exists: true, digest: "d",
			state: events.RunState{RunID: "r", Status: events.StatusCompleted}, err: errReused},
		{name: "running record without digest adopts the request", exists: true, digest: "d",
			state: events.RunState{RunID: "r", Status: events.StatusRunning, Owner: "w0"},
			check: func(t *testing.T, s events.RunState) {
				if s.Digest != "d" {
					t.Fatalf("%+v", s)
				}
			}},
		{name: "newer schema", exists: true, digest: "d", state: events.RunState{RunID: "r", Schema: stateSchema + 1, Status: events.StatusRunning}, err: errNewerSchema},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.state
			err := claimRun(&s, tt.exists, me, tt.digest, 0, later)
			if !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if tt.err != nil && !isDecision(err) {
				t.Fatalf("%v is not a decision", err)
			}
			if tt.check != nil {
				tt.check(t, s)
			}
		})
	}
}

func TestBudgetSpent(t *testing.T) {
	for _, tt := range []struct{ failures, max int }{{0, 1}, {1, 1}, {9, 10}, {10, 10}} {
		got := budgetSpent(events.RunState{Failures: tt.failures}, tt.max)
		if got != (tt.failures >= tt.max) {
			t.Errorf("failures %d of %d: spent = %v", tt.failures, tt.max, got)
		}
	}
}

func TestCreateTransitions(t *testing.T) {
	t.Run("start create once", func(t *testing.T) {
		s := running()
		if err := startCreate(&s, me, t0); err != nil || s.CreateStartedAt == nil {
			t.Fatalf("%v %+v", err, s)
		}
		if err := startCreate(&s, me, t0.Add(time.Second)); !errors.Is(err, errCreateStarted) {
			t.Fatalf("second start: %v, want errCreateStarted", err)
		}
		// The same mark again: a retried write whose first try landed.
		if err := startCreate(&s, me, t0); !errors.Is(err, errSkipUpdate) {
			t.Fatalf("retried start: %v, want errSkipUpdate", err)
		}
		// A mark read back from the bucket (JSON) is still the same mark,
		// to the nanosecond.
		mark := time.Now().UTC()
		fresh := running()
		if err := startCreate(&fresh, me, mark); err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(fresh)
		var back events.RunState
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		if err := startCreate(&back, me, mark); !errors.Is(err, errSkipUpdate) {
			t.Fatalf("retried start after a round trip: %v, want errSkipUpdate", err)
		}
		if err := createRefused(&s, me); err != nil || s.CreateStartedAt != nil {
			t.Fatalf("refused: %v %+v", err, s)
		}
		if err := startCreate(&s, me, t0); err != nil {
			t.Fatalf("start after a refused create: %v", err)
		}
	})
	tests := []struct {
		name  string
		state events.RunState
		o     owner
		err   error
	}{
		{"not the owner", running(), owner{"w2", 3}, errNotOwner},
		{"an older attempt", running(), owner{"w1", 2}, errNotOwner},
		{"response exists", func() events.RunState { s := running(); s.ResponseID = "resp"; return s }(), me, errCreateStarted},
		{"finished", finished(events.TypeRunCancelled), me, errFinished},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.state
			if err := startCreate(&s, tt.o, t0); !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if s.CreateStartedAt != tt.state.CreateStartedAt {
				t.Fatal("a refused transition changed the record")
			}
		})
	}
}

func TestKnowResponse(t *testing.T) {
	tests := []struct {
		name  string
		state events.RunState
		o     owner
		id    string
		err   error
	}{
		{"first id", running(), me, "resp_1", nil},
		{"same id again", func() events.RunState { s := running(); s.ResponseID = "resp_1"; return s }(), me, "resp_1", errSkipUpdate},
		{"same id, even from a zombie", func() events.RunState { s := running(); s.ResponseID = "resp_1"; return s }(), owner{"w9", 1}, "resp_1", errSkipUpdate},
		{"another id", func() events.RunState { s := running(); s.ResponseID = "resp_1"; return s }(), me, "resp_2", errOtherResponse},
		{"not the owner", running(), owner{"w2", 4}, "resp_1", errNotOwner},
		{"finished", finished(events.TypeRunFailed), me, "resp_1", errFinished},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.state
			err := knowResponse(&s, tt.o, tt.id)
			if !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if err == nil && s.ResponseID != tt.id {
				t.Fatalf("response id %q", s.ResponseID)
			}
		})
	}
}

func TestRecordCancel(t *testing.T) {
	s := running()
	if err := recordCancel(&s, true, rec); err != nil || s.Cancel == nil || s.Cancel.Note != "stop" || s.Status != events.StatusCancelling {
		t.Fatalf("%v %+v, status %s; want the cancel on record, cancelling", err, s.Cancel, s.Status)
	}
	if err := claimRun(&s, true, owner{worker: "w2", attempt: 4}, s.Digest, 0, t0); err != nil || s.Status != events.StatusCancelling {
		t.Fatalf("claim of a cancelling run: %v, status %s; want it cancelling still", err, s.Status)
	}
	second := events.CancelRecord{Reason: events.ReasonTimeout, At: t0}
	if err := recordCancel(&s, true, second); !errors.Is(err, errSkipUpdate) || s.Cancel.Reason != events.ReasonRequested {
		t.Fatalf("second cancel: %v %+v; the first must stay", err, s.Cancel)
	}
	f := finished(events.TypeRunCompleted)
	if err := recordCancel(&f, true, rec); !errors.Is(err, errFinished) {
		t.Fatalf("finished: %v", err)
	}
	var none events.RunState
	if err := recordCancel(&none, false, rec); !errors.Is(err, errClaimed) {
		t.Fatalf("no record: %v", err)
	}
}

func TestReleaseRun(t *testing.T) {
	next := t0.Add(4 * time.Second)
	retrying := running()
	retrying.Failures, retrying.LastError, retrying.RetryAt, retrying.MaxFailures = 1, "server_error", ptr(t0), 10
	tests := []struct {
		name    string
		state   events.RunState
		by      owner
		failure string
		retryAt time.Time
		err     error
		check   func(t *testing.T, s events.RunState)
	}{
		{name: "hand-off", state: running(), by: me, retryAt: next, check: func(t *testing.T, s events.RunState) {
			if s.Owner != "" || s.Failures != 0 || s.RetryAt != nil || s.MaxFailures != 0 {
				t.Fatalf("a hand-off counted as a failure, or set a retry time: %+v", s)
			}
		}},
		{name: "failed attempt", state: running(), by: me, failure: "server_error", retryAt: next, check: func(t *testing.T, s events.RunState) {
			if s.Owner != "" || s.Failures != 1 || s.LastError != "server_error" || s.RetryAt == nil || !s.RetryAt.Equal(next) || s.MaxFailures != 10 {
				t.Fatalf("%+v", s)
			}
		}},
		{name: "failed attempt retried at once", state: running(), by: me, failure: "reset", check: func(t *testing.T, s events.RunState) {
			if s.Failures != 1 || s.RetryAt != nil {
				t.Fatalf("%+v", s)
			}
		}},
		{name: "hand-off of a run that failed before: the old retry time goes", state: retrying, by: me, check: func(t *testing.T, s events.RunState) {
			if s.Failures != 1 || s.RetryAt != nil || s.LastError != "server_error" {
				t.Fatalf("%+v", s)
			}
		}},
		{name: "zombie", state: running(), by: owner{"w2", 3}, failure: "x", retryAt: next, err: errNotOwner, check: func(t *testing.T, s events.RunState) {
			if s.Owner != "w1" || s.RetryAt != nil {
				t.Fatalf("%+v", s)
			}
		}},
		{name: "finished", state: finished(events.TypeRunCompleted), by: me, failure: "x", retryAt: next, err: errFinished},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.state
			err := releaseRun(&s, tt.by, tt.failure, tt.retryAt, 10)
			if !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
				t.Fatalf("err %v, want %v", err, tt.err)
			}
			if tt.check != nil {
				tt.check(t, s)
			}
		})
	}
}

// The next claim clears the retry time: the try it announced has come.
func TestClaimClearsTheRetryTime(t *testing.T) {
	s := running()
	if err := releaseRun(&s, me, "server_error", t0.Add(time.Second), 10); err != nil {
		t.Fatal(err)
	}
	if err := claimRun(&s, true, owner{"w2", 4}, "d", 0, t0.Add(2*time.Second)); err != nil || s.RetryAt != nil || s.Failures != 1 {
		t.Fatalf("%v %+v", err, s)
	}
}

func TestFinishRun(t *testing.T) {
	s := running()
	if err := finishRun(&s, me, done, "completed", t0); err != nil {
		t.Fatal(err)
	}
	if s.Status != events.StatusCompleted || s.Terminal != events.TypeRunCompleted || s.End == nil || s.End.Seq != 7 ||
		s.UpstreamStatus != "completed" || s.FinishedAt == nil {
		t.Fatalf("%+v", s)
	}
	if s.Usage != nil {
		t.Fatalf("usage %+v from an end without usage", s.Usage)
	}
	if err := finishRun(&s, me, done, "completed", t0); !errors.Is(err, errSkipUpdate) {
		t.Fatalf("the same end again: %v, want a no-op", err)
	}
	other := done
	other.Type, other.Seq = events.TypeRunCancelled, 8
	if err := finishRun(&s, me, other, "", t0); !errors.Is(err, errFinished) {
		t.Fatalf("another end: %v", err)
	}
	z := running()
	if err := finishRun(&z, owner{"w2", 9}, done, "", t0); !errors.Is(err, errNotOwner) || z.Finished() {
		t.Fatalf("zombie finish: %v %+v", err, z)
	}
	// The final usage stays on the record after the events expire.
	u := running()
	withUsage := done
	withUsage.Usage = &events.Usage{InputTokens: 5, OutputTokens: 7, TotalTokens: 12}
	if err := finishRun(&u, me, withUsage, "completed", t0); err != nil {
		t.Fatal(err)
	}
	if u.Usage == nil || *u.Usage != *withUsage.Usage {
		t.Fatalf("state usage %+v, want %+v", u.Usage, withUsage.Usage)
	}
	for status, want := range map[events.EventType]events.RunStatus{
		events.TypeRunCompleted: events.StatusCompleted, events.TypeRunFailed: events.StatusFailed, events.TypeRunCancelled: events.StatusCancelled,
	} {
		s := running()
		_ = finishRun(&s, me, events.RunEvent{Seq: 1, Type: status}, "", t0)
		if s.Status != want {
			t.Errorf("%s: status %s", status, s.Status)
		}
	}
}

func TestCancelQueued(t *testing.T) {
	end := events.RunEvent{RunID: "r", Seq: 1, Type: events.TypeRunCancelled, Time: t0, Reason: events.ReasonRequested, Usage: &events.Usage{}}
	var s events.RunState
	if err := cancelQueued(&s, false, "w5", "d", rec, end, t0); err != nil {
		t.Fatal(err)
	}
	if s.Status != events.StatusCancelled || s.End == nil || s.Cancel == nil || s.Digest != "d" || s.Owner != "w5" || s.Schema != baseSchema {
		t.Fatalf("%+v", s)
	}
	legacy := events.RunState{RunID: "r", Status: events.StatusQueued, Cancel: &events.CancelRecord{Reason: events.ReasonRequested, Note: "first"}}
	if err := cancelQueued(&legacy, true, "w5", "d", rec, end, t0); err != nil || legacy.Cancel.Note != "first" {
		t.Fatalf("queued record: %v %+v", err, legacy.Cancel)
	}
	r := running()
	if err := cancelQueued(&r, true, "w5", "d", rec, end, t0); !errors.Is(err, errClaimed) || r.Finished() {
		t.Fatalf("taken meanwhile: %v", err)
	}
	f := finished(events.TypeRunCompleted)
	if err := cancelQueued(&f, true, "w5", "d", rec, end, t0); !errors.Is(err, errFinished) {
		t.Fatalf("finished: %v", err)
	}
}

func TestDecideCancel(t *testing.T) {
	queued := events.RunState{RunID: "r", Status: events.StatusQueued}
	released := running()
	released.Owner = ""
	newer := running()
	newer.Schema = stateSchema + 1
	tests := []struct {
		name   string
		state  events.RunState
		exists bool
		want   cancelAction
	}{
		{"no record", events.RunState{RunID: "r"}, false, cancelBeforeStart},
		{"queued record (written by an old client)", queued, true, cancelBeforeStart},
		{"running", running(), true, cancelThroughRecord},
		{"released, waiting for a worker", released, true, cancelThroughRecord},
		{"finished", finished(events.TypeRunFailed), true, cancelReportFinished},
		{"newer schema", newer, true, cancelRefuse},
	}
	for _, tt := range tests {
		if got := decideCancel(tt.state, tt.exists); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestFinishedReply(t *testing.T) {
	before := finished(events.TypeRunCancelled)
	if r := finishedReply(before, ""); r.Result != events.CancelCancelled {
		t.Errorf("cancelled before start: %+v", r)
	}
	after := finished(events.TypeRunCancelled)
	after.ResponseID = "resp"
	if r := finishedReply(after, ""); r.Result != events.CancelAlreadyFinished || r.Terminal != events.TypeRunCancelled {
		t.Errorf("cancelled after start: %+v", r)
	}
	// The owner applied this very cancel from its stored record before the
	// request was answered: cancelling, with the outcome known.
	after.Cancel = &events.CancelRecord{Reason: events.ReasonRequested, ID: "c1"}
	after.UpstreamStatus = "cancelled"
	if r := finishedReply(after, "c1"); r.Result != events.CancelCancelling || r.UpstreamStatus != "cancelled" {
		t.Errorf("cancelled by this cancel: %+v", r)
	}
	if r := finishedReply(after, "c2"); r.Result != events.CancelAlreadyFinished {
		t.Errorf("cancelled by another cancel: %+v", r)
	}
	lost := finished(events.TypeRunCancelled)
	lost.CreateStartedAt = ptr(t0)
	if r := finishedReply(lost, ""); r.Result != events.CancelAlreadyFinished {
		t.Errorf("cancelled with the create's outcome unknown: %+v", r)
	}
}

func TestClaimRecordsTheDeadline(t *testing.T) {
	var s events.RunState
	if err := claimRun(&s, false, me, "d", time.Minute, t0); err != nil || s.Deadline == nil || !s.Deadline.Equal(t0.Add(time.Minute)) {
		t.Fatalf("%v, deadline %v; want started + 1m", err, s.Deadline)
	}
	releaseRun(&s, me, "", time.Time{}, 0)
	// A later owner neither moves nor extends it.
	if err := claimRun(&s, true, owner{worker: "w2", attempt: 4}, "d", time.Hour, t0.Add(30*time.Second)); err != nil || !s.Deadline.Equal(t0.Add(time.Minute)) {
		t.Fatalf("%v, deadline %v; want it unchanged", err, s.Deadline)
	}
	var none events.RunState
	if err := claimRun(&none, false, me, "d", 0, t0); err != nil || none.Deadline != nil {
		t.Fatalf("no timeout: %v, deadline %v", err, none.Deadline)
	}
}

func TestRenumberEnd(t *testing.T) {
	for _, tt := range []struct {
		name     string
		end      uint64 // the recorded end's seq, 0 for none
		finished bool
		from, to uint64
		want     error
		wantSeq  uint64
	}{
		{name: "moved", end: 3, finished: true, from: 3, to: 4, wantSeq: 4},
		{name: "moved already", end: 4, finished: true, from: 3, to: 4, want: errSkipUpdate, wantSeq: 4},
		{name: "another end", end: 7, finished: true, from: 3, to: 4, want: errFinished, wantSeq: 7},
		{name: "not finished", from: 3, to: 4, want: errSkipUpdate},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := running()
			if tt.finished {
				s = finished(events.TypeRunCancelled)
				s.End = &events.RunEvent{Seq: tt.end, Type: events.TypeRunCancelled}
			}
			err := renumberEnd(&s, tt.from, tt.to)
			if !errors.Is(err, tt.want) || (s.End != nil && s.End.Seq != tt.wantSeq) {
				t.Fatalf("err %v (want %v), end %+v (want seq %d)", err, tt.want, s.End, tt.wantSeq)
			}
		})
	}
}

func TestMarkStalled(t *testing.T) {
	s := running()
	at := t0
	if err := markStalled(&s, me, &at); err != nil || s.StalledAt == nil {
		t.Fatalf("%v %v", err, s.StalledAt)
	}
	if err := markStalled(&s, me, &at); !errors.Is(err, errSkipUpdate) {
		t.Fatalf("marked twice: %v", err)
	}
	if err := markStalled(&s, owner{worker: "other", attempt: 1}, nil); !errors.Is(err, errNotOwner) {
		t.Fatalf("another worker: %v", err)
	}
	if err := markStalled(&s, me, nil); err != nil || s.StalledAt != nil {
		t.Fatalf("cleared: %v %v", err, s.StalledAt)
	}
}

// The pause and the step after it: only the owner pauses a run, a cancel on
// record ends it instead, a waiting run goes on only when answered (or to
// end a cancel), and endWaitingRun ends only a waiting run.
func TestPauseAndNextStep(t *testing.T) {
	o := owner{worker: "w1", attempt: 2}
	deadline := t0.Add(time.Hour)
	running := func() events.RunState {
		return events.RunState{RunID: "r", Status: events.StatusRunning, Owner: "w1", Attempt: 2, Digest: "d",
			ResponseID: "resp_1", Deadline: &deadline, StartedAt: &t0}
	}
	items := []events.InputItem{{Kind: events.InputApproval, ID: "mcpr_1", Name: "lookup"}}
	step := events.Step{ResponseID: "resp_1", Status: "completed", Usage: &events.Usage{InputTokens: 3}}

	s := running()
	if err := pauseRun(&s, owner{worker: "w2", attempt: 1}, step, items, 0, false, t0); !errors.Is(err, errNotOwner) {
		t.Fatalf("pause by another worker: %v", err)
	}
	cancelled := running()
	cancelled.Cancel = &rec
	if err := pauseRun(&cancelled, o, step, items, 0, false, t0); !errors.Is(err, errCancelPending) {
		t.Fatalf("pause with a cancel on record: %v", err)
	}
	if err := pauseRun(&s, o, step, items, time.Minute, true, t0); err != nil {
		t.Fatal(err)
	}
	if s.Status != events.StatusWaiting || s.Owner != "" || s.ResponseID != "" || s.Step != 1 || len(s.Steps) != 1 ||
		s.Schema != stateSchema || s.Deadline != nil || s.DeadlineLeftMS != time.Hour.Milliseconds() ||
		s.InputDeadline == nil || !s.InputDeadline.Equal(t0.Add(time.Minute)) || len(s.Asked) != 1 {
		t.Fatalf("paused: %+v", s)
	}

	if err := recordCancel(&s, true, rec); !errors.Is(err, errStillWaiting) || s.Cancel != nil {
		t.Fatalf("recordCancel of a waiting run: %v (its canceller ends it instead)", err)
	}
	waiting := s
	if err := claimStep(&waiting, true, owner{worker: "w3", attempt: 1}, "d", 0, false, t0); !errors.Is(err, errStillWaiting) {
		t.Fatalf("claim before the answers: %v", err)
	}
	later := t0.Add(10 * time.Minute)
	next := s
	if err := claimStep(&next, true, owner{worker: "w3", attempt: 1}, "d", time.Hour, true, later); err != nil {
		t.Fatal(err)
	}
	if next.Status != events.StatusRunning || next.Owner != "w3" || next.Step != 2 || next.Failures != 0 ||
		next.Deadline == nil || !next.Deadline.Equal(later.Add(time.Hour)) || next.DeadlineLeftMS != 0 || next.InputDeadline != nil {
		t.Fatalf("next step: %+v", next)
	}
	withCancel := s
	withCancel.Cancel = &rec
	if err := claimStep(&withCancel, true, owner{worker: "w3", attempt: 1}, "d", 0, false, later); err != nil || withCancel.Status != events.StatusCancelling || withCancel.Step != 1 {
		t.Fatalf("claim of a waiting run with a cancel: %v %+v", err, withCancel)
	}

	end := events.RunEvent{RunID: "r", Seq: 3, Type: events.TypeRunFailed}
	if err := endWaitingRun(&next, "w4", nil, end, later); !errors.Is(err, errClaimed) {
		t.Fatalf("endWaitingRun of a running run: %v", err)
	}
	ended := s
	if err := endWaitingRun(&ended, "w4", nil, end, later); err != nil || ended.Status != events.StatusFailed || ended.End == nil ||
		ended.End.Usage == nil || ended.End.Usage.InputTokens != 3 {
		t.Fatalf("endWaitingRun: %v %+v", err, ended)
	}
}

// A step whose items the worker answered itself (served function tools):
// the step is kept, the run stays running with no owner and no response,
// and the claim of its next delivery is an ordinary one (no failure
// counted) that finds the next step to create. Only the owner does it, a
// cancel on record ends the run instead, a finished run refuses.
func TestNextStepWithoutWaiting(t *testing.T) {
	o := owner{worker: "w1", attempt: 2}
	deadline := t0.Add(time.Hour)
	running := func() events.RunState {
		return events.RunState{RunID: "r", Status: events.StatusRunning, Owner: "w1", Attempt: 2, Digest: "d",
			ResponseID: "resp_1", CreateStartedAt: &t0, Deadline: &deadline, StartedAt: &t0}
	}
	items := []events.InputItem{{Kind: events.InputFunctionCall, ID: "call_1", Name: "get_weather"}}
	step := events.Step{ResponseID: "resp_1", Status: "completed", Usage: &events.Usage{InputTokens: 3}}
	finished := running()
	finished.Status, finished.Terminal = events.StatusCompleted, events.TypeRunCompleted
	cancelled := running()
	cancelled.Cancel = &rec
	for _, tc := range []struct {
		name string
		s    events.RunState
		o    owner
		want error
	}{
		{"another worker", running(), owner{worker: "w2", attempt: 1}, errNotOwner},
		{"a later attempt of the same worker", running(), owner{worker: "w1", attempt: 3}, errNotOwner},
		{"a cancel on record", cancelled, o, errCancelPending},
		{"a finished run", finished, o, errFinished},
	} {
		before := tc.s
		if err := nextStep(&tc.s, tc.o, step, items); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if len(tc.s.Steps) != len(before.Steps) || tc.s.Step != before.Step {
			t.Errorf("%s: the record changed: %+v", tc.name, tc.s)
		}
	}

	for _, first := range []int{0, 2} { // a first step (Step unset), a later one
		s := running()
		s.Step = first
		if first > 0 {
			s.Steps = []events.Step{{ResponseID: "resp_0", Status: "completed"}}
		}
		if err := nextStep(&s, o, step, items); err != nil {
			t.Fatal(err)
		}
		want := max(first, 1) + 1
		if s.Status != events.StatusRunning || s.Owner != "" || s.ResponseID != "" || s.CreateStartedAt != nil ||
			s.Step != want || len(s.Steps) != max(first, 1) || s.Steps[len(s.Steps)-1] != step || len(s.Asked) != 1 ||
			s.Schema != stateSchema || s.WaitingSince != nil || s.Deadline == nil || !s.Deadline.Equal(deadline) {
			t.Fatalf("after step %d: %+v", max(first, 1), s)
		}
		claimed := s
		if err := claimRun(&claimed, true, owner{worker: "w3", attempt: 3}, "d", time.Hour, t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if claimed.Owner != "w3" || claimed.Failures != 0 || claimed.Step != want || claimed.Status != events.StatusRunning ||
			!claimed.Deadline.Equal(deadline) {
			t.Fatalf("claim of the next step: %+v", claimed)
		}
		if err := startCreate(&claimed, owner{worker: "w3", attempt: 3}, t0); err != nil {
			t.Fatalf("the next step's create: %v", err)
		}
	}
}
