package consumer

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
)

// scheduler picks the lanes a worker takes runs from (lanes.go). Its
// state is the worker's own: the lanes' consumers it knows and the
// round-robin credit of each lane. Workers do not coordinate: each one
// follows the same rule on what the server says waits, so the fleet does.
type scheduler struct {
	w    *Worker
	wake chan struct{} // a run was moved to a lane by this worker

	mu        sync.Mutex
	consumers map[string]jetstream.Consumer // lane consumers by name
	ensured   map[string]time.Time          // when ensureLane last created each
	credit    map[string]int                // smooth weighted round robin, by lane
	probed    map[string]time.Time          // when probe last looked at each lane
	probeTurn int                           // which due lane probe starts with
	lastScan  time.Time
	list      *listing // the lanes' listing in flight, if any
	listGen   int      // listings started so far
	// Between listings, for takeKnown: the lanes the last listing found
	// runs waiting in (and those of a higher priority higherLanes found
	// since), and those this worker moved runs to since the last listing
	// began (with the listing generation of the move).
	lastWaiting []waitingLane
	moved       map[string]movedTo
	// higherSeq is the stream sequence of the newest run in a lane of a
	// higher priority that higherLanes has added to lastWaiting since the
	// last listing; 0: none.
	higherSeq uint64

	// listConsumers lists the queue stream's consumers (a test holds it).
	listConsumers func(context.Context) jetstream.ConsumerInfoLister
	// listSubjects counts the runs of each queue subject filter matches
	// (a test counts its calls).
	listSubjects func(ctx context.Context, filter string) (map[string]uint64, error)
}

// laneEnsureEvery is how long a lane consumer this worker created or
// found is taken to exist before ensureLane creates it again (the server
// removes one only after LaneInactive, at least a minute, without pulls).
const laneEnsureEvery = 30 * time.Second

// laneScanEvery bounds how often a worker lists the queue's subjects to
// find runs in lanes without a consumer.
const laneScanEvery = 2 * time.Second

func newScheduler(w *Worker) *scheduler {
	return &scheduler{
		w:             w,
		wake:          make(chan struct{}, 1),
		consumers:     make(map[string]jetstream.Consumer),
		ensured:       make(map[string]time.Time),
		credit:        make(map[string]int),
		probed:        make(map[string]time.Time),
		moved:         make(map[string]movedTo),
		listConsumers: func(ctx context.Context) jetstream.ConsumerInfoLister { return w.res.Queue.ListConsumers(ctx) },
		listSubjects: func(ctx context.Context, filter string) (map[string]uint64, error) {
			info, err := w.res.Queue.Info(ctx, jetstream.WithSubjectFilter(filter))
			if err != nil {
				return nil, err
			}
			return info.State.Subjects, nil
		},
	}
}

// poke wakes an idle pull loop.
func (s *scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *scheduler) needsEnsure(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Since(s.ensured[name]) > laneEnsureEvery
}

func (s *scheduler) known(name string, c jetstream.Consumer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ensured[name] = time.Now()
	s.consumers[name] = c
}

func (s *scheduler) forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.consumers, name)
	delete(s.ensured, name)
}

// waitingLane is a lane with runs waiting, as its consumer's info says.
type waitingLane struct {
	lane      events.Fairness
	name      string
	waiting   int
	delivered uint64 // stream sequence of the lane's last delivery
	rank      int    // effective priority: 0 high, 1 normal, 2 low
}

// laneProbeEvery is how often a worker looks for jobs to deliver again
// in a lane that has none waiting but some in flight (below).
const laneProbeEvery = 250 * time.Millisecond

// lanes lists the lanes with runs waiting (one API call, paged by the
// server), and the lanes with none waiting but jobs in flight: a consumer's
// info does not count the jobs due to be delivered again (a crashed
// owner's whose ack wait passed, a hand-off, a retry after a delay) as
// waiting, so those lanes are probed (probe). It scans for lanes that hold runs but have no consumer when
// the queue holds more than its consumers account for.
func (s *scheduler) lanes(ctx context.Context) (waiting []waitingLane, inFlight []string, err error) {
	w := s.w
	var out []waitingLane
	var covered uint64
	list := s.listConsumers(ctx)
	seen := make(map[string]bool)
	for info := range list.Info() {
		f, ok := w.names.LaneOfConsumer(info.Name)
		if !ok {
			continue
		}
		seen[info.Name] = true
		covered += info.NumPending + uint64(info.NumAckPending)
		switch {
		case info.NumPending > 0:
			out = append(out, waitingLane{lane: f, name: info.Name, waiting: int(info.NumPending),
				delivered: info.Delivered.Stream, rank: f.Priority.Rank()})
		case info.NumAckPending > 0:
			inFlight = append(inFlight, info.Name)
		}
	}
	if err := list.Err(); err != nil {
		return nil, nil, err
	}
	s.scan(ctx, seen, covered)
	return out, inFlight, nil
}

// probe takes up to n jobs due to be delivered again from lanes with
// none waiting (so that what it takes is never a new run, which the
// priorities order), each lane at most every laneProbeEvery. These runs
// started before: re-attaching them comes before starting new ones. The
// slots are shared between the lanes by their keys' weights, the first
// lane changing each time, then what a lane leaves goes to the others:
// runs handed back to wait for a limit (a cap, a token budget) are all
// due again at once, and one key's many must not take every slot the
// budget has room for, round after round.
func (s *scheduler) probe(ctx context.Context, lanes []string, n int) int {
	now := time.Now()
	var due []string
	total := 0
	s.mu.Lock()
	for _, name := range lanes {
		if now.Sub(s.probed[name]) >= laneProbeEvery {
			s.probed[name] = now
			due = append(due, name)
			total += s.laneWeight(name)
		}
	}
	for name, t := range s.probed {
		if now.Sub(t) > time.Minute {
			delete(s.probed, name)
		}
	}
	if len(due) > 1 {
		k := s.probeTurn % len(due)
		due = append(due[k:], due[:k]...)
		s.probeTurn++
	}
	s.mu.Unlock()
	started := 0
	for _, name := range due {
		if started == n {
			break
		}
		share := (n*s.laneWeight(name) + total - 1) / total
		started += s.take(ctx, name, min(share, n-started))
	}
	for _, name := range due {
		if started == n {
			break
		}
		started += s.take(ctx, name, n-started)
	}
	return started
}

// laneWeight is the weight of lane name's fairness key.
func (s *scheduler) laneWeight(name string) int {
	f, _ := s.w.names.LaneOfConsumer(name)
	return s.w.cfg.keyWeight(f.Key)
}

// scan creates the consumers of lanes that hold runs but have none (the
// server removed an idle one, or the worker that moved the run there
// could not create it), at most every laneScanEvery.
func (s *scheduler) scan(ctx context.Context, seen map[string]bool, covered uint64) {
	s.mu.Lock()
	due := time.Since(s.lastScan) > laneScanEvery
	if due {
		s.lastScan = time.Now()
	}
	s.mu.Unlock()
	if !due {
		return
	}
	w := s.w
	info, err := w.res.Queue.Info(ctx)
	if err != nil || info.State.Msgs <= covered {
		return
	}
	info, err = w.res.Queue.Info(ctx, jetstream.WithSubjectFilter(w.names.QueueWildcard()))
	if err != nil {
		w.log.Warn().Err(err).Msg("list the lanes' subjects")
		return
	}
	lanes := make(map[events.Fairness]bool)
	for subj := range info.State.Subjects {
		if f, _, ok := w.names.LaneOfSubject(subj); ok && !seen[w.names.LaneConsumer(f)] {
			lanes[f] = true
		}
	}
	for f := range lanes {
		s.forget(w.names.LaneConsumer(f))
		w.ensureLane(f)
	}
	if len(lanes) > 0 {
		w.log.Info().Int("lanes", len(lanes)).Msg("created the consumers of lanes that held runs without one")
		s.poke()
	}
}

// consumer returns lane name's consumer.
func (s *scheduler) consumer(ctx context.Context, name string) (jetstream.Consumer, error) {
	s.mu.Lock()
	c := s.consumers[name]
	s.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err := s.w.res.Queue.Consumer(ctx, name)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.consumers[name] = c
	s.mu.Unlock()
	return c, nil
}

// age raises the rank of lanes whose oldest waiting run is older than
// PriorityAge: one level per PriorityAge waited. Only lanes below the best
// base rank are read (one direct get each).
func (s *scheduler) age(ctx context.Context, lanes []waitingLane, now time.Time) {
	bound := s.w.cfg.PriorityAge
	if bound <= 0 || len(lanes) < 2 {
		return
	}
	best := lanes[0].rank
	for _, l := range lanes {
		best = min(best, l.rank)
	}
	for i := range lanes {
		l := &lanes[i]
		if l.rank == best {
			continue
		}
		head, err := s.w.res.Queue.GetMsg(ctx, l.delivered+1, jetstream.WithGetMsgSubject(s.w.names.LaneFilter(l.lane)))
		if err != nil {
			continue
		}
		waited := now.Sub(submittedAt(head.Header, head.Time))
		l.rank = max(0, l.rank-int(waited/bound))
	}
}

// plan shares n slots among the lanes: each slot goes to the lane of the
// best rank with runs left, among equals in smooth weighted round robin
// (the credit persists from round to round, so that turns stay fair
// across rounds of one slot).
func (s *scheduler) plan(lanes []waitingLane, n int) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	take := make(map[string]int)
	for range n {
		best := -1
		for _, l := range lanes {
			if l.waiting > 0 && (best < 0 || l.rank < best) {
				best = l.rank
			}
		}
		if best < 0 {
			break
		}
		total, pick := 0, -1
		for i := range lanes {
			l := &lanes[i]
			if l.waiting == 0 || l.rank != best {
				continue
			}
			wt := s.w.cfg.keyWeight(l.lane.Key)
			total += wt
			s.credit[l.name] += wt
			if pick < 0 || s.credit[l.name] > s.credit[lanes[pick].name] {
				pick = i
			}
		}
		s.credit[lanes[pick].name] -= total
		lanes[pick].waiting--
		take[lanes[pick].name]++
	}
	// Forget the credit of lanes that emptied, so that the map stays small.
	for name := range s.credit {
		if !slices.ContainsFunc(lanes, func(l waitingLane) bool { return l.name == name && l.waiting > 0 }) && take[name] == 0 {
			delete(s.credit, name)
		}
	}
	return take
}

// keyWeight is fairness key's weight (Weights; 1 for a key not named).
func (c Config) keyWeight(key string) int {
	if wt, ok := c.Weights[key]; ok {
		return wt
	}
	return 1
}

// listPatience is how long a poll waits for the lanes' listing before it
// takes from the lanes it knows. A JetStream cluster answers a listing of
// consumers only once every consumer's leader has answered, or after 4 s
// when one has none (a lane's consumer just created, or between leaders);
// the runs of the other lanes must not wait that long.
const listPatience = 250 * time.Millisecond

// listing is one listing of the lanes (lanes), in flight or done, shared
// by the polls that wait for it.
type listing struct {
	gen      int
	done     chan struct{}
	waiting  []waitingLane
	inFlight []string
	err      error
}

// listing returns the listing in flight, or starts one.
func (s *scheduler) listing(ctx context.Context) *listing {
	s.mu.Lock()
	if l := s.list; l != nil {
		s.mu.Unlock()
		return l
	}
	s.listGen++
	l := &listing{gen: s.listGen, done: make(chan struct{})}
	s.list = l
	s.mu.Unlock()
	list := func() {
		defer close(l.done)
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l.waiting, l.inFlight, l.err = s.lanes(lctx)
	}
	if !s.w.background(list) { // shutting down
		l.err = context.Canceled
		close(l.done)
	}
	return l
}

// listed makes l the listing takeKnown goes by until the next one.
func (s *scheduler) listed(l *listing) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.list == l {
		s.list = nil // the next poll lists again
	}
	if l.err != nil {
		return
	}
	s.lastWaiting = slices.Clone(l.waiting)
	s.higherSeq = 0
	for name, m := range s.moved {
		if m.gen < l.gen { // the listing saw it
			delete(s.moved, name)
		}
	}
}

// movedTo is a lane this worker moved runs to since the last listing.
type movedTo struct {
	lane events.Fairness
	runs int
	gen  int // the listing in flight or next when the runs were moved
}

// noteMoved records that this worker moved a run to lane f.
func (s *scheduler) noteMoved(f events.Fairness) {
	name := s.w.names.LaneConsumer(f)
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.moved[name]
	s.moved[name] = movedTo{lane: f, runs: m.runs + 1, gen: s.listGen}
}

// fetch takes up to n runs from the lanes and starts each; it returns how
// many it started (each holds one slot until it ends).
func (s *scheduler) fetch(ctx context.Context, n int) int {
	l := s.listing(ctx)
	late := time.NewTimer(listPatience)
	defer late.Stop()
	select {
	case <-l.done:
		s.listed(l)
	case <-late.C:
		return s.takeKnown(ctx, n)
	case <-ctx.Done():
		return 0
	}
	lanes, inFlight, err := l.waiting, l.inFlight, l.err
	if err != nil {
		s.w.fetchFailed(ctx, "list the lanes", err)
		return 0
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	started := s.probe(lctx, inFlight, n)
	if len(lanes) == 0 || started == n {
		return started
	}
	s.age(lctx, lanes, time.Now())
	for name, k := range s.plan(lanes, n-started) {
		started += s.take(lctx, name, k)
	}
	return started
}

// takeKnown takes up to n runs while the lanes' listing is late, from
// the lanes the last listing found runs waiting in and those this worker
// moved runs to since, as plan shares them; a lane that gives fewer runs
// than asked is taken as empty until the next listing, and its share goes
// to the others. Lanes other workers filled since the last listing are
// unknown to this one: higherLanes adds those of a higher priority than
// the best it knows, so that it does not start runs out of order.
func (s *scheduler) takeKnown(ctx context.Context, n int) int {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s.higherLanes(lctx)
	s.mu.Lock()
	lanes := s.knownLanes()
	s.mu.Unlock()
	started := 0
	for started < n {
		short := false
		for name, k := range s.plan(lanes, n-started) {
			got := s.take(lctx, name, k)
			started += got
			s.tookKnown(name, k, got)
			if got < k {
				short = true
				lanes[laneIndex(lanes, name)].waiting = 0
			}
		}
		if !short {
			break
		}
	}
	return started
}

// knownLanes is lastWaiting with the lanes this worker moved runs to
// since. Called with mu held.
func (s *scheduler) knownLanes() []waitingLane {
	lanes := slices.Clone(s.lastWaiting)
	for name, m := range s.moved {
		var i int
		lanes, i = withLane(lanes, m.lane, name)
		lanes[i].waiting += m.runs
	}
	return lanes
}

// higherLanes adds to lastWaiting the lanes of a higher priority than the
// best of those known with runs waiting that hold runs on the queue
// stream, whose leader answers at once, unlike the consumers' listing;
// each with as many waiting as it holds (some may be in flight, which a
// take finds out). It lists their subjects only when the newest run in
// them is newer than the last it added: a poll costs one message get per
// priority above.
func (s *scheduler) higherLanes(ctx context.Context) {
	s.mu.Lock()
	best := -1
	for _, l := range s.knownLanes() {
		if l.waiting > 0 && (best < 0 || l.rank < best) {
			best = l.rank
		}
	}
	since := s.higherSeq
	s.mu.Unlock()
	w := s.w
	var filters []string
	newest := uint64(0)
	for _, p := range []events.Priority{events.PriorityHigh, events.PriorityNormal} {
		if p.Rank() >= best {
			break
		}
		filter := w.names.LaneSubject(p, "*", "*")
		m, err := w.res.Queue.GetLastMsgForSubject(ctx, filter)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			continue
		case err != nil:
			w.log.Debug().Err(err).Msg("read the newest run of the lanes of a higher priority")
			return
		}
		filters = append(filters, filter)
		newest = max(newest, m.Sequence)
	}
	if newest <= since {
		return
	}
	held := make(map[events.Fairness]int)
	for _, filter := range filters {
		subjects, err := s.listSubjects(ctx, filter)
		if err != nil {
			w.log.Debug().Err(err).Msg("list the subjects of the lanes of a higher priority")
			return
		}
		for subj, runs := range subjects {
			if f, _, ok := w.names.LaneOfSubject(subj); ok {
				held[f] += int(runs)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for f, runs := range held {
		var i int
		s.lastWaiting, i = withLane(s.lastWaiting, f, w.names.LaneConsumer(f))
		s.lastWaiting[i].waiting = max(s.lastWaiting[i].waiting, runs)
	}
	s.higherSeq = max(s.higherSeq, newest)
}

// laneIndex is the index of lane name in lanes, or -1.
func laneIndex(lanes []waitingLane, name string) int {
	return slices.IndexFunc(lanes, func(l waitingLane) bool { return l.name == name })
}

// withLane returns lanes with lane f (consumer name) in it, appended with
// none waiting if it was not, and its index.
func withLane(lanes []waitingLane, f events.Fairness, name string) ([]waitingLane, int) {
	if i := laneIndex(lanes, name); i >= 0 {
		return lanes, i
	}
	return append(lanes, waitingLane{lane: f, name: name, rank: f.Priority.Rank()}), len(lanes)
}

// tookKnown counts got runs taken of k asked from lane name in the
// figures takeKnown goes by: fewer than asked, and the lane is empty.
func (s *scheduler) tookKnown(name string, k, got int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := laneIndex(s.lastWaiting, name)
	if got < k {
		if i >= 0 {
			s.lastWaiting[i].waiting = 0
		}
		delete(s.moved, name)
		return
	}
	if i >= 0 {
		d := min(got, s.lastWaiting[i].waiting)
		s.lastWaiting[i].waiting -= d
		got -= d
	}
	if m, ok := s.moved[name]; ok {
		m.runs -= min(got, m.runs)
		s.moved[name] = m
	}
}

// take fetches up to k jobs from lane name without waiting and starts a
// run for each; it returns how many.
func (s *scheduler) take(ctx context.Context, name string, k int) int {
	if k <= 0 {
		return 0 // a pull of none is refused
	}
	w := s.w
	c, err := s.consumer(ctx, name)
	if err != nil {
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			s.forget(name)
		} else {
			w.fetchFailed(ctx, "open a lane", err)
		}
		return 0
	}
	// No context, as in fetch: a delivered job must not be dropped.
	batch, err := c.FetchNoWait(k)
	if err != nil {
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) {
			s.forget(name)
		} else {
			w.fetchFailed(ctx, "fetch jobs from a lane", err)
		}
		return 0
	}
	return w.startRuns(batch, func(msg jetstream.Msg) jetstream.Msg { return asLaneJob(w.names, msg) })
}

// asLaneJob wraps a message taken from a lane.
func asLaneJob(n events.Names, msg jetstream.Msg) jetstream.Msg {
	_, runID, ok := n.LaneOfSubject(msg.Subject())
	if !ok {
		return msg // dead-lettered by handle: no run id
	}
	j := laneJob{Msg: msg, subject: n.RunSubject(runID)}
	if meta, err := msg.Metadata(); err == nil {
		j.submitted = submittedAt(msg.Headers(), meta.Timestamp)
	}
	return j
}

// pullLanes is pull for lanes: it reserves free slots, takes runs for
// them from the lanes and, when none waits, sleeps until this worker moves
// a run to a lane or LanePoll passes.
func (w *Worker) pullLanes(ctx context.Context) error {
	idle := time.NewTimer(w.cfg.LanePoll)
	defer idle.Stop()
	for ctx.Err() == nil {
		slots, err := w.reserve(ctx)
		if err != nil || slots == 0 {
			if err != nil {
				return err
			}
			continue
		}
		used := w.sched.fetch(ctx, slots)
		w.releaseSlots(slots - used)
		if used > 0 {
			continue
		}
		idle.Reset(min(w.cfg.LanePoll, w.cfg.PollWait))
		select {
		case <-ctx.Done():
		case <-w.sched.wake:
		case <-idle.C:
		}
	}
	return nil
}
