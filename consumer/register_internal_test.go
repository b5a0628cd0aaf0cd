package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/internal/natsembed"
)

// A new job for a run id that this worker is still finishing (it acked the
// old job a moment ago and has not unregistered the run yet) is given back
// for a moment, not ignored until its ack wait runs out; a second delivery
// of the job the worker runs is still ignored.
func TestNewJobForARunBeingFinished(t *testing.T) {
	t.Parallel()
	_, nc := natsembed.RunTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names, _ := events.NewNames("")
	res, err := Provision(ctx, js, names, ProvisionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	up, err := foundry.New(foundry.Config{BaseURL: "http://127.0.0.1:1/openai/v1/", APIKey: "unused"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(nc, up, Config{WorkerID: "finishing", RetryDelay: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w.res = res
	fetch := func() jetstream.Msg {
		t.Helper()
		batch, err := res.Consumer.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			return m
		}
		return nil
	}
	publish := func() {
		t.Helper()
		if _, err := js.Publish(ctx, names.RunSubject("dup-1"), []byte(`{"run_id":"dup-1","model":"m","input":"x"}`)); err != nil {
			t.Fatal(err)
		}
	}

	publish()
	first := fetch()
	if first == nil {
		t.Fatal("no job")
	}
	if err := first.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	// The run of the first job is still registered (finishing).
	finishing := &run{id: "dup-1", msg: first}
	w.runs["dup-1"] = finishing

	publish() // a resubmit, after the first job was acked
	second := fetch()
	if second == nil {
		t.Fatal("no second job")
	}
	w.handle(second)
	again := fetch() // given back: here again long before the 30 s ack wait
	if again == nil {
		t.Fatal("the new job was not given back: it waits for its ack wait")
	}
	if meta, _ := again.Metadata(); meta.NumDelivered != 2 {
		t.Fatalf("delivery %d, want the second delivery of the new job", meta.NumDelivered)
	}
	if w.runs["dup-1"] != finishing {
		t.Fatal("the finishing run was replaced")
	}

	// A second delivery of the job being run is ignored, as before.
	w.runs["dup-1"] = &run{id: "dup-1", msg: again}
	w.handle(again)
	if m := fetch(); m != nil {
		t.Fatalf("a redelivery of the job being run was given back: %s", m.Subject())
	}
}
