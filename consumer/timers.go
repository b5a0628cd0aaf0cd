package consumer

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foundryq/foundryq/events"
)

// runTimeout is the deadline of req's run after its first start: its
// timeout_seconds, else the worker's default; 0 if none.
func (w *Worker) runTimeout(req events.RunRequest) time.Duration {
	if req.TimeoutSeconds > 0 {
		return time.Duration(req.TimeoutSeconds) * time.Second
	}
	return max(w.cfg.DefaultTimeout, 0)
}

// runTimers are the deadline and the watcher-heartbeat check of a run.
type runTimers struct {
	deadline *time.Timer
	beat     *time.Timer
	sub      *nats.Subscription
}

func (t runTimers) stop() {
	if t.deadline != nil {
		t.deadline.Stop()
	}
	if t.sub != nil {
		_ = t.sub.Unsubscribe()
	}
	if t.beat != nil {
		t.beat.Stop()
	}
}

// armTimers starts the run deadline (the one its record names, counted
// from the run's first start, so that a new owner does not extend it) and, with cancel_on_disconnect_seconds,
// the watcher-heartbeat check: no heartbeat for that long ends the run as
// abandoned. The heartbeat clock pauses while this worker is disconnected
// from NATS (it could not hear heartbeats then) and starts afresh when it
// reconnects.
func (r *run) armTimers() runTimers {
	req := &r.req
	var t runTimers
	if d := r.lastState().Deadline; d != nil {
		t.deadline = time.AfterFunc(time.Until(*d), func() { r.stop(ErrRunTimeout) })
	} else if timeout := r.w.runTimeout(*req); timeout > 0 {
		t.deadline = time.AfterFunc(timeout, func() { r.stop(ErrRunTimeout) })
	}
	if req.CancelOnDisconnectSeconds > 0 {
		d := time.Duration(req.CancelOnDisconnectSeconds) * time.Second
		var lastBeat atomic.Int64
		lastBeat.Store(time.Now().UnixNano())
		var beat *time.Timer
		var mu sync.Mutex // beat is assigned after AfterFunc returns
		mu.Lock()
		beat = time.AfterFunc(d, func() {
			if r.ctx.Err() != nil {
				return
			}
			wait := r.w.conn.silentFor(time.Unix(0, lastBeat.Load()), d)
			if wait <= 0 {
				r.logger().Info().Dur("after", d).Msg("no watcher heartbeat; the run is abandoned")
				r.stop(ErrAbandoned)
				return
			}
			mu.Lock()
			beat.Reset(wait)
			mu.Unlock()
		})
		mu.Unlock()
		t.beat = beat
		sub, err := r.w.nc.Subscribe(r.w.names.WatchSubject(r.id), func(*nats.Msg) {
			lastBeat.Store(time.Now().UnixNano())
		})
		if err != nil {
			r.logger().Warn().Err(err).Msg("subscribe to watcher heartbeats")
		}
		t.sub = sub
	}
	return t
}

// connWatch follows the worker's NATS connection, for the heartbeat check.
type connWatch struct {
	mu        sync.Mutex
	connected bool
	upSince   time.Time // when the connection last came up
}

// watchConn follows nc's status until stop is closed; onReconnect is called
// (on the watch's goroutine: it must not block) each time the connection
// comes back up.
func watchConn(nc *nats.Conn, stop <-chan struct{}, onReconnect func()) *connWatch {
	c := &connWatch{connected: nc.IsConnected(), upSince: time.Now()}
	ch := nc.StatusChanged(nats.CONNECTED, nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	go func() {
		defer nc.RemoveStatusListener(ch)
		for {
			select {
			case <-stop:
				return
			case st := <-ch:
				c.mu.Lock()
				up := st == nats.CONNECTED
				back := up && !c.connected
				if back {
					c.upSince = time.Now()
				}
				c.connected = up
				c.mu.Unlock()
				if back && onReconnect != nil {
					onReconnect()
				}
			}
		}
	}()
	return c
}

// silentFor returns how much longer a run whose last watcher heartbeat came
// at lastBeat may go without one before it is abandoned, given the limit d:
// while disconnected the clock does not run (d again), and after a
// reconnect it counts from the reconnect.
func (c *connWatch) silentFor(lastBeat time.Time, d time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.connected {
		return d
	}
	ref := lastBeat
	if c.upSince.After(ref) {
		ref = c.upSince
	}
	return d - time.Since(ref)
}
