package consumer

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/testkit"
)

// BenchmarkRelayMerge is the delta merge: a token added to the queued
// text.delta of a run whose publish is in flight. Every 32 tokens the queue
// is taken, as a publish would.
func BenchmarkRelayMerge(b *testing.B) {
	r := &relay{metrics: newMetrics(nil, nil), done: make(chan struct{}), maxText: eventTextLimit(1 << 20)}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r.add(events.RunEvent{Type: events.TypeTextDelta, Text: " token"}, int64(i))
		if i++; i%32 == 0 {
			// Published: drain hands the text buffer back for the next delta.
			r.spare = r.pending[0].text[:0]
			r.pending = r.pending[:0]
		}
	}
}

// BenchmarkRelayPublish is the publish fence: one text.delta stored on a
// run's subject with the expected last subject sequence and a message id,
// waiting for the ack, on an embedded NATS server with file storage (as
// in production, without the network).
func BenchmarkRelayPublish(b *testing.B) {
	r := relayWorker(b).newRelay("bench", position{}, 0, zerolog.Nop())
	ctx := context.Background()
	var seq, streamSeq uint64
	var err error
	b.ReportAllocs()
	for b.Loop() {
		seq++
		pe := pendingEvent{ev: events.RunEvent{RunID: "bench", Seq: seq, Type: events.TypeTextDelta, Text: fmt.Sprintf(" token %d", seq)}, upstreamSeq: int64(seq)}
		if streamSeq, err = r.publish(ctx, pe, streamSeq); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRelayDrain is the publish path as a streaming run takes it: 100
// relays, each given one text.delta at a time and flushed, so that each
// event is published by the relay's drain, as a held delta is once its
// interval has passed. An op is one event stored; the embedded server runs
// in the process, so its CPU counts too.
func BenchmarkRelayDrain(b *testing.B) {
	w := relayWorker(b)
	const runs = 100
	relays := make([]*relay, runs)
	for i := range relays {
		relays[i] = w.newRelay(fmt.Sprintf("bench-%d", i), position{UpstreamSeq: -1}, 0, zerolog.Nop())
		relays[i].start(b.Context(), func(err error) { b.Error(err) })
	}
	ctx := b.Context()
	b.ReportAllocs()
	b.ResetTimer()
	b.SetParallelism(runs / runtime.GOMAXPROCS(0))
	next := atomic.Int64{}
	cpu := testkit.CPUTime()
	b.RunParallel(func(pb *testing.PB) {
		r := relays[int(next.Add(1)-1)%runs]
		up := int64(0)
		for pb.Next() {
			up++
			r.add(events.RunEvent{Type: events.TypeTextDelta, Text: " token"}, up)
			if err := r.flush(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(testkit.CPUTime()-cpu)/float64(b.N), "cpu-ns/op")
}
