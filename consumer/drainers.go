package consumer

import (
	"sync"
	"sync/atomic"
	"time"
)

// drainers runs relays' drains on goroutines that outlive one drain: a
// relay with events to publish is handed to an idle goroutine of the pool,
// or to a new one when none is idle; a goroutine idle for drainerIdle
// exits. A drain's stack grows to about 16 KiB in nats.go's publish, and a
// goroutine started per drain, as a run's held delta is published every
// event interval, paid that growth (stack copies) every time: 8 % of a
// worker's CPU at 200 runs streaming. The pool holds as many goroutines as
// drains ran at once in the last drainerIdle, up to maxIdleDrainers.
type drainers struct {
	work chan *relay   // unbuffered: a send succeeds only if a goroutine waits
	quit chan struct{} // closed by close: idle goroutines exit
	once sync.Once     // closes quit

	started atomic.Int64 // goroutines started
	alive   atomic.Int64 // goroutines not yet exited
	waiting atomic.Int64 // goroutines waiting for a drain
}

// drainerIdle is how long a goroutine of the pool waits for the next drain;
// at most maxIdleDrainers wait at once, the others exit after their drain.
// Without that bound a burst (5,000 runs whose tokens come at the same
// moment) left a goroutine per drain of it waiting: 0.25 goroutines and 3
// KiB of stacks per streaming run in the bench's memory phase.
const (
	drainerIdle     = time.Second
	maxIdleDrainers = 64
)

func newDrainers() *drainers {
	return &drainers{work: make(chan *relay), quit: make(chan struct{})}
}

// start runs r.drain on a goroutine of the pool.
func (d *drainers) start(r *relay) {
	select {
	case d.work <- r:
	default:
		d.started.Add(1)
		d.alive.Add(1)
		go d.serve(r)
	}
}

// serve drains r, then the relays handed to it, until it has waited
// drainerIdle for one or the pool is closed.
func (d *drainers) serve(r *relay) {
	defer d.alive.Add(-1)
	idle := time.NewTimer(drainerIdle)
	defer idle.Stop()
	for r != nil {
		r.drain()
		if d.waiting.Add(1) > maxIdleDrainers {
			d.waiting.Add(-1)
			return
		}
		idle.Reset(drainerIdle)
		r = nil
		select {
		case r = <-d.work:
		case <-idle.C:
		case <-d.quit:
		}
		d.waiting.Add(-1)
	}
}

// close lets the idle goroutines go; a drain started later runs on a
// goroutine of its own that exits when it is done.
func (d *drainers) close() { d.once.Do(func() { close(d.quit) }) }
