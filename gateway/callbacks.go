package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/foundryq/foundryq/events"
)

// CallbackConfig configures completion callbacks: POST /v1/runs accepts a
// callback_url, and when the run ends the gateway POSTs its terminal event
// there, signed (HeaderSignature), retried with backoff, at least once
// (across gateway restarts), and dead-lettered after the last attempt.
type CallbackConfig struct {
	// Secret is the gateway-wide key of the first signature version
	// (HeaderSignature, over timestamp and body only) on every tenant's
	// callbacks. Every tenant's receivers must know it, so any of them
	// could sign another's callbacks: give tenants keys of their own
	// (Tenant.CallbackSecretFiles, signature v2) and drop it once their
	// receivers check v2. At least 16 bytes. Callbacks are on for a tenant
	// when this or a key of its own is set.
	Secret []byte
	// AllowLoopback accepts callback URLs on loopback addresses
	// (127.0.0.0/8, ::1, localhost). For development only.
	AllowLoopback bool
	// AllowCIDRs are ranges callbacks may reach although they are refused
	// by default (private, shared, link-local, unique-local, IPv4 embedded
	// in IPv6, cloud-internal: see callbackaddr.go). Default none.
	AllowCIDRs []netip.Prefix
	// MaxAttempts is how many times a callback is tried before it goes to
	// the dead letters. Default 8.
	MaxAttempts int
	// Backoff is the delay after the first failed attempt; it doubles
	// after each further one (with ±20% jitter). Default 2s.
	Backoff time.Duration
	// MaxBackoff caps the delay between attempts. Default 5m.
	MaxBackoff time.Duration
	// Timeout bounds one attempt (connect, send, answer). Default 10s.
	Timeout time.Duration
	// Concurrency is the most callbacks one gateway sends at once per
	// tenant. Default 16.
	Concurrency int
	// TTL is how long a registration is kept. Default 7 days (the state
	// records' default TTL).
	TTL time.Duration
	// DeadMaxAge is how long dead letters are kept. Default 30 days.
	DeadMaxAge time.Duration
}

func (c CallbackConfig) withDefaults() CallbackConfig {
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 8
	}
	if c.Backoff == 0 {
		c.Backoff = 2 * time.Second
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 5 * time.Minute
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.Concurrency == 0 {
		c.Concurrency = 16
	}
	if c.TTL == 0 {
		c.TTL = events.DefaultStateTTL
	}
	if c.DeadMaxAge == 0 {
		c.DeadMaxAge = events.DefaultDeadMaxAge
	}
	return c
}

// validate checks the settings; on says whether any tenant has callbacks.
func (c CallbackConfig) validate(on bool) error {
	switch {
	case !on && len(c.Secret) == 0:
		return nil // off: the rest does not matter
	case len(c.Secret) > 0 && len(c.Secret) < 16:
		return fmt.Errorf("gateway: Callbacks.Secret must be at least 16 bytes, got %d", len(c.Secret))
	case c.MaxAttempts < 1 || c.MaxAttempts > 100:
		return fmt.Errorf("gateway: Callbacks.MaxAttempts %d must be between 1 and 100", c.MaxAttempts)
	case c.Backoff < time.Millisecond || c.MaxBackoff < c.Backoff:
		return fmt.Errorf("gateway: Callbacks.Backoff %s must be at least 1ms and at most MaxBackoff %s", c.Backoff, c.MaxBackoff)
	case c.Timeout < 10*time.Millisecond:
		return fmt.Errorf("gateway: Callbacks.Timeout %s must be at least 10ms", c.Timeout)
	case c.Concurrency < 1:
		return fmt.Errorf("gateway: Callbacks.Concurrency %d must be at least 1", c.Concurrency)
	case c.TTL < time.Minute:
		return fmt.Errorf("gateway: Callbacks.TTL %s must be at least 1m", c.TTL)
	case c.DeadMaxAge < time.Minute:
		return fmt.Errorf("gateway: Callbacks.DeadMaxAge %s must be at least 1m", c.DeadMaxAge)
	}
	for _, p := range c.AllowCIDRs {
		if !p.IsValid() {
			return errors.New("gateway: Callbacks.AllowCIDRs holds an invalid prefix")
		}
	}
	return nil
}

// CallbackNames are the JetStream resources the gateway owns for callbacks,
// per tenant (prefix "foundryq" shown):
//
//	KV bucket foundryq-callbacks, key <run_id>.<request digest>: registrations
//	stream FOUNDRYQ_CALLBACKS, subject foundryq.gateway.callbacks.<run_id>: deliveries due (work queue)
//	stream FOUNDRYQ_CALLBACKS_DEAD, subject foundryq.gateway.callbacks_dead.<run_id>: dead letters
//	consumer foundryq-gateway-follower on the state bucket's stream (KV_foundryq-runs): runs that ended
//	consumer foundryq-gateway-callbacks on FOUNDRYQ_CALLBACKS: the senders
type CallbackNames struct {
	Bucket, Stream, DeadStream, Follower, Sender string
	prefix, lower                                string
	stateBucket                                  string
}

// NewCallbackNames returns the callback resources' names under prefix.
func NewCallbackNames(prefix string) (CallbackNames, error) {
	n, err := events.NewNames(prefix)
	if err != nil {
		return CallbackNames{}, err
	}
	lower := strings.ReplaceAll(n.Prefix, ".", "_")
	upper := strings.ToUpper(lower)
	return CallbackNames{
		Bucket: lower + "-callbacks", Stream: upper + "_CALLBACKS", DeadStream: upper + "_CALLBACKS_DEAD",
		Follower: lower + "-gateway-follower", Sender: lower + "-gateway-callbacks",
		prefix: n.Prefix, lower: lower, stateBucket: n.Bucket(),
	}, nil
}

// Subject is the delivery subject of a run's callback.
func (n CallbackNames) Subject(runID string) string { return n.prefix + ".gateway.callbacks." + runID }

// DeadSubject is the dead-letter subject of a run's callback.
func (n CallbackNames) DeadSubject(runID string) string {
	return n.prefix + ".gateway.callbacks_dead." + runID
}

// Registration is a callback registration, stored in the callbacks bucket
// under "<run_id>.<digest>": the digest of the request it was registered
// with, so that a later run under the same id with another request never
// inherits it.
type Registration struct {
	RunID     string     `json:"run_id"`
	Digest    string     `json:"digest"`
	URL       string     `json:"url"`
	CreatedAt time.Time  `json:"created_at"`
	QueuedAt  *time.Time `json:"queued_at,omitempty"` // when the delivery was queued
}

// Delivery is a callback due, on the deliveries stream.
type Delivery struct {
	RunID string          `json:"run_id"`
	URL   string          `json:"url"`
	Seq   uint64          `json:"seq"`   // the terminal event's seq
	Event json.RawMessage `json:"event"` // the terminal event: the body POSTed
}

// Headers of a callback dead letter (its body is the Delivery).
const (
	HeaderDeadAttempts = "Foundryq-Callback-Attempts"
	HeaderDeadError    = "Foundryq-Callback-Error"
)

func regKey(runID, digest string) string { return runID + "." + digest }

// callbacks is one tenant's callback machinery.
type callbacks struct {
	cfg   CallbackConfig
	t     *tenant
	names CallbackNames
	log   zerolog.Logger
	http  *http.Client
	kv    jetstream.KeyValue // set by provision

	resolver resolver                                                          // names of callback hosts
	dialAddr func(ctx context.Context, network, addr string) (net.Conn, error) // connects to a checked address
}

func newCallbacks(cfg CallbackConfig, t *tenant, log zerolog.Logger) *callbacks {
	names, _ := NewCallbackNames(t.cfg.Prefix) // checked by Config.validate
	c := &callbacks{cfg: cfg, t: t, names: names, log: log, resolver: net.DefaultResolver}
	dialer := &net.Dialer{Timeout: cfg.Timeout, Control: c.dialControl}
	c.dialAddr = dialer.DialContext
	tr := &http.Transport{
		DialContext:           c.dial,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   cfg.Timeout,
		ResponseHeaderTimeout: cfg.Timeout,
	}
	c.http = &http.Client{
		Transport: tr,
		Timeout:   cfg.Timeout,
		// A redirect could point anywhere, loopback included: not followed,
		// it counts as a failed attempt.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c
}

// provision creates the gateway's bucket, streams and sender consumer
// (idempotent; every gateway does it at start).
func (c *callbacks) provision(ctx context.Context) error {
	js := c.t.js
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: c.names.Bucket, Description: "foundryq gateway: completion callback registrations",
		History: 1, TTL: c.cfg.TTL, Storage: jetstream.FileStorage,
	})
	if err != nil {
		return fmt.Errorf("gateway: tenant %s: create bucket %s: %w", c.t.cfg.Name, c.names.Bucket, err)
	}
	c.kv = kv
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: c.names.Stream, Description: "foundryq gateway: completion callbacks due",
		Subjects: []string{c.names.Subject("*")}, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute, MaxAge: c.cfg.TTL,
	}); err != nil {
		return fmt.Errorf("gateway: tenant %s: create stream %s: %w", c.t.cfg.Name, c.names.Stream, err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: c.names.DeadStream, Description: "foundryq gateway: callbacks that could not be delivered",
		Subjects: []string{c.names.DeadSubject("*")}, Retention: jetstream.LimitsPolicy,
		Storage: jetstream.FileStorage, MaxAge: c.cfg.DeadMaxAge, AllowDirect: true,
	}); err != nil {
		return fmt.Errorf("gateway: tenant %s: create stream %s: %w", c.t.cfg.Name, c.names.DeadStream, err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, c.names.Stream, jetstream.ConsumerConfig{
		Durable: c.names.Sender, Description: "foundryq gateway: callback senders",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2*c.cfg.Timeout + 20*time.Second,
		MaxDeliver: -1, MaxAckPending: 10000, FilterSubject: c.names.Subject("*"),
	}); err != nil {
		return fmt.Errorf("gateway: tenant %s: create consumer %s: %w", c.t.cfg.Name, c.names.Sender, err)
	}
	// Without the state bucket (no worker has provisioned it yet) no run
	// has ended: stage 1 creates its consumer once the bucket exists.
	if _, err := c.followerConsumer(ctx); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("gateway: tenant %s: create consumer %s: %w", c.t.cfg.Name, c.names.Follower, err)
	}
	return nil
}

// register stores a run's callback before the run is submitted, so that
// the notifier finds it whenever the run ends. The same run id, request
// and URL again (a retry) is fine; another URL for the same request is a
// conflict.
func (c *callbacks) register(ctx context.Context, runID, digest, rawURL string) error {
	reg := Registration{RunID: runID, Digest: digest, URL: rawURL, CreatedAt: time.Now().UTC()}
	data, err := json.Marshal(reg)
	if err != nil {
		return err
	}
	key := regKey(runID, digest)
	_, err = c.kv.Create(ctx, key, data)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return natsError(err, "register the callback of run "+runID)
	}
	e, err := c.kv.Get(ctx, key)
	if err != nil {
		return natsError(err, "read the callback of run "+runID)
	}
	var old Registration
	if json.Unmarshal(e.Value(), &old) == nil && old.URL == rawURL {
		return nil
	}
	ae := apiErr(http.StatusConflict, CodeCallbackConflict, "run %s was created with another callback_url", runID)
	ae.RunID = runID
	return ae
}

// enqueueFinished queues the callback of a run that has ended, if it has
// one (POST /v1/runs of a finished run with a callback registered now).
func (c *callbacks) enqueueFinished(ctx context.Context, runID string) error {
	st, _, err := c.t.client.State(ctx, runID)
	if err != nil {
		return err
	}
	return c.enqueue(ctx, st)
}

// enqueue queues the callback of a finished run, if one is registered for
// its request and not queued yet. Safe to repeat: the delivery's message id
// makes a second publish a duplicate, and the registration remembers it.
func (c *callbacks) enqueue(ctx context.Context, st events.RunState) error {
	if !st.Finished() || st.Digest == "" {
		return nil
	}
	key := regKey(st.RunID, st.Digest)
	e, err := c.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read callback registration %s: %w", key, err)
	}
	var reg Registration
	if err := json.Unmarshal(e.Value(), &reg); err != nil {
		c.log.Error().Err(err).Str("run_id", st.RunID).Msg("callback registration unreadable; no callback")
		return nil
	}
	if reg.QueuedAt != nil {
		return nil
	}
	end, err := c.terminalEvent(ctx, st)
	if err != nil {
		return err
	}
	event, err := json.Marshal(end)
	if err != nil {
		return err
	}
	d, err := json.Marshal(Delivery{RunID: st.RunID, URL: reg.URL, Seq: end.Seq, Event: event})
	if err != nil {
		return err
	}
	js := c.t.js
	if _, err := js.Publish(ctx, c.names.Subject(st.RunID), d,
		jetstream.WithMsgID(key), jetstream.WithExpectStream(c.names.Stream)); err != nil {
		return fmt.Errorf("queue the callback of run %s: %w", st.RunID, err)
	}
	now := time.Now().UTC()
	reg.QueuedAt = &now
	if data, err := json.Marshal(reg); err == nil {
		_, _ = c.kv.Update(ctx, key, data, e.Revision()) // lost race: another gateway queued it
	}
	return nil
}

// terminalEvent is the run's terminal event: the one the state record
// holds, or else the last event on the run's subject.
func (c *callbacks) terminalEvent(ctx context.Context, st events.RunState) (events.RunEvent, error) {
	if st.End != nil {
		return *st.End, nil
	}
	stream, err := c.t.js.Stream(ctx, c.t.names.EventsStream())
	if err != nil {
		return events.RunEvent{}, err
	}
	msg, err := stream.GetLastMsgForSubject(ctx, c.t.names.EventSubject(st.RunID))
	if err != nil {
		return events.RunEvent{}, fmt.Errorf("read the terminal event of run %s: %w", st.RunID, err)
	}
	ev, err := events.DecodeRunEvent(msg.Data)
	if err != nil {
		return events.RunEvent{}, err
	}
	if !ev.Type.Terminal() {
		return events.RunEvent{}, fmt.Errorf("run %s: last event %s is not terminal yet", st.RunID, ev.Type)
	}
	return ev, nil
}
