package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
)

// A follower feeds one event stream without a JetStream consumer. An
// events.Watch is an ordered consumer, and consumers are what a thousand
// browser tabs cannot have: nats-server limits consumers per stream (1000
// by default), a closed ordered consumer lingers on the server for seconds,
// and every consumer with a subject filter costs the server a look-up per
// stored message (with a thousand clients on a busy events stream, the
// largest cost of the whole system). Instead a follower
//
//  1. subscribes (core NATS) to the run's live subject, where the events
//     stream republishes each event once it is stored (a publish the stream
//     refuses, such as that of a worker that lost the run, never reaches
//     it);
//  2. replays the stored events it has not written from the events stream
//     with direct gets (next message of the subject after a stream
//     sequence; a binary search finds where to start when resuming);
//  3. follows the subscription, dropping what it has written, and fills a
//     gap (a message core NATS dropped for a slow client, or one published
//     while the connection was reconnecting) from the stream: when a later
//     event shows it, or after SSEHeartbeat of silence.
//
// Events carry contiguous seqs, so order and completeness are checked on
// every event. Watcher heartbeats (cancel_on_disconnect) are published by
// the follower itself while the stream is open.
type follower struct {
	g          *Gateway
	t          *tenant
	id         string
	next       uint64           // seq of the next event to write
	end        *events.RunEvent // the terminal event from the state record, if the run has ended
	heartbeats bool

	subject  string // the run's event subject (stored events)
	stream   jetstream.Stream
	sub      *nats.Subscription
	live     chan *nats.Msg
	sw       *sseWriter
	lastBeat time.Time
}

// defaultLiveBuffer is how many events may wait between the NATS
// connection and the client; past it core NATS drops them and the follower
// fills the gap from the stream.
const defaultLiveBuffer = 1024

// start subscribes. Its errors come before any byte of the stream is
// written, so they are answered with an error object.
func (f *follower) start(ctx context.Context) error {
	f.subject = f.t.names.EventSubject(f.id)
	if f.g.liveBuffer >= 0 { // negative: tests of a stream whose every live event is lost
		f.live = make(chan *nats.Msg, f.g.liveBuffer)
		sub, err := f.t.nc.ChanSubscribe(f.t.names.LiveSubject(f.id), f.live)
		if err != nil {
			return natsError(err, "follow run "+f.id)
		}
		f.sub = sub
	}
	var err error
	if f.heartbeats {
		f.beat()
	}
	if f.stream, err = f.t.js.Stream(ctx, f.t.names.EventsStream()); err != nil {
		return natsError(err, "follow run "+f.id)
	}
	return nil
}

func (f *follower) close() {
	if f.sub != nil {
		_ = f.sub.Unsubscribe()
	}
}

// run writes the stream until the terminal event (nil), the end of ctx
// (ctx's error) or a failure.
func (f *follower) run(ctx context.Context) error {
	// Subscribed first, so whatever is stored after this replay arrives
	// live.
	stored, done, err := f.replay(ctx, 0)
	if done || err != nil {
		return err
	}
	if stored == 0 && f.end != nil && f.end.Seq >= f.next {
		// The run has ended and its events have expired: the state record
		// still has the end.
		return f.sw.event(*f.end)
	}
	silence := time.NewTicker(f.g.cfg.SSEHeartbeat)
	defer silence.Stop()
	var beats <-chan time.Time
	if f.heartbeats {
		bt := time.NewTicker(f.g.cfg.WatchHeartbeat)
		defer bt.Stop()
		beats = bt.C
	}
	wrote := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-beats:
			f.beat()
		case <-silence.C:
			if !wrote {
				// Nothing came for a while: look at the stream, in case the
				// last events were lost on the way (a slow client, a NATS
				// reconnect) and no later one will show the gap.
				if _, done, err := f.replay(ctx, 0); done || err != nil {
					return err
				}
				if err := f.sw.comment("keepalive"); err != nil {
					return err
				}
			}
			wrote = false
		case msg := <-f.live:
			ev, err := f.decode(msg.Data)
			if err != nil {
				if err := f.sw.comment(oneLine(err.Error())); err != nil {
					return err
				}
				continue
			}
			if ev.Seq < f.next {
				continue // written already
			}
			wrote = true
			if ev.Seq > f.next {
				// A gap: events core NATS did not deliver. They are stored
				// before they are delivered: read them from the stream.
				if _, done, err := f.replay(ctx, ev.Seq-1); done || err != nil {
					return err
				}
				if ev.Seq < f.next {
					continue
				}
			}
			if done, err := f.write(ev); done || err != nil {
				return err
			}
		}
	}
}

// eventHead is what a follower reads of an event: it forwards the rest as
// it is.
type eventHead struct {
	RunID string           `json:"run_id"`
	Seq   uint64           `json:"seq"`
	Type  events.EventType `json:"type"`
	data  []byte
}

// decode checks an event as events.DecodeRunEvent does (run_id, seq and
// type required) and that it belongs to the run.
func (f *follower) decode(data []byte) (eventHead, error) {
	var ev eventHead
	if err := json.Unmarshal(data, &ev); err != nil {
		return ev, fmt.Errorf("%w: %v", events.ErrBadEvent, err)
	}
	if ev.RunID == "" || ev.Seq == 0 || ev.Type == "" {
		return ev, fmt.Errorf("%w: run_id, seq and type are required", events.ErrBadEvent)
	}
	if ev.RunID != f.id {
		return ev, fmt.Errorf("%w: run_id %q on the subject of run %s", events.ErrBadEvent, ev.RunID, f.id)
	}
	ev.data = data
	return ev, nil
}

// replay writes the stored events from seq f.next on, up to seq upTo (0:
// all that are stored). stored is the seq of the last stored event seen
// (0: none); done is true when the terminal event was written.
func (f *follower) replay(ctx context.Context, upTo uint64) (stored uint64, done bool, err error) {
	last, err := f.stream.GetLastMsgForSubject(ctx, f.subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	lastEv, err := f.decode(last.Data)
	if err != nil {
		return 0, false, err
	}
	if upTo == 0 || upTo > lastEv.Seq {
		upTo = lastEv.Seq
	}
	if f.next > upTo {
		return lastEv.Seq, false, nil
	}
	seq, err := f.seek(ctx, last.Sequence)
	if err != nil {
		return lastEv.Seq, false, err
	}
	for f.next <= upTo {
		msg, err := f.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(f.subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return lastEv.Seq, false, err
		}
		seq = msg.Sequence + 1
		ev, err := f.decode(msg.Data)
		if err != nil {
			if err := f.sw.comment(oneLine(err.Error())); err != nil {
				return lastEv.Seq, false, err
			}
			continue
		}
		if ev.Seq < f.next {
			continue
		}
		if ev.Seq > f.next {
			// Expired or lost: say so, and go on from what there is.
			if err := f.sw.comment(fmt.Sprintf("gap: events %d to %d are not stored", f.next, ev.Seq-1)); err != nil {
				return lastEv.Seq, false, err
			}
		}
		if done, err := f.write(ev); done || err != nil {
			return lastEv.Seq, done, err
		}
		if f.heartbeats && time.Since(f.lastBeat) >= f.g.cfg.WatchHeartbeat {
			f.beat()
		}
	}
	return lastEv.Seq, false, nil
}

// seek returns the stream sequence to replay from: the smallest one whose
// next message on the run's subject has an event seq of f.next or more,
// found by binary search (event seqs grow with stream sequences) up to hi,
// the stream sequence of the run's last stored event.
func (f *follower) seek(ctx context.Context, hi uint64) (uint64, error) {
	lo := uint64(1)
	if f.next <= 1 {
		return lo, nil
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		msg, err := f.stream.GetMsg(ctx, mid, jetstream.WithGetMsgSubject(f.subject))
		if err != nil {
			return 0, err
		}
		ev, err := f.decode(msg.Data)
		if err != nil {
			return lo, nil // scan from lo; the scan reports what it cannot read
		}
		if ev.Seq >= f.next {
			hi = mid
		} else {
			lo = msg.Sequence + 1
		}
	}
	return lo, nil
}

// write writes ev; done after the terminal event.
func (f *follower) write(ev eventHead) (done bool, err error) {
	if err := f.sw.raw(ev.Seq, ev.Type, ev.data); err != nil {
		return false, err
	}
	f.next = ev.Seq + 1
	return ev.Type.Terminal(), nil
}

// beat publishes a watcher heartbeat (best effort, as events.Watch does).
func (f *follower) beat() {
	_ = f.t.nc.Publish(f.t.names.WatchSubject(f.id), nil)
	f.lastBeat = time.Now()
}
