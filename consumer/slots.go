package consumer

import "sync/atomic"

// slots counts the runs a worker may still take. A poll takes every free
// slot at once and a run gives its slot back as it ends, each in constant
// time however many slots the worker has: a worker set up for many runs
// idles as cheaply as a small one.
type slots struct {
	free  atomic.Int64
	freed chan struct{} // a slot came back since the last wait (one signal held)
}

func newSlots(n int) *slots {
	s := &slots{freed: make(chan struct{}, 1)}
	s.free.Store(int64(n))
	return s
}

// takeAll takes every free slot and returns how many: 0 when none is.
func (s *slots) takeAll() int { return int(s.free.Swap(0)) }

// give gives back n slots and wakes a waiting poll.
func (s *slots) give(n int) {
	if n <= 0 {
		return
	}
	s.free.Add(int64(n))
	select {
	case s.freed <- struct{}{}:
	default:
	}
}
