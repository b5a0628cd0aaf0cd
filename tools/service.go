package tools

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/foundryq/foundryq/events"
)

// Service is one instance of a served tool. Stop it when done.
type Service struct {
	nc        *nats.Conn
	name      string
	names     events.Names
	cfg       config
	handler   Handler
	svc       micro.Service
	instance  string // micro's id of this instance
	cancelSub *nats.Subscription
	slots     chan struct{} // one per running handler
	base      context.Context
	stopBase  context.CancelCauseFunc

	mu      sync.Mutex
	stopped bool
	calls   map[*inflight]struct{} // registered calls, running or waiting for a slot
	early   earlyCancels           // cancels that came before their call
	stats   Stats                  // InFlight and the errors; Waiting is computed
	running sync.WaitGroup         // registered calls
}

// inflight is a registered call.
type inflight struct {
	call   Call
	cancel context.CancelCauseFunc
}

// Stats is the data of the endpoint's entry in micro's STATS (nats micro
// stats shows it).
type Stats struct {
	InFlight int `json:"in_flight"` // handlers running now
	Waiting  int `json:"waiting"`   // calls waiting for a free slot
	Errors   int `json:"errors"`    // error replies sent (every code)
	// EarlyCancels counts cancel messages that named no registered call:
	// each is remembered for a while, in case its call is still on the way
	// (or goes to another instance, which every instance hears too).
	EarlyCancels int    `json:"early_cancels"`
	LastError    string `json:"last_error"` // the last one's code and description
}

// Serve registers a micro service named name whose endpoint
// <prefix>.tools.<name> runs h for each call (see the package doc), and
// returns once the server has the subscriptions (it waits at most 10 s for
// the server; while the connection is down they are sent when it is back). name must match
// ^[a-zA-Z0-9_-]{1,64}$ (ErrInvalidName otherwise).
func Serve(nc *nats.Conn, name string, h Handler, opts ...Option) (*Service, error) {
	cfg, names, err := newConfig(name, opts)
	if err != nil {
		return nil, err
	}
	if nc == nil || h == nil {
		return nil, errors.New("tools: Serve needs a connection and a handler")
	}
	s := &Service{
		nc: nc, name: name, names: names, cfg: cfg, handler: h,
		slots: make(chan struct{}, cfg.maxInFlight),
		calls: map[*inflight]struct{}{},
	}
	s.base, s.stopBase = context.WithCancelCause(context.Background())
	// The cancel listener comes first, so that no call runs without it.
	if s.cancelSub, err = nc.Subscribe(names.ToolCancelWildcard(), s.onCancel); err != nil {
		return nil, fmt.Errorf("tools: subscribe to cancel messages: %w", err)
	}
	if err := s.register(); err != nil {
		s.stopBase(ErrStopped)
		return nil, errors.Join(err, s.cancelSub.Unsubscribe())
	}
	// An error here means the connection is down: the subscriptions are
	// sent again when it is back.
	_ = nc.Flush()
	return s, nil
}

// register adds the micro service and its endpoint.
func (s *Service) register() error {
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:         s.name,
		Version:      s.cfg.version,
		Description:  s.cfg.description,
		Metadata:     map[string]string{"foundryq_tool": s.name},
		StatsHandler: func(*micro.Endpoint) any { return s.Stats() },
		// The connection closed: nobody can hear the handlers' replies.
		DoneHandler: func(micro.Service) { s.stopBase(nats.ErrConnectionClosed) },
	})
	if err != nil {
		return fmt.Errorf("tools: %w", err)
	}
	// Set before the endpoint exists: its calls read them.
	s.svc, s.instance = svc, svc.Info().ID
	err = svc.AddEndpoint(s.name, micro.HandlerFunc(s.handle), micro.WithEndpointSubject(s.names.ToolSubject(s.name)))
	if err != nil {
		return errors.Join(fmt.Errorf("tools: %w", err), svc.Stop())
	}
	return nil
}

// Micro is the micro service (Info, Stats...).
func (s *Service) Micro() micro.Service { return s.svc }

// Subject is the endpoint's subject, <prefix>.tools.<name>.
func (s *Service) Subject() string { return s.names.ToolSubject(s.name) }

// Stats returns the counts of the calls this instance took.
func (s *Service) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Waiting = len(s.calls) - st.InFlight
	return st
}

// Stop stops taking calls (a call already delivered is answered 503),
// cancels the running handlers (cause ErrStopped) and returns once every
// one has returned and its reply is sent. A handler that ignores its ctx
// holds Stop up. Stop may be called more than once.
func (s *Service) Stop() error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	s.mu.Unlock()
	// Cancelled before micro stops, whose done handler would otherwise
	// name a closed connection as the cause.
	s.stopBase(ErrStopped)
	err := s.svc.Stop()
	s.running.Wait()
	if uerr := s.cancelSub.Unsubscribe(); uerr != nil && !errors.Is(uerr, nats.ErrConnectionClosed) {
		err = errors.Join(err, uerr)
	}
	return err
}

// onCancel cancels the registered call a cancel message names.
func (s *Service) onCancel(m *nats.Msg) {
	runID, ok := s.names.RunIDFromToolCancelSubject(m.Subject)
	callID := m.Header.Get(events.HeaderToolCallID)
	if !ok || callID == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	found := false
	for f := range s.calls {
		if f.call.RunID == runID && f.call.CallID == callID {
			f.cancel(ErrCancelled)
			found = true
		}
	}
	if !found {
		s.early.add(callKey{runID, callID}, time.Now())
		s.stats.EarlyCancels++
	}
}
