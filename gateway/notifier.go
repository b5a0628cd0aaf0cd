package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/foundryq/foundryq/events"
)

// The notifier has two stages, both durable JetStream consumers shared by
// every gateway of the tenant (each message goes to one gateway):
//
//  1. the follower reads every write to the workers' state bucket (a few
//     per run, never the token stream); for a run that has ended and has
//     a registration it queues a Delivery on the gateway's own stream and
//     acks. A state record is written before the run's terminal event is
//     published, and carries that event.
//  2. the senders POST each Delivery, ack on a 2xx, otherwise redeliver it
//     after a backoff (NakWithDelay), and after MaxAttempts move it to the
//     dead letters.
//
// A gateway that stops mid-way leaves the message unacked: another gateway,
// or this one after a restart, takes it up. Deliveries are at least once.

// setupRetry is how often a consumer whose stream is missing (workers not
// provisioned yet) is looked for again.
const setupRetry = time.Second

// run runs the follower and the senders until ctx ends.
func (c *callbacks) run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return c.follow(gctx) })
	g.Go(func() error { return c.send(gctx) })
	err := g.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// consume iterates over a consumer's messages until ctx ends, handing each
// to handle (which runs in the calling goroutine, or in a bounded group
// when limit > 1). The consumer is looked up again if it fails.
func (c *callbacks) consume(ctx context.Context, what string, open func(context.Context) (jetstream.Consumer, error), limit int, handle func(context.Context, jetstream.Msg)) error {
	warned := false
	for ctx.Err() == nil {
		cons, err := open(ctx)
		if err != nil {
			if !warned {
				c.log.Warn().Err(err).Str("consumer", what).Msg("callback notifier waiting for its stream")
				warned = true
			}
			select {
			case <-ctx.Done():
			case <-time.After(setupRetry):
			}
			continue
		}
		warned = false
		c.iterate(ctx, cons, limit, handle)
	}
	return nil
}

func (c *callbacks) iterate(ctx context.Context, cons jetstream.Consumer, limit int, handle func(context.Context, jetstream.Msg)) {
	it, err := cons.Messages(jetstream.PullMaxMessages(limit))
	if err != nil {
		c.log.Warn().Err(err).Msg("callback notifier: start consumer")
		select {
		case <-ctx.Done():
		case <-time.After(setupRetry):
		}
		return
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	var g errgroup.Group
	g.SetLimit(limit)
	defer func() { _ = g.Wait() }()
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				c.log.Warn().Err(err).Msg("callback notifier: consumer interrupted; restarting it")
			}
			return
		}
		g.Go(func() error { handle(ctx, msg); return nil })
	}
}

// follow is stage 1.
func (c *callbacks) follow(ctx context.Context) error {
	return c.consume(ctx, c.names.Follower, c.followerConsumer, 1, c.followOne)
}

// followerConsumer creates (or finds) stage 1's consumer on the state
// bucket's stream. It delivers only the writes made after it was first
// created, so provision creates it before the gateway accepts runs.
func (c *callbacks) followerConsumer(ctx context.Context) (jetstream.Consumer, error) {
	return c.t.js.CreateOrUpdateConsumer(ctx, "KV_"+c.names.stateBucket, jetstream.ConsumerConfig{
		Durable: c.names.Follower, Description: "foundryq gateway: runs that ended, for callbacks",
		DeliverPolicy: jetstream.DeliverNewPolicy, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 30 * time.Second, MaxDeliver: -1, MaxAckPending: 1000,
		FilterSubject: "$KV." + c.names.stateBucket + ".>",
	})
}

func (c *callbacks) followOne(ctx context.Context, msg jetstream.Msg) {
	if op := msg.Headers().Get("KV-Operation"); op != "" { // DEL or PURGE
		_ = msg.Ack()
		return
	}
	var st events.RunState
	if json.Unmarshal(msg.Data(), &st) != nil || !st.Finished() {
		_ = msg.Ack()
		return
	}
	if err := c.enqueue(ctx, st); err != nil {
		if ctx.Err() == nil {
			c.log.Warn().Err(err).Str("run_id", st.RunID).Msg("callback: could not queue; retrying")
		}
		_ = msg.NakWithDelay(setupRetry)
		return
	}
	_ = msg.Ack()
}

// send is stage 2.
func (c *callbacks) send(ctx context.Context) error {
	js := c.t.js
	open := func(ctx context.Context) (jetstream.Consumer, error) {
		return js.Consumer(ctx, c.names.Stream, c.names.Sender)
	}
	return c.consume(ctx, c.names.Sender, open, c.cfg.Concurrency, c.sendOne)
}

func (c *callbacks) sendOne(ctx context.Context, msg jetstream.Msg) {
	var d Delivery
	if err := json.Unmarshal(msg.Data(), &d); err != nil {
		c.log.Error().Err(err).Str("subject", msg.Subject()).Msg("callback: undecodable delivery dropped")
		_ = msg.Term()
		return
	}
	attempt := 1
	if md, err := msg.Metadata(); err == nil {
		attempt = int(md.NumDelivered)
	}
	log := c.log.With().Str("run_id", d.RunID).Int("attempt", attempt).Logger()
	err := c.post(ctx, d, attempt)
	switch {
	case err == nil:
		log.Debug().Msg("callback delivered")
		_ = msg.Ack()
	case ctx.Err() != nil:
		_ = msg.Nak() // shutting down: another gateway takes it now
	case attempt >= c.cfg.MaxAttempts:
		log.Warn().Err(err).Msg("callback failed for the last time; dead-lettered")
		if derr := c.deadLetter(ctx, msg.Data(), d.RunID, attempt, err); derr != nil {
			log.Error().Err(derr).Msg("callback: dead letter not stored; retrying")
			_ = msg.NakWithDelay(c.backoff(attempt))
			return
		}
		_ = msg.Ack()
	default:
		delay := c.backoff(attempt)
		log.Info().Err(err).Dur("retry_in", delay).Msg("callback failed; will retry")
		_ = msg.NakWithDelay(delay)
	}
}

// post sends one attempt: the terminal event JSON, signed with the
// tenant's keys (v2, one signature per key) and, while it is set, the
// gateway-wide secret (the first version).
func (c *callbacks) post(ctx context.Context, d Delivery, attempt int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(d.Event))
	if err != nil {
		return err
	}
	c.sign(req.Header, d, attempt, time.Now())
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("callback answered HTTP %d", resp.StatusCode)
	}
	return nil
}

// sign sets the headers of one attempt of d.
func (c *callbacks) sign(h http.Header, d Delivery, attempt int, now time.Time) {
	var typ struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(d.Event, &typ)
	ts := strconv.FormatInt(now.Unix(), 10)
	m := SignedCallback{
		Tenant: c.t.cfg.Name, DeliveryID: d.RunID + ":" + strconv.FormatUint(d.Seq, 10), EventType: oneLine(typ.Type),
		Attempt: attempt, URL: d.URL, Timestamp: ts, Body: d.Event,
	}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "foundryq-gateway")
	h.Set(HeaderTimestamp, ts)
	if len(c.cfg.Secret) > 0 {
		h.Set(HeaderSignature, Sign(c.cfg.Secret, ts, d.Event))
	}
	if len(c.t.cbKeys) > 0 {
		sigs := make([]string, len(c.t.cbKeys))
		for i, k := range c.t.cbKeys {
			sigs[i] = SignV2(k, m)
		}
		h.Set(HeaderSignatureV2, strings.Join(sigs, ","))
	}
	h.Set(HeaderTenant, m.Tenant)
	h.Set(HeaderDeliveryID, m.DeliveryID)
	h.Set(HeaderAttempt, strconv.Itoa(attempt))
	h.Set(HeaderEventType, m.EventType)
}

func (c *callbacks) deadLetter(ctx context.Context, data []byte, runID string, attempts int, cause error) error {
	msg := nats.NewMsg(c.names.DeadSubject(runID))
	msg.Data = data
	msg.Header.Set(HeaderDeadAttempts, strconv.Itoa(attempts))
	msg.Header.Set(HeaderDeadError, oneLine(cause.Error()))
	_, err := c.t.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(c.names.DeadStream))
	return err
}

// backoff is the delay after the given failed attempt: Backoff doubled per
// further attempt, capped at MaxBackoff, ±20% jitter.
func (c *callbacks) backoff(attempt int) time.Duration {
	d := c.cfg.Backoff
	for i := 1; i < attempt && d < c.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.cfg.MaxBackoff)
	jitter := time.Duration(float64(d) * 0.2 * (2*rand.Float64() - 1))
	return max(d+jitter, time.Millisecond)
}
