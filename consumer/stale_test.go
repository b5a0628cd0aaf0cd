package consumer_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
)

// On replicated buckets any replica answers a direct get of a state
// record, and a follower may not have applied the owner's own last write
// yet (NATS documents no read-your-writes for direct gets). A transition
// decided on such a read ("another worker owns the run", right after this
// worker claimed it) stopped the run without an ack: it waited a whole ack
// wait and the next claim counted a failed attempt (seen in the cluster
// test, about 1 run in 40). State records are therefore read from the
// stream leader. Here a replica that never catches up answers about half of
// the direct gets of the bucket ("no such record"); every run must still
// complete at its first attempt, with no failure counted.
func TestStaleStateReadsAreReadAgain(t *testing.T) {
	t.Parallel()
	e := setup(t, withProvision(consumer.ProvisionConfig{AckWait: 2 * time.Second}))
	e.startWorker(consumer.Config{WorkerID: "stale"})
	names := e.client.Names()
	// Every direct get of the bucket reaches it as well as the stream; the
	// first answer wins.
	stale, err := e.nc.Subscribe("$JS.API.DIRECT.GET.KV_"+names.Bucket()+".>", func(m *nats.Msg) {
		_ = m.RespondMsg(&nats.Msg{Header: nats.Header{"Status": []string{"404"}, "Description": []string{"Message Not Found"}}})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Unsubscribe()
	const n = 20
	for i := range n {
		e.submit(request(fmt.Sprintf("stale-%d", i), map[string]string{"emu_tokens": "5"}))
	}
	for i := range n {
		id := fmt.Sprintf("stale-%d", i)
		evs := e.collect(id, 30*time.Second)
		last := checkWellFormed(t, evs)
		if last.Type != events.TypeRunCompleted || evs[0].Type != events.TypeRunStarted || evs[0].Attempt != 1 {
			t.Fatalf("%s: first event %s attempt %d, last %s %+v; want run.started at attempt 1 and run.completed", id, evs[0].Type, evs[0].Attempt, last.Type, last.Error)
		}
		if got, want := text(evs), e.emulatorText(id); got != want {
			t.Fatalf("%s: text %q, want %q", id, got, want)
		}
	}
	_ = stale.Unsubscribe()
	for i := range n {
		id := fmt.Sprintf("stale-%d", i)
		if st := e.state(id); st.Failures != 0 || st.Attempt != 1 {
			t.Errorf("%s: %d failures, attempt %d (%s); want none, attempt 1", id, st.Failures, st.Attempt, st.LastError)
		}
	}
}
