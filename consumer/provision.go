package consumer

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/retry"
)

// ProvisionConfig sets the JetStream resources Provision creates: the
// topology's settings, where each field and its default is described
// (events/topology.go). Zero fields take the defaults.
type ProvisionConfig = events.ProvisionConfig

// Resources are the JetStream objects foundryq runs on.
type Resources struct {
	Runs, Events, Dead, Cancels, Inputs jetstream.Stream
	// Queue holds the lanes (events.QueueStreamConfig); their consumers
	// are created as lanes fill (lanes.go).
	Queue    jetstream.Stream
	Consumer jetstream.Consumer
	State    jetstream.KeyValue
}

// provisionAttempts bounds the retries of one create-or-update when
// another process creates the same resource concurrently.
const provisionAttempts = 8

// Provision creates or updates the events, dead-letter, cancels, inputs and queue streams,
// the state bucket, then the runs stream and the durable worker consumer. It is idempotent and
// safe to run from many workers at once at start. An existing resource
// whose configuration cannot be changed in place (e.g. the runs stream's
// retention) makes it fail with the server's error.
func Provision(ctx context.Context, js jetstream.JetStream, n events.Names, cfg ProvisionConfig) (Resources, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return Resources{}, err
	}
	var res Resources
	var err error
	// The runs stream last: once a producer's submit is accepted, the
	// streams and the bucket that follow the run (a watch, a cancel, its
	// state) exist too, even while the first worker is still provisioning.
	if res.Events, err = upsertStream(ctx, js, events.EventsStreamConfig(n, cfg)); err != nil {
		return Resources{}, err
	}
	if res.Dead, err = upsertStream(ctx, js, events.DeadStreamConfig(n, cfg)); err != nil {
		return Resources{}, err
	}
	if res.Cancels, err = upsertStream(ctx, js, events.CancelsStreamConfig(n, cfg)); err != nil {
		return Resources{}, err
	}
	if res.Inputs, err = upsertStream(ctx, js, events.InputsStreamConfig(n, cfg)); err != nil {
		return Resources{}, err
	}
	if res.Queue, err = upsertStream(ctx, js, events.QueueStreamConfig(n, cfg)); err != nil {
		return Resources{}, err
	}
	kcfg := events.StateBucketConfig(n, cfg)
	if res.State, err = retryProvision(ctx, "bucket "+kcfg.Bucket, func() (jetstream.KeyValue, error) {
		return js.CreateOrUpdateKeyValue(ctx, kcfg)
	}); err != nil {
		return Resources{}, err
	}
	if res.Runs, err = upsertStream(ctx, js, events.RunsStreamConfig(n, cfg)); err != nil {
		return Resources{}, err
	}
	ccfg := events.ConsumerConfig(n, cfg)
	if res.Consumer, err = retryProvision(ctx, "consumer "+ccfg.Durable, func() (jetstream.Consumer, error) {
		return res.Runs.CreateOrUpdateConsumer(ctx, ccfg)
	}); err != nil {
		return Resources{}, err
	}
	return res, nil
}

// upsertStream creates the stream, or updates it unless it already holds
// every setting of scfg: workers starting together then send no update
// (nats-server races a stream update against a consumer being created on
// the same stream, which the race detector reports from its own code).
func upsertStream(ctx context.Context, js jetstream.JetStream, scfg jetstream.StreamConfig) (jetstream.Stream, error) {
	return retryProvision(ctx, "stream "+scfg.Name, func() (jetstream.Stream, error) {
		// A create of a stream that exists with the same config succeeds
		// without an update; only a different config is updated.
		s, err := js.CreateStream(ctx, scfg)
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return s, err
		}
		if s, err = js.Stream(ctx, scfg.Name); err != nil || holds(s.CachedInfo().Config, scfg) {
			return s, err
		}
		return js.UpdateStream(ctx, scfg)
	})
}

// holds reports whether have has the value of every field that want sets
// (its fields that are not zero); the server fills the others with its
// defaults.
func holds(have, want jetstream.StreamConfig) bool {
	h, w := reflect.ValueOf(have), reflect.ValueOf(want)
	for i := range w.NumField() {
		if f := w.Field(i); !f.IsZero() && !reflect.DeepEqual(f.Interface(), h.Field(i).Interface()) {
			return false
		}
	}
	return true
}

// retryProvision retries fn while the error says a concurrent provisioner
// created or changed the resource between our look-up and our write.
func retryProvision[T any](ctx context.Context, what string, fn func() (T, error)) (T, error) {
	var zero T
	var err error
	for attempt := 0; attempt < provisionAttempts; attempt++ {
		var v T
		v, err = fn()
		if err == nil {
			return v, nil
		}
		if !isProvisionRace(err) {
			break
		}
		if !retry.Sleep(ctx, time.Duration(attempt+1)*10*time.Millisecond) {
			err = context.Cause(ctx)
			break
		}
	}
	return zero, fmt.Errorf("consumer: provision %s: %w", what, err)
}

func isProvisionRace(err error) bool {
	return errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) ||
		errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.Is(err, jetstream.ErrConsumerExists) ||
		errors.Is(err, jetstream.ErrConsumerDoesNotExist)
}
