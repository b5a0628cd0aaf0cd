package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/internal/jserr"
	"github.com/foundryq/foundryq/internal/retry"
	"github.com/foundryq/foundryq/internal/tracing"
)

// Provider is what a worker needs from Foundry. *foundry.Client implements
// it.
type Provider interface {
	// Create starts a background, streaming, stored response.
	Create(ctx context.Context, req foundry.CreateRequest) (*foundry.Stream, error)
	// Resume streams the response's events after upstream sequence number after.
	Resume(ctx context.Context, responseID string, after int64) (*foundry.Stream, error)
	// Get returns the stored response.
	Get(ctx context.Context, responseID string) (*foundry.Response, error)
	// Cancel cancels the response server-side and returns its state.
	Cancel(ctx context.Context, responseID string) (*foundry.Response, error)
}

// Worker pulls run requests from the runs stream, owns each run until its
// terminal event is stored, and answers cancel requests. Create it with New
// and start it with Run.
type Worker struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	up     Provider
	cfg    Config
	names  events.Names
	log    zerolog.Logger
	m      *metrics
	tracer trace.Tracer

	// pub publishes run events on a second connection of its own, so that
	// the steady stream of event publishes never delays cancels, state
	// updates or acks on the first.
	pub     jetstream.JetStream
	res     Resources
	states  *stateStore
	ackWait time.Duration
	conn    *connWatch
	maxText int // text bytes per event (eventTextLimit)
	limiter *createLimiter
	limits  *limits // fleet-wide caps and budgets (caps.go); nil without any
	ready   readiness
	store   storeWatch                // whether JetStream refuses writes, its store full
	pubConn atomic.Pointer[nats.Conn] // the event publishing connection, once Run opened it

	// reprovisioning recreates streams, consumer or bucket deleted under
	// a running worker; at most one at a time.
	reprovisioning atomic.Bool
	lastProvision  atomic.Int64 // unix nanos of the last (re)provisioning

	// cancelling holds the run ids whose response this worker is cancelling
	// upstream for an owner that did not answer: one call per run at a time.
	cancelling runSet
	// deadlines are those of the unfinished runs whose records this worker
	// has seen written or read (deadlines.go); deadlineReads counts the
	// reads of every record asked for and not yet made.
	deadlines     deadlines
	deadlineReads atomic.Int32

	mu               sync.Mutex
	runs             map[string]*run // runs this worker owns, by run id
	shutdownDeadline time.Time       // set when shutdown starts

	runWG    sync.WaitGroup // one per run goroutine
	bgWG     sync.WaitGroup // background re-provisioning
	cancelWG sync.WaitGroup // one per cancel request being answered
	auditWG  sync.WaitGroup // one per pending cancel audit
	stopping chan struct{}  // closed when shutdown starts
	slots    *slots         // the runs this worker may still own
	sched    *scheduler     // which lanes to take runs from (sched.go)
	drainers *drainers      // the goroutines that publish runs' events (relay.drain)
}

// New returns a worker that talks to NATS through nc and to Foundry through
// up. It checks cfg but touches nothing until Run.
func New(nc *nats.Conn, up Provider, cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if nc == nil {
		return nil, errors.New("consumer: nil NATS connection")
	}
	if up == nil {
		return nil, errors.New("consumer: nil Foundry provider")
	}
	names, err := events.NewNames(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("consumer: invalid config: prefix: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("consumer: jetstream: %w", err)
	}
	w := &Worker{
		nc:       nc,
		js:       js,
		cfg:      cfg,
		names:    names,
		log:      cfg.Logger.With().Str("worker", cfg.WorkerID).Logger(),
		tracer:   tracing.Tracer(cfg.TracerProvider),
		runs:     make(map[string]*run),
		limiter:  newCreateLimiter(),
		slots:    newSlots(cfg.Concurrency),
		drainers: newDrainers(),
		stopping: make(chan struct{}),
	}
	// The resolver logs why it refused a reference, with the hosts, paths
	// and variables its errors leave out, at debug level.
	w.cfg.Secrets = cfg.Secrets.WithLogger(w.log)
	w.sched = newScheduler(w)
	w.m = newMetrics(cfg.Registerer, func() float64 { return float64(w.stuckRuns(time.Now())) })
	w.store.m = w.m
	w.up = observed{up: up, m: w.m, tracer: w.tracer}
	return w, nil
}

// stuckRuns counts the runs this worker owns that have stored no event
// (or, before their first, were taken) more than StuckAfter before now.
func (w *Worker) stuckRuns(now time.Time) int {
	n := 0
	for _, r := range w.ownedRuns() {
		if now.Sub(r.lastActivity()) > w.cfg.StuckAfter {
			n++
		}
	}
	return n
}

// ID returns the worker's id.
func (w *Worker) ID() string { return w.cfg.WorkerID }

// Run provisions the streams, consumer and bucket (retrying with backoff,
// and logging, while NATS or JetStream is unavailable), answers cancel
// requests and runs jobs until ctx ends. Then it shuts down in this order,
// bounded by ShutdownTimeout: stop pulling; hand off every run it owns (stop
// reading upstream, store the events already received, Nak the job so
// another worker re-attaches at once; nothing is cancelled upstream); stop
// answering cancels. It returns nil after a clean shutdown, and an error if
// its NATS connection is closed for good.
func (w *Worker) Run(ctx context.Context) error {
	res, err := w.provision(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it started
		}
		return err
	}
	w.res = res
	defer w.drainers.close() // last: every run has ended
	w.states = newStateStore(res.State, w.nc)
	w.states.store = &w.store
	pubConn := w.cfg.PublishConn
	if pubConn == nil {
		if pubConn, err = w.nc.Opts.Connect(); err != nil {
			return fmt.Errorf("consumer: open the event publishing connection: %w", err)
		}
		defer pubConn.Close()
	}
	w.pubConn.Store(pubConn)
	if w.pub, err = jetstream.New(pubConn); err != nil {
		return fmt.Errorf("consumer: jetstream: %w", err)
	}
	w.maxText = eventTextLimit(pubConn.MaxPayload())
	w.ackWait = res.Consumer.CachedInfo().Config.AckWait

	connStop := make(chan struct{})
	w.conn = watchConn(w.nc, connStop, func() {
		w.background(w.recheckCancels)
		w.readDeadlinesSoon() // writes made while disconnected were not heard
	})
	defer close(connStop)

	stopCancels, err := w.subscribeCancels(ctx)
	if err != nil {
		return err
	}
	defer stopCancels()
	stopInputs, err := w.serveRequests(ctx, w.names.InputWildcard(), w.onInput)
	if err != nil {
		return err
	}
	defer stopInputs()
	stopPositions, err := w.serveRequests(ctx, w.names.PositionWildcard(), w.onPositionRequest)
	if err != nil {
		return err
	}
	defer stopPositions()
	stopDeadlines, err := w.watchDeadlines()
	if err != nil {
		return fmt.Errorf("consumer: follow the run state records: %w", err)
	}
	defer stopDeadlines()
	w.readDeadlinesSoon() // records not written again are not heard

	leaseCtx, stopLeases := context.WithCancel(context.Background())
	if w.limits, err = w.startLimits(ctx, leaseCtx); err != nil {
		stopLeases()
		return err
	}
	var leaseWG sync.WaitGroup
	leaseWG.Add(1)
	go func() {
		defer leaseWG.Done()
		w.keepLeases(leaseCtx)
	}()
	if w.limits != nil {
		leaseWG.Add(1)
		go func() {
			defer leaseWG.Done()
			w.keepSlots(leaseCtx)
		}()
	}
	defer func() {
		stopLeases()
		leaseWG.Wait()
	}()

	w.log.Info().Int("concurrency", w.cfg.Concurrency).Dur("ack_wait", w.ackWait).Msg("worker started")
	w.ready.heartbeat(time.Now())
	w.ready.running.Store(true)
	var pullErr error
	if w.cfg.FIFO {
		pullErr = w.pull(ctx)
	} else {
		// Lanes: move requests from the intake to their lanes, take runs
		// from the lanes (lanes.go, sched.go).
		var fwdWG sync.WaitGroup
		fwdWG.Add(1)
		go func() {
			defer fwdWG.Done()
			w.forward(ctx)
		}()
		pullErr = w.pullLanes(ctx)
		fwdWG.Wait()
	}
	w.ready.running.Store(false)
	w.ready.ended.Store(true)
	w.shutdown()
	w.bgWG.Wait()
	w.log.Info().Msg("worker stopped")
	return pullErr
}

// provision creates the JetStream resources, retrying with backoff (and
// logging each failure) until it succeeds or ctx ends: a worker started
// while NATS is down waits for it.
func (w *Worker) provision(ctx context.Context) (Resources, error) {
	b := retry.Backoff(250*time.Millisecond, 5*time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := Provision(pctx, w.js, w.names, w.cfg.Provision)
		cancel()
		if err == nil {
			w.lastProvision.Store(time.Now().UnixNano())
			return res, nil
		}
		if errors.Is(err, events.ErrInvalidProvisionConfig) || w.nc.IsClosed() {
			return Resources{}, fmt.Errorf("consumer: provision: %w", err)
		}
		if ctx.Err() != nil {
			return Resources{}, ctx.Err()
		}
		wait := b.NextBackOff()
		w.log.Warn().Err(err).Dur("retry_in", wait).Msg("provision streams, consumer and bucket")
		retry.Sleep(ctx, wait)
	}
}

// resourcesMissing recreates the streams, consumer and bucket after a call
// found one of them missing (deleted under the running worker). It runs in
// the background, at most once at a time and once a second.
func (w *Worker) resourcesMissing() {
	if time.Since(time.Unix(0, w.lastProvision.Load())) < time.Second || !w.reprovisioning.CompareAndSwap(false, true) {
		return
	}
	if !w.background(func() {
		defer w.reprovisioning.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := Provision(ctx, w.js, w.names, w.cfg.Provision); err != nil {
			w.log.Warn().Err(err).Msg("recreate missing streams, consumer or bucket")
			return
		}
		w.lastProvision.Store(time.Now().UnixNano())
		w.ready.invalidate()
		w.log.Warn().Msg("recreated missing streams, consumer or bucket")
	}) {
		w.reprovisioning.Store(false)
	}
}

// background runs f on a goroutine that Run waits for, unless shutdown
// has started (then it reports false and f does not run).
func (w *Worker) background(f func()) bool {
	// Under mu, as shutdown closes stopping: no Add once bgWG.Wait may run.
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.isStopping() {
		return false
	}
	w.bgWG.Add(1)
	go func() {
		defer w.bgWG.Done()
		f()
	}()
	return true
}

// pull fetches jobs from the runs stream (Config.FIFO) while there are
// free slots, until ctx ends or the NATS connection is closed for good. It
// never fetches more jobs than it has free slots.
func (w *Worker) pull(ctx context.Context) error {
	for ctx.Err() == nil {
		slots, err := w.reserve(ctx)
		if err != nil {
			return err
		}
		if slots == 0 {
			continue
		}
		used := w.fetch(ctx, slots)
		w.releaseSlots(slots - used)
	}
	return nil
}

// reserve beats Ready's heartbeat and takes every free slot, waiting for
// one to come free when none is, and returns how many; 0 when ctx ends or
// PollWait passes with every slot busy (alive all the same), an error
// when the NATS connection is closed for good.
func (w *Worker) reserve(ctx context.Context) (int, error) {
	w.ready.heartbeat(time.Now())
	if w.nc.IsClosed() {
		return 0, fmt.Errorf("consumer: %w", nats.ErrConnectionClosed)
	}
	if n := w.slots.takeAll(); n > 0 {
		return n, nil
	}
	idle := time.NewTimer(w.cfg.PollWait)
	defer idle.Stop()
	for {
		select {
		case <-w.slots.freed:
		case <-ctx.Done():
			return 0, nil
		case <-idle.C:
			return 0, nil
		}
		if n := w.slots.takeAll(); n > 0 {
			return n, nil
		}
	}
}

// releaseSlots gives back n slots that reserve took.
func (w *Worker) releaseSlots(n int) { w.slots.give(n) }

// startRuns starts a run for each job of batch (wrapped by wrap, if not
// nil), each holding one of the slots its fetch took until it ends; it
// returns how many.
func (w *Worker) startRuns(batch jetstream.MessageBatch, wrap func(jetstream.Msg) jetstream.Msg) int {
	started := 0
	for msg := range batch.Messages() {
		started++
		if wrap != nil {
			msg = wrap(msg)
		}
		w.runWG.Add(1)
		go func() {
			defer w.runWG.Done()
			defer w.releaseSlots(1)
			w.handle(msg)
		}()
	}
	return started
}

// fetch pulls up to n jobs and starts a run for each; it returns how many
// it started (each holds one slot until it ends).
func (w *Worker) fetch(ctx context.Context, n int) int {
	// No context on the fetch: a pull cut short at shutdown could drop a
	// delivered job until its ack wait ran out. A fetch ends after PollWait.
	batch, err := w.res.Consumer.Fetch(n, jetstream.FetchMaxWait(w.cfg.PollWait))
	if err != nil {
		if ctx.Err() == nil && !w.nc.IsClosed() {
			w.log.Warn().Err(err).Msg("fetch jobs")
			if jserr.MissingResource(err) {
				w.resourcesMissing()
			}
			retry.Sleep(ctx, 250*time.Millisecond)
		}
		return 0
	}
	started := w.startRuns(batch, nil)
	if err := batch.Error(); err != nil && ctx.Err() == nil && !w.nc.IsClosed() &&
		!errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
		w.log.Warn().Err(err).Msg("fetch jobs")
		if jserr.MissingResource(err) {
			w.resourcesMissing()
		}
		retry.Sleep(ctx, 250*time.Millisecond)
	}
	return started
}

// shutdown hands off every run and waits for the run goroutines, at most
// ShutdownTimeout.
func (w *Worker) shutdown() {
	w.mu.Lock()
	w.shutdownDeadline = time.Now().Add(w.cfg.ShutdownTimeout)
	close(w.stopping)
	w.mu.Unlock()
	defer w.auditWG.Wait()
	w.mu.Lock()
	for _, r := range w.runs {
		r.stop(ErrShutdown)
	}
	w.mu.Unlock()
	done := make(chan struct{})
	go func() {
		w.runWG.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(w.cfg.ShutdownTimeout):
		w.log.Warn().Dur("timeout", w.cfg.ShutdownTimeout).Msg("shutdown timed out; remaining runs are redelivered after the ack wait")
		w.mu.Lock()
		for _, r := range w.runs {
			r.abort()
		}
		w.mu.Unlock()
		<-done
	}
}

// keepLeases extends the ack deadline of every job this worker owns, three
// times per ack wait.
func (w *Worker) keepLeases(ctx context.Context) {
	t := time.NewTicker(max(w.ackWait/3, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, r := range w.ownedRuns() {
			if err := r.msg.InProgress(); err != nil {
				r.logger().Debug().Err(err).Msg("extend job lease")
			}
		}
	}
}

// register adds r to the runs this worker owns; false if it owns the run
// already (a redelivery that crossed its own lease).
func (w *Worker) register(r *run) (registered *run, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if other, ok := w.runs[r.id]; ok {
		return other, false
	}
	w.runs[r.id] = r
	w.m.runsActive.Inc()
	return r, true
}

func (w *Worker) unregister(r *run) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.runs[r.id] == r {
		delete(w.runs, r.id)
		w.m.runsActive.Dec()
		w.states.forget(r.id)
	}
}

// untilStopping returns a context that ends when shutdown starts, or when
// cancel is called.
func (w *Worker) untilStopping() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-w.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// isStopping reports whether shutdown has started.
func (w *Worker) isStopping() bool {
	select {
	case <-w.stopping:
		return true
	default:
		return false
	}
}

// handoffDeadline is how long a run handed off at shutdown may wait for a
// create's response id: a reserve before the shutdown timeout is left for
// ending the run if it does not come.
func (w *Worker) handoffDeadline() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.shutdownDeadline.Add(-min(w.cfg.ShutdownTimeout/4, 3*time.Second))
}

// maxFailures is how many failed attempts a run may use.
func (w *Worker) maxFailures() int {
	if n := w.cfg.Provision.MaxDeliver; n > 0 {
		return n
	}
	return events.DefaultMaxDeliver
}

func (w *Worker) owned(runID string) *run {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.runs[runID]
}

// ownedRuns returns the runs this worker owns now.
func (w *Worker) ownedRuns() []*run {
	w.mu.Lock()
	defer w.mu.Unlock()
	runs := make([]*run, 0, len(w.runs))
	for _, r := range w.runs {
		runs = append(runs, r)
	}
	return runs
}

// runSet is a set of run ids, safe for concurrent use: work on a run that
// must not run twice at once.
type runSet struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

// start adds id and reports whether it was not there yet.
func (s *runSet) start(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.ids[id]; ok {
		return false
	}
	if s.ids == nil {
		s.ids = make(map[string]struct{})
	}
	s.ids[id] = struct{}{}
	return true
}

// done removes id.
func (s *runSet) done(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ids, id)
}
