package consumer_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
)

func TestProvisionConcurrentAndIdempotent(t *testing.T) {
	t.Parallel()
	_, nc := natsembed.RunTest(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	n := events.Names{}

	const workers = 8
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for i := range workers {
		wg.Go(func() { _, errs[i] = consumer.Provision(ctx, js, n, consumer.ProvisionConfig{}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("provisioner %d: %v", i, err)
		}
	}
	res, err := consumer.Provision(ctx, js, n, consumer.ProvisionConfig{})
	if err != nil {
		t.Fatalf("second provision: %v", err)
	}

	runs, err := res.Runs.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rc := runs.Config
	if rc.Name != "FOUNDRYQ_RUNS" || rc.Retention != jetstream.WorkQueuePolicy || rc.Storage != jetstream.FileStorage ||
		rc.MaxMsgsPerSubject != 1 || rc.Discard != jetstream.DiscardNew || !rc.DiscardNewPerSubject ||
		rc.Duplicates < 10*time.Minute || len(rc.Subjects) != 1 || rc.Subjects[0] != "foundryq.runs.*" {
		t.Errorf("runs stream config: %+v", rc)
	}
	ev, err := res.Events.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ec := ev.Config; ec.Retention != jetstream.LimitsPolicy || ec.MaxAge != 24*time.Hour || !ec.AllowDirect || ec.Storage != jetstream.FileStorage {
		t.Errorf("events stream config: %+v", ec)
	}
	dead, err := res.Dead.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if dc := dead.Config; dc.Name != "FOUNDRYQ_DEAD" || dc.MaxAge != 30*24*time.Hour {
		t.Errorf("dead stream config: %+v", dc)
	}
	cancels, err := res.Cancels.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cc := cancels.Config; cc.Name != "FOUNDRYQ_CANCELS" || cc.MaxMsgsPerSubject != 1 || !cc.DiscardNewPerSubject ||
		cc.Discard != jetstream.DiscardNew || cc.MaxAge != 7*24*time.Hour || cc.Subjects[0] != "foundryq.cancels.*" {
		t.Errorf("cancels stream config: %+v", cc)
	}
	ci, err := res.Consumer.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cc := ci.Config; cc.Durable != "foundryq-workers" || cc.AckPolicy != jetstream.AckExplicitPolicy || cc.AckWait != 30*time.Second ||
		cc.MaxDeliver != -1 || cc.InactiveThreshold != 0 || len(cc.BackOff) != 0 || cc.MaxAckPending != 10000 {
		t.Errorf("consumer config: %+v", cc)
	}
	st, err := res.State.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Bucket() != "foundryq-runs" || st.TTL() != 7*24*time.Hour || st.History() != 1 {
		t.Errorf("bucket: %s ttl %s history %d", st.Bucket(), st.TTL(), st.History())
	}

	// A changed setting is applied in place.
	res, err = consumer.Provision(ctx, js, n, consumer.ProvisionConfig{EventsMaxAge: time.Hour, AckWait: time.Minute})
	if err != nil {
		t.Fatalf("provision with new settings: %v", err)
	}
	if ev, _ := res.Events.Info(ctx); ev.Config.MaxAge != time.Hour {
		t.Errorf("events MaxAge = %s after update", ev.Config.MaxAge)
	}
	if ci, _ := res.Consumer.Info(ctx); ci.Config.AckWait != time.Minute {
		t.Errorf("AckWait = %s after update", ci.Config.AckWait)
	}
}

func TestProvisionConfigValidation(t *testing.T) {
	t.Parallel()
	_, nc := natsembed.RunTest(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	tests := []struct {
		setting string
		cfg     consumer.ProvisionConfig
	}{
		{"Replicas", consumer.ProvisionConfig{Replicas: 7}},
		{"EventsMaxAge", consumer.ProvisionConfig{EventsMaxAge: time.Millisecond}},
		{"EventsDuplicates", consumer.ProvisionConfig{EventsMaxAge: time.Minute, EventsDuplicates: time.Hour}},
		{"Duplicates", consumer.ProvisionConfig{Duplicates: time.Minute}},
		{"AckWait", consumer.ProvisionConfig{AckWait: time.Millisecond}},
		{"MaxDeliver", consumer.ProvisionConfig{MaxDeliver: -1}},
		{"MaxAckPending", consumer.ProvisionConfig{MaxAckPending: -5}},
		{"StateTTL", consumer.ProvisionConfig{StateTTL: -time.Hour}},
		{"StateTTL", consumer.ProvisionConfig{StateTTL: time.Hour, EventsMaxAge: 2 * time.Hour}},
		{"DeadMaxAge", consumer.ProvisionConfig{DeadMaxAge: -time.Hour}},
	}
	for _, tt := range tests {
		_, err := consumer.Provision(ctx, js, events.Names{}, tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.setting) {
			t.Errorf("%s: err = %v, want one naming the setting", tt.setting, err)
		}
	}
	if _, err := js.Stream(ctx, "FOUNDRYQ_RUNS"); err == nil {
		t.Error("a stream was created despite a bad config")
	}
}

func TestProvisionPrefix(t *testing.T) {
	t.Parallel()
	_, nc := natsembed.RunTest(t)
	js, _ := jetstream.New(nc)
	ctx := testCtx(t)
	a, _ := events.NewNames("tenant_a.fq")
	b, _ := events.NewNames("tenant_b.fq")
	for _, n := range []events.Names{a, b} {
		if _, err := consumer.Provision(ctx, js, n, consumer.ProvisionConfig{}); err != nil {
			t.Fatalf("%s: %v", n.Prefix, err)
		}
	}
	if _, err := js.Stream(ctx, "TENANT_A_FQ_EVENTS"); err != nil {
		t.Error(err)
	}
	if _, err := js.KeyValue(ctx, "tenant_b_fq-runs"); err != nil {
		t.Error(err)
	}
}

// The runs stream is provisioned last: a submit that the runs stream
// accepts finds the streams and the bucket that follow the run (a watch, a
// cancel, its state) already there. Here the state bucket cannot be made
// (another stream holds its subjects), so the runs stream must not exist.
func TestProvisionRunsStreamLast(t *testing.T) {
	t.Parallel()
	_, nc := natsembed.RunTest(t)
	js, _ := jetstream.New(nc)
	ctx := testCtx(t)
	n := events.Names{}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SQUATTER", Subjects: []string{"$KV." + n.Bucket() + ".>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := consumer.Provision(ctx, js, n, consumer.ProvisionConfig{}); err == nil {
		t.Fatal("provision succeeded although the bucket's subjects are taken")
	}
	if _, err := js.Stream(ctx, n.RunsStream()); err == nil {
		t.Fatalf("stream %s exists although the bucket could not be made: a submit would be accepted with no state bucket", n.RunsStream())
	}
	if _, err := js.Stream(ctx, n.EventsStream()); err != nil {
		t.Fatalf("events stream: %v", err)
	}
}
