package consumer_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"time"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry/foundrytest"
)

// A worker that vanishes mid-run (its NATS connection cut, so it can neither
// publish nor renew the lease) is replaced after the ack wait; the new owner
// re-attaches to the same Foundry response and continues the same seq.
func TestCrashedOwnerIsReplacedByReattach(t *testing.T) {
	t.Parallel()
	e := setup(t, withProvision(consumer.ProvisionConfig{AckWait: time.Second}))
	a := e.startWorker(consumer.Config{WorkerID: "crash-a", ShutdownTimeout: time.Second})
	e.submit(request("crash-1", map[string]string{"emu_tokens": "80", "emu_token_ms": "15"}))
	e.waitEvent("crash-1", events.TypeTextDelta, 10*time.Second)
	a.crash() // no more publishes, acks or lease renewals
	reg := prometheus.NewRegistry()
	e.startWorker(consumer.Config{WorkerID: "crash-b", Registerer: reg})

	evs := e.collect("crash-1", 30*time.Second)
	last := checkWellFormed(t, evs)
	if last.Type != events.TypeRunCompleted {
		t.Fatalf("run ended %s", last.Type)
	}
	if got, want := text(evs), e.emulatorText("crash-1"); got != want {
		t.Fatalf("text across the crash:\n got %q\nwant %q", got, want)
	}
	var starts []events.RunEvent
	for _, ev := range evs {
		if ev.Type == events.TypeRunStarted {
			starts = append(starts, ev)
		}
	}
	if len(starts) != 2 || starts[1].Worker != "crash-b" || starts[1].Attempt < 2 || starts[1].ResponseID != starts[0].ResponseID {
		t.Fatalf("run.started events %+v: want a second one from crash-b, attempt >= 2, same response", starts)
	}
	if n := counter(t, reg, "foundryq_runs_started_total", "resumed"); n != 1 {
		t.Fatalf("crash-b re-attached by streaming %v times, want 1", n)
	}
}

// counter reads the value of a counter with one label value ("" for an
// unlabelled counter) from a registry.
func counter(t *testing.T, reg *prometheus.Registry, name, labelValue string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelValue == "" && len(m.GetLabel()) == 0 {
				return m.GetCounter().GetValue()
			}
			for _, l := range m.GetLabel() {
				if l.GetValue() == labelValue {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// When the response can no longer be streamed (the resume window passed),
// the new owner polls it to its end and publishes the text not yet
// published.
func TestReattachAfterResumeWindowPolls(t *testing.T) {
	t.Parallel()
	e := setup(t,
		withProvision(consumer.ProvisionConfig{AckWait: time.Second}),
		withEmulator(foundrytest.Config{ResumeWindow: 300 * time.Millisecond}))
	a := e.startWorker(consumer.Config{WorkerID: "poll-a", ShutdownTimeout: time.Second})
	e.submit(request("poll-1", map[string]string{"emu_tokens": "80", "emu_token_ms": "20"}))
	e.waitEvent("poll-1", events.TypeTextDelta, 10*time.Second)
	a.crash()
	reg := prometheus.NewRegistry()
	e.startWorker(consumer.Config{WorkerID: "poll-b", Registerer: reg})

	evs := e.collect("poll-1", 30*time.Second)
	last := checkWellFormed(t, evs)
	if last.Type != events.TypeRunCompleted || last.Usage == nil {
		t.Fatalf("run ended %+v, want run.completed with usage", last)
	}
	if got, want := text(evs), e.emulatorText("poll-1"); got != want {
		t.Fatalf("text across the crash and poll:\n got %q\nwant %q", got, want)
	}
	if n := counter(t, reg, "foundryq_runs_started_total", "polled"); n != 1 {
		t.Fatalf("poll-b polled %v times, want 1", n)
	}
}

// A graceful shutdown hands the run off at once (Nak, not the ack wait):
// another worker re-attaches, nothing is cancelled upstream.
func TestShutdownHandsOff(t *testing.T) {
	t.Parallel()
	e := setup(t) // default ack wait: 30s, far beyond this test's bound
	a := e.startWorker(consumer.Config{WorkerID: "hand-a"})
	e.submit(request("hand-1", map[string]string{"emu_tokens": "100", "emu_token_ms": "15"}))
	e.waitEvent("hand-1", events.TypeTextDelta, 10*time.Second)
	e.startWorker(consumer.Config{WorkerID: "hand-b"})
	start := time.Now()
	a.shutdown(t)

	evs := e.collect("hand-1", 15*time.Second)
	last := checkWellFormed(t, evs)
	if last.Type != events.TypeRunCompleted {
		t.Fatalf("run ended %s", last.Type)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("hand-off took %s: the job waited for its ack wait instead of a Nak", took)
	}
	if got, want := text(evs), e.emulatorText("hand-1"); got != want {
		t.Fatalf("text across the hand-off:\n got %q\nwant %q", got, want)
	}
	if st := e.emu.Stats(); st.CancelsReceived != 0 || st.ResponsesByRun["hand-1"] != 1 {
		t.Fatalf("emulator: %d cancels, %d responses for the run; want 0 and 1", st.CancelsReceived, st.ResponsesByRun["hand-1"])
	}
}

// A zombie owner (its job lease lost, its event connection alive) and the
// worker that took the run over both write; the fence lets only one win, so
// the subject never interleaves two writers: the text is exact and there is
// one terminal event.
func TestZombieOwnerCannotInterleave(t *testing.T) {
	t.Parallel()
	e := setup(t, withProvision(consumer.ProvisionConfig{AckWait: time.Second}))
	a := e.startWorker(consumer.Config{WorkerID: "zombie-a", ShutdownTimeout: time.Second})
	e.submit(request("zombie-1", map[string]string{"emu_tokens": "400", "emu_token_ms": "10"}))
	e.waitEvent("zombie-1", events.TypeTextDelta, 10*time.Second)
	a.Jobs.Close() // the lease is lost; a keeps relaying on its event connection
	e.startWorker(consumer.Config{WorkerID: "zombie-b"})

	evs := e.collect("zombie-1", 30*time.Second)
	last := checkWellFormed(t, evs)
	if last.Type != events.TypeRunCompleted {
		t.Fatalf("run ended %s", last.Type)
	}
	if got, want := text(evs), e.emulatorText("zombie-1"); got != want {
		t.Fatalf("text with a zombie writer:\n got %q\nwant %q", got, want)
	}
}
