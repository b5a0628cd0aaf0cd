package events

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The topology: the streams, the consumer and the bucket foundryq runs on,
// with their settings and defaults, in one place. Clients, the gateway and
// tools read them here; consumer.Provision creates them.

// ProvisionConfig sets the JetStream resources consumer.Provision creates
// (a worker's consumer.Config.Provision holds one). Zero fields take the
// defaults noted on each.
type ProvisionConfig struct {
	// Replicas of every stream, consumer and the KV bucket (1..5). Default 1.
	Replicas int
	// EventsMaxAge is how long events are kept (FOUNDRYQ_EVENTS MaxAge). Default 24h.
	EventsMaxAge time.Duration
	// EventsDuplicates is the events stream's Nats-Msg-Id dedupe window.
	// Default 2m (capped at EventsMaxAge). A worker retrying a publish within
	// it never stores an event twice.
	EventsDuplicates time.Duration
	// Duplicates is the runs stream's dedupe window on Nats-Msg-Id = run id.
	// Default and minimum 10m (the wire contract).
	Duplicates time.Duration
	// AckWait of the worker consumer: how long a job may go without an ack
	// or InProgress before it is redelivered. Default 30s.
	AckWait time.Duration
	// MaxDeliver is how many failed attempts a run may use before the worker
	// gives it up (run.failed and a dead letter). Hand-offs at shutdown,
	// lease renewals and deliveries a worker ignores do not count: the
	// worker counts failures in the run's state record, and the JetStream
	// consumer itself redelivers without limit. Default 10.
	MaxDeliver int
	// MaxAckPending of the worker consumer: jobs in flight across all
	// workers (-1 unlimited). Default 10000.
	MaxAckPending int
	// StateTTL is how long a run state lives in the KV bucket after its last
	// write (bucket TTL). Default 7 days.
	StateTTL time.Duration
	// DeadMaxAge is how long dead letters are kept. Default 30 days.
	DeadMaxAge time.Duration
	// EventsMaxConsumers caps the consumers on the events stream (every
	// Watch holds one while it runs; -1: no cap). NATS permissions cannot
	// tell the ordered consumer of a watch from a durable one created on
	// the same API subject, so this and EventsConsumerInactive bound what a
	// client can leave behind. Default 10000.
	EventsMaxConsumers int
	// EventsConsumerInactive is the events stream's consumer limit on
	// InactiveThreshold: a consumer that asks for none gets it (durables
	// included), and one that asks for more is refused, so every consumer
	// a client leaves behind is removed after this long without a pull.
	// Default 5m, the threshold of nats.go's ordered consumers.
	EventsConsumerInactive time.Duration
	// RunsMaxMsgs bounds the runs stream (requests waiting for a
	// worker), which clients write: past it JetStream refuses a new
	// request (Submit returns its error, "maximum messages exceeded");
	// nothing queued is dropped (discard new). -1: no limit. Default
	// 1,000,000.
	RunsMaxMsgs int64
	// RunsMaxBytes bounds the runs stream's bytes the same way ("maximum
	// bytes exceeded"). Default 0: no limit of the stream's own, because
	// JetStream reserves a stream's max_bytes in the account's and the
	// server's store when the stream is created; the account's max_file
	// (deploy/nats configs) bounds what clients can store instead.
	RunsMaxBytes int64
	// CancelsMaxMsgs and CancelsMaxBytes bound the cancels stream (one
	// record per run id, kept StateTTL), which clients write, as above:
	// past either a new record is refused, and the cancel still reaches
	// the run's owner (the request; reply unrecorded: true). Defaults
	// 1,000,000 and 0 (see RunsMaxBytes).
	CancelsMaxMsgs  int64
	CancelsMaxBytes int64
	// InputsMaxMsgs and InputsMaxBytes bound the stream of answers to runs
	// that ask (and of the requests of waiting runs), which workers write
	// for clients: past either a new answer is refused (the caller's reply
	// is store_full, events.ErrInputsFull) and nothing stored is lost; a
	// run that cannot keep its request to pause is retried later. Defaults
	// 1,000,000 and -1: no byte limit of the stream's own, because
	// JetStream reserves a stream's max_bytes in the account's and the
	// server's store when the stream is created (see RunsMaxBytes); each
	// answer is at most 260 KiB (events.MaxInputOutputLen and the rest).
	InputsMaxMsgs  int64
	InputsMaxBytes int64
	// LaneInactive is how long a lane consumer (one per priority and
	// fairness key on the queue stream, QueueStreamConfig) may go without
	// a pull and without a job in flight before the server removes it; a
	// worker creates it again when the lane holds jobs. Default 1h.
	LaneInactive time.Duration
}

// ProvisionConfig defaults.
const (
	DefaultEventsMaxAge     = 24 * time.Hour
	DefaultEventsDuplicates = 2 * time.Minute
	DefaultDuplicates       = 10 * time.Minute
	DefaultAckWait          = 30 * time.Second
	DefaultMaxDeliver       = 10
	DefaultMaxAckPending    = 10000
	DefaultStateTTL         = 7 * 24 * time.Hour
	DefaultDeadMaxAge       = 30 * 24 * time.Hour
	DefaultLaneInactive     = time.Hour
)

// Defaults of the client-writable streams' message limits.
const (
	DefaultRunsMaxMsgs    = 1_000_000
	DefaultCancelsMaxMsgs = 1_000_000
	DefaultInputsMaxMsgs  = 1_000_000
)

// Defaults of the events stream's consumer limits.
const (
	DefaultEventsMaxConsumers     = 10000
	DefaultEventsConsumerInactive = 5 * time.Minute
)

// WithDefaults returns c with every zero field set to its default, as
// consumer.Provision and the configurations below apply them.
func (c ProvisionConfig) WithDefaults() ProvisionConfig {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.EventsMaxAge == 0 {
		c.EventsMaxAge = DefaultEventsMaxAge
	}
	if c.EventsDuplicates == 0 {
		c.EventsDuplicates = min(DefaultEventsDuplicates, c.EventsMaxAge)
	}
	if c.Duplicates == 0 {
		c.Duplicates = DefaultDuplicates
	}
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
	if c.InputsMaxBytes == 0 {
		c.InputsMaxBytes = -1
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = DefaultMaxDeliver
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = DefaultMaxAckPending
	}
	if c.StateTTL == 0 {
		c.StateTTL = DefaultStateTTL
	}
	if c.DeadMaxAge == 0 {
		c.DeadMaxAge = DefaultDeadMaxAge
	}
	if c.EventsMaxConsumers == 0 {
		c.EventsMaxConsumers = DefaultEventsMaxConsumers
	}
	if c.EventsConsumerInactive == 0 {
		c.EventsConsumerInactive = DefaultEventsConsumerInactive
	}
	if c.RunsMaxMsgs == 0 {
		c.RunsMaxMsgs = DefaultRunsMaxMsgs
	}
	if c.CancelsMaxMsgs == 0 {
		c.CancelsMaxMsgs = DefaultCancelsMaxMsgs
	}
	if c.InputsMaxMsgs == 0 {
		c.InputsMaxMsgs = DefaultInputsMaxMsgs
	}
	if c.LaneInactive == 0 {
		c.LaneInactive = DefaultLaneInactive
	}
	return c
}

// ErrInvalidProvisionConfig is wrapped by the error Validate returns for a
// bad ProvisionConfig (and so by consumer.Provision's, and a worker's). Its
// text, and that of the errors below, still says "consumer": they are what
// a worker has always printed for a bad setting.
var ErrInvalidProvisionConfig = errors.New("consumer: invalid provision config")

// Validate checks a ProvisionConfig that went through WithDefaults: an
// error wrapping ErrInvalidProvisionConfig names the first setting out of
// range, with what is accepted.
func (c ProvisionConfig) Validate() error {
	if err := c.check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidProvisionConfig, err)
	}
	return nil
}

func (c ProvisionConfig) check() error {
	switch {
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("consumer: provision: Replicas %d must be between 1 and 5", c.Replicas)
	case c.EventsMaxAge < time.Second:
		return fmt.Errorf("consumer: provision: EventsMaxAge %s must be at least 1s", c.EventsMaxAge)
	case c.EventsDuplicates < 100*time.Millisecond || c.EventsDuplicates > c.EventsMaxAge:
		return fmt.Errorf("consumer: provision: EventsDuplicates %s must be between 100ms and EventsMaxAge (%s)", c.EventsDuplicates, c.EventsMaxAge)
	case c.Duplicates < DefaultDuplicates:
		return fmt.Errorf("consumer: provision: Duplicates %s must be at least %s", c.Duplicates, DefaultDuplicates)
	case c.AckWait < time.Second:
		return fmt.Errorf("consumer: provision: AckWait %s must be at least 1s", c.AckWait)
	case c.MaxDeliver < 1:
		return fmt.Errorf("consumer: provision: MaxDeliver %d must be at least 1", c.MaxDeliver)
	case c.MaxAckPending < -1:
		return fmt.Errorf("consumer: provision: MaxAckPending %d must be -1 (unlimited) or positive", c.MaxAckPending)
	case c.StateTTL < time.Second:
		return fmt.Errorf("consumer: provision: StateTTL %s must be at least 1s", c.StateTTL)
	case c.StateTTL < c.EventsMaxAge:
		return fmt.Errorf("consumer: provision: StateTTL %s must be at least EventsMaxAge %s (a used run id must be recognised as long as its events exist)", c.StateTTL, c.EventsMaxAge)
	case c.DeadMaxAge < time.Second:
		return fmt.Errorf("consumer: provision: DeadMaxAge %s must be at least 1s", c.DeadMaxAge)
	case c.EventsMaxConsumers < -1:
		return fmt.Errorf("consumer: provision: EventsMaxConsumers %d must be -1 (no cap) or positive", c.EventsMaxConsumers)
	case c.EventsConsumerInactive < time.Second:
		return fmt.Errorf("consumer: provision: EventsConsumerInactive %s must be at least 1s", c.EventsConsumerInactive)
	case c.RunsMaxMsgs < -1, c.CancelsMaxMsgs < -1:
		return fmt.Errorf("consumer: provision: RunsMaxMsgs %d, CancelsMaxMsgs %d: each must be -1 (no limit) or positive", c.RunsMaxMsgs, c.CancelsMaxMsgs)
	case c.RunsMaxBytes < 0, c.CancelsMaxBytes < 0:
		return fmt.Errorf("consumer: provision: RunsMaxBytes %d, CancelsMaxBytes %d: each must be 0 (no limit of the stream's own) or positive", c.RunsMaxBytes, c.CancelsMaxBytes)
	case c.LaneInactive < time.Minute:
		return fmt.Errorf("consumer: provision: LaneInactive %s must be at least 1m", c.LaneInactive)
	case c.InputsMaxMsgs < -1, c.InputsMaxBytes < -1:
		return fmt.Errorf("consumer: provision: InputsMaxMsgs %d, InputsMaxBytes %d: each must be -1 (no limit of the stream's own) or positive", c.InputsMaxMsgs, c.InputsMaxBytes)
	}
	return nil
}

// RunsStreamConfig, EventsStreamConfig, DeadStreamConfig, ConsumerConfig
// and StateBucketConfig return the exact configurations consumer.Provision
// applies (after defaults), for inspection and for deploy tooling.
func RunsStreamConfig(n Names, cfg ProvisionConfig) jetstream.StreamConfig {
	cfg = cfg.WithDefaults()
	return jetstream.StreamConfig{
		Name:                 n.RunsStream(),
		Description:          "foundryq run requests (work queue, one per run id)",
		Subjects:             []string{n.RunsWildcard()},
		Retention:            jetstream.WorkQueuePolicy,
		Storage:              jetstream.FileStorage,
		Replicas:             cfg.Replicas,
		MaxMsgsPerSubject:    1,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		Duplicates:           cfg.Duplicates,
		MaxBytes:             cfg.RunsMaxBytes,
		MaxMsgs:              cfg.RunsMaxMsgs,
	}
}

// EventsStreamConfig: see RunsStreamConfig.
func EventsStreamConfig(n Names, cfg ProvisionConfig) jetstream.StreamConfig {
	cfg = cfg.WithDefaults()
	return jetstream.StreamConfig{
		Name:        n.EventsStream(),
		Description: "foundryq run events (tokens and lifecycle)",
		Subjects:    []string{n.EventsWildcard()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		MaxAge:      cfg.EventsMaxAge,
		Duplicates:  cfg.EventsDuplicates,
		AllowDirect: true,
		// Every stored event is copied to <prefix>.live.<run_id>: followers
		// there see stored events only, without a consumer each.
		RePublish: &jetstream.RePublish{Source: n.EventsWildcard(), Destination: n.LiveSubject("{{wildcard(1)}}")},
		// Clients create consumers here (Watch): bound how many, and for
		// how long one without pulls outlives its creator.
		MaxConsumers:   cfg.EventsMaxConsumers,
		ConsumerLimits: jetstream.StreamConsumerLimits{InactiveThreshold: cfg.EventsConsumerInactive},
	}
}

// DeadStreamConfig: see RunsStreamConfig.
func DeadStreamConfig(n Names, cfg ProvisionConfig) jetstream.StreamConfig {
	cfg = cfg.WithDefaults()
	return jetstream.StreamConfig{
		Name:        n.DeadStream(),
		Description: "foundryq dead letters: requests that could never run",
		Subjects:    []string{n.DeadWildcard()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		MaxAge:      cfg.DeadMaxAge,
		AllowDirect: true,
	}
}

// CancelsStreamConfig: see RunsStreamConfig. One durable cancel record per
// run id (the first stays: DiscardNewPerSubject), kept as long as run
// states.
func CancelsStreamConfig(n Names, cfg ProvisionConfig) jetstream.StreamConfig {
	cfg = cfg.WithDefaults()
	c := recordsStreamConfig(n.CancelsStream(), "foundryq cancel requests on record, one per run id", n.CancelRecordsWildcard(), cfg)
	c.MaxBytes, c.MaxMsgs = cfg.CancelsMaxBytes, cfg.CancelsMaxMsgs
	return c
}

// InputsStreamConfig: see RunsStreamConfig. Answers of runs that ask, one
// per item (the first stays: DiscardNewPerSubject), and the requests of
// runs that wait for them, kept as long as run states. Only workers write
// it.
func InputsStreamConfig(n Names, cfg ProvisionConfig) jetstream.StreamConfig {
	cfg = cfg.WithDefaults()
	c := recordsStreamConfig(n.InputsStream(), "foundryq answers to runs that ask, one per item, and the requests of waiting runs", n.InputRecordsWildcard(), cfg)
	c.MaxBytes, c.MaxMsgs = cfg.InputsMaxBytes, cfg.InputsMaxMsgs
	return c
}

// recordsStreamConfig is a stream of records kept as long as run states,
// one per subject: the first stays (DiscardNewPerSubject).
func recordsStreamConfig(name, description, subjects string, cfg ProvisionConfig) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:                 name,
		Description:          description,
		Subjects:             []string{subjects},
		Retention:            jetstream.LimitsPolicy,
		Storage:              jetstream.FileStorage,
		Replicas:             cfg.Replicas,
		MaxMsgsPerSubject:    1,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		MaxAge:               cfg.StateTTL,
		Duplicates:           min(DefaultEventsDuplicates, cfg.StateTTL),
		AllowDirect:          true,
	}
}

// ConsumerConfig: see RunsStreamConfig. No InactiveThreshold (a durable
// work consumer must never be removed), no BackOff (it would replace
// AckWait) and no MaxDeliver: a job is delivered until a worker ends it;
// the failure budget (ProvisionConfig.MaxDeliver) is kept by the workers
// in the run's state, so that hand-offs and lease renewals never use it up
// and the last attempt always ends the run with a terminal event.
func ConsumerConfig(n Names, cfg ProvisionConfig) jetstream.ConsumerConfig {
	cfg = cfg.WithDefaults()
	return jetstream.ConsumerConfig{
		Durable:       n.Consumer(),
		Description:   "foundryq workers",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: cfg.MaxAckPending,
		FilterSubject: n.RunsWildcard(),
		Replicas:      cfg.Replicas,
	}
}

// StateBucketConfig: see RunsStreamConfig.
func StateBucketConfig(n Names, cfg ProvisionConfig) jetstream.KeyValueConfig {
	cfg = cfg.WithDefaults()
	return jetstream.KeyValueConfig{
		Bucket:      n.Bucket(),
		Description: "foundryq run states",
		History:     1,
		TTL:         cfg.StateTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
	}
}

// The queue: run requests sorted into lanes, one per priority and
// fairness key. Producers publish on <prefix>.runs.<run_id> (the runs
// stream, the intake); a worker moves each request to its lane,
// <prefix>.queue.<priority>.<key>.<run_id> on the queue stream, and takes
// the runs it starts from the lanes: the highest priority first, the keys
// of one priority in weighted turns (docs/scheduling.md). Only workers
// read or write the queue.
const kindQueue = "queue"

// QueueStream is the work-queue stream of the lanes (FOUNDRYQ_QUEUE).
func (n Names) QueueStream() string { return n.upper() + "_QUEUE" }

// LaneSubject is where a run's request waits in its lane:
// <prefix>.queue.<priority>.<key>.<run_id>. LaneSubject("*", "*", id)
// matches run id's request in any lane.
func (n Names) LaneSubject(p Priority, key, runID string) string {
	return n.prefix() + "." + kindQueue + "." + string(p) + "." + key + "." + runID
}

// LaneFilter matches every request of one lane: <prefix>.queue.<priority>.<key>.*.
func (n Names) LaneFilter(f Fairness) string { return n.LaneSubject(f.Priority, f.Key, "*") }

// QueueWildcard matches every lane.
func (n Names) QueueWildcard() string { return n.prefix() + "." + kindQueue + ".>" }

// LaneConsumer is the durable consumer of one lane:
// <prefix>-lane-<priority>-<key>.
func (n Names) LaneConsumer(f Fairness) string {
	return n.lower() + "-lane-" + string(f.Priority) + "-" + f.Key
}

// LaneOfSubject returns the lane and run id of a subject in the queue.
func (n Names) LaneOfSubject(subject string) (Fairness, string, bool) {
	rest, ok := strings.CutPrefix(subject, n.prefix()+"."+kindQueue+".")
	if !ok {
		return Fairness{}, "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 || !Priority(parts[0]).Valid() || !ValidFairnessKey(parts[1]) || !ValidRunID(parts[2]) {
		return Fairness{}, "", false
	}
	return Fairness{Priority: Priority(parts[0]), Key: parts[1]}, parts[2], true
}

// LaneOfConsumer returns the lane a consumer name of LaneConsumer names.
func (n Names) LaneOfConsumer(name string) (Fairness, bool) {
	rest, ok := strings.CutPrefix(name, n.lower()+"-lane-")
	if !ok {
		return Fairness{}, false
	}
	prio, key, ok := strings.Cut(rest, "-")
	if !ok || !Priority(prio).Valid() || !ValidFairnessKey(key) {
		return Fairness{}, false
	}
	return Fairness{Priority: Priority(prio), Key: key}, true
}

// QueueStreamConfig: see RunsStreamConfig. Only workers write it, one
// message per run id and lane (a step of a run that asks is queued again
// once the previous one is acked), deduplicated on Nats-Msg-Id within
// Duplicates so that an intake message moved twice is stored once.
func QueueStreamConfig(n Names, cfg ProvisionConfig) jetstream.StreamConfig {
	cfg = cfg.WithDefaults()
	return jetstream.StreamConfig{
		Name:                 n.QueueStream(),
		Description:          "foundryq run requests in their lanes (work queue, by priority and fairness key)",
		Subjects:             []string{n.QueueWildcard()},
		Retention:            jetstream.WorkQueuePolicy,
		Storage:              jetstream.FileStorage,
		Replicas:             cfg.Replicas,
		MaxMsgsPerSubject:    1,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		Duplicates:           cfg.Duplicates,
		// No direct get: a run is looked up in the queue by a subject with
		// wildcards (QueuedRunSubjects), which a message get takes in its
		// body, and from the stream leader (as last written).
	}
}

// LaneConsumerConfig is the durable consumer of lane f: as ConsumerConfig
// (a job is the run's lease, redelivered without limit), filtered to the
// lane, removed by the server after LaneInactive without pulls once no
// job of it is in flight.
func LaneConsumerConfig(n Names, cfg ProvisionConfig, f Fairness) jetstream.ConsumerConfig {
	cfg = cfg.WithDefaults()
	return jetstream.ConsumerConfig{
		Durable:           n.LaneConsumer(f),
		Description:       "foundryq workers: lane " + string(f.Priority) + "/" + f.Key,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           cfg.AckWait,
		MaxDeliver:        -1,
		MaxAckPending:     cfg.MaxAckPending,
		FilterSubject:     n.LaneFilter(f),
		Replicas:          cfg.Replicas,
		InactiveThreshold: cfg.LaneInactive,
	}
}
