package bench

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
)

// rawPublish is the raw JetStream baseline: the bench publishes events of
// the size foundryq stored, asynchronously, to a stream configured as the
// events stream (another name and subjects), over as many subjects as the
// throughput phase had runs.
func (b *bench) rawPublish(ctx context.Context) error {
	c := b.cfg
	rr := &b.rep.RawPublish
	rr.Target = TargetRawRatio
	size, hdr := b.sys.watch.deltaShape()
	if size == 0 {
		return fmt.Errorf("no text.delta event seen to size the messages")
	}
	rr.Messages, rr.MessageBytes = c.RawMessages, size
	scfg := events.EventsStreamConfig(b.sys.names, events.ProvisionConfig{})
	scfg.Name, scfg.Subjects = "BENCH_RAW", []string{"bench.raw.*"}
	scfg.RePublish = &jetstream.RePublish{Source: "bench.raw.*", Destination: "bench.rawlive.{{wildcard(1)}}"}
	b.progress("raw publish: %d async publishes of %d bytes to a stream configured as %s", c.RawMessages, size, b.sys.names.EventsStream())
	st, err := b.sys.js.CreateStream(ctx, scfg)
	if err != nil {
		return fmt.Errorf("create the raw stream: %w", err)
	}
	defer func() { _ = b.sys.js.DeleteStream(context.WithoutCancel(ctx), scfg.Name) }()
	_ = st
	// A connection of its own, so that its pending acks do not slow the
	// watcher's.
	nc, err := nats.Connect(b.sys.natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return err
	}
	data := bytes.Repeat([]byte("x"), size)
	subjects := make([]string, c.ThroughputRuns)
	for i := range subjects {
		subjects[i] = fmt.Sprintf("bench.raw.r%d", i)
	}
	meter, err := b.meterCPU()
	if err != nil {
		return err
	}
	start := time.Now()
	for i := range c.RawMessages {
		msg := &nats.Msg{Subject: subjects[i%len(subjects)], Data: data, Header: hdr}
		if _, err := js.PublishMsgAsync(msg, jetstream.WithStallWait(time.Minute)); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("raw publishes not acknowledged after 5m")
	}
	secs := time.Since(start).Seconds()
	if rr.RawCores, err = meter.cores(); err != nil {
		return err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs != uint64(c.RawMessages) {
		return fmt.Errorf("raw stream holds %d messages, want %d", info.State.Msgs, c.RawMessages)
	}
	rr.RawPerSec = float64(c.RawMessages) / secs
	if rr.RawPerSec > 0 {
		rr.Ratio = rr.FoundryqPerSec / rr.RawPerSec
	}
	rr.Met = rr.Ratio >= TargetRawRatio
	b.progress("raw publish: %.0f msgs/s (CPU cores used: %v); foundryq %.0f events/s (ratio %.2f)", rr.RawPerSec, rr.RawCores, rr.FoundryqPerSec, rr.Ratio)
	return nil
}
