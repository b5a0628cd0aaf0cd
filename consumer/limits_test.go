package consumer_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

// A consumer on the events stream, durable or not, is removed after
// EventsConsumerInactive without pulls, and EventsMaxConsumers caps how
// many exist: what a client can leave behind is bounded.
func TestEventsStreamConsumerLimits(t *testing.T) {
	t.Parallel()
	_, nc := natsembed.RunTest(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	names := events.Names{}
	res, err := consumer.Provision(ctx, js, names, consumer.ProvisionConfig{EventsMaxConsumers: 3, EventsConsumerInactive: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	info, err := res.Events.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxConsumers != 3 || info.Config.ConsumerLimits.InactiveThreshold != time.Second {
		t.Fatalf("events stream: MaxConsumers %d, consumer InactiveThreshold %s; want 3, 1s", info.Config.MaxConsumers, info.Config.ConsumerLimits.InactiveThreshold)
	}

	// A durable asking for no threshold gets the stream's, and is removed.
	leftover, err := res.Events.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "left-behind", AckPolicy: jetstream.AckNonePolicy})
	if err != nil {
		t.Fatal(err)
	}
	if got := leftover.CachedInfo().Config.InactiveThreshold; got != time.Second {
		t.Fatalf("durable consumer InactiveThreshold %s, want the stream's 1s", got)
	}
	// One asking for longer is refused.
	if _, err := res.Events.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "forever", InactiveThreshold: time.Hour}); err == nil {
		t.Fatal("a consumer with a longer InactiveThreshold than the stream allows was created")
	}
	testkit.Eventually(t, 30*time.Second, "the idle durable consumer to be removed", func() bool {
		_, err := res.Events.Consumer(ctx, "left-behind")
		return errors.Is(err, jetstream.ErrConsumerNotFound)
	})

	// The cap: three consumers exist, a fourth is refused.
	for _, name := range []string{"c1", "c2", "c3"} {
		if _, err := res.Events.CreateConsumer(ctx, jetstream.ConsumerConfig{Name: name, AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: time.Second}); err != nil {
			t.Fatalf("consumer %s: %v", name, err)
		}
	}
	if _, err := res.Events.CreateConsumer(ctx, jetstream.ConsumerConfig{Name: "c4", AckPolicy: jetstream.AckNonePolicy}); !errors.Is(err, jetstream.ErrMaximumConsumersLimit) {
		t.Fatalf("fourth consumer: %v, want ErrMaximumConsumersLimit", err)
	}
}

func TestProvisionConsumerLimitsValidation(t *testing.T) {
	t.Parallel()
	_, nc := natsembed.RunTest(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []consumer.ProvisionConfig{{EventsMaxConsumers: -2}, {EventsConsumerInactive: time.Millisecond}} {
		if _, err := consumer.Provision(testCtx(t), js, events.Names{}, cfg); err == nil {
			t.Errorf("Provision(%+v) accepted", cfg)
		}
	}
	if c := events.EventsStreamConfig(events.Names{}, events.ProvisionConfig{}); c.MaxConsumers != events.DefaultEventsMaxConsumers || c.ConsumerLimits.InactiveThreshold != events.DefaultEventsConsumerInactive {
		t.Errorf("defaults: MaxConsumers %d, InactiveThreshold %s", c.MaxConsumers, c.ConsumerLimits.InactiveThreshold)
	}
}
