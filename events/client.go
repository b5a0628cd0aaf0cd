package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// Prefix is the subject prefix. Default DefaultPrefix ("foundryq").
	Prefix string
	// CancelTimeout bounds a cancel request when the caller's context has
	// no earlier deadline. Default 5s.
	CancelTimeout time.Duration
	// HeartbeatInterval is how often a Watch publishes a watcher heartbeat.
	// Default 1s.
	HeartbeatInterval time.Duration
}

func (c ClientConfig) withDefaults() ClientConfig {
	if c.CancelTimeout == 0 {
		c.CancelTimeout = 5 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = time.Second
	}
	return c
}

func (c ClientConfig) validate() error {
	if c.CancelTimeout < 0 {
		return fmt.Errorf("events: client: CancelTimeout %s must be positive", c.CancelTimeout)
	}
	if c.HeartbeatInterval < 10*time.Millisecond {
		return fmt.Errorf("events: client: HeartbeatInterval %s must be at least 10ms", c.HeartbeatInterval)
	}
	return nil
}

// Client submits, cancels and watches runs. It does not provision
// anything: the workers do (Provision). Safe for concurrent use.
type Client struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	names Names
	cfg   ClientConfig

	mu    sync.Mutex
	state *StateStore // looked up on first use
	runs  jetstream.Stream
}

// NewClient returns a Client on nc.
func NewClient(nc *nats.Conn, cfg ClientConfig) (*Client, error) {
	if nc == nil {
		return nil, errors.New("events: client: nil connection")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	names, err := NewNames(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("events: client: Prefix: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("events: client: %w", err)
	}
	return &Client{nc: nc, js: js, names: names, cfg: cfg}, nil
}

// Names returns the subject and stream names the client uses.
func (c *Client) Names() Names { return c.names }

// JetStream returns the client's JetStream context.
func (c *Client) JetStream() jetstream.JetStream { return c.js }

// StateStore returns the store over the state bucket, looking the bucket
// up on first use.
func (c *Client) StateStore(ctx context.Context) (*StateStore, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != nil {
		return c.state, nil
	}
	kv, err := c.js.KeyValue(ctx, c.names.Bucket())
	if err != nil {
		return nil, fmt.Errorf("events: open state bucket %s (has a worker provisioned it?): %w", c.names.Bucket(), err)
	}
	c.state = NewStateStore(kv)
	return c.state, nil
}

func (c *Client) runsStream(ctx context.Context) (jetstream.Stream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs != nil {
		return c.runs, nil
	}
	s, err := c.js.Stream(ctx, c.names.RunsStream())
	if err != nil {
		return nil, fmt.Errorf("events: open stream %s (has a worker provisioned it?): %w", c.names.RunsStream(), err)
	}
	c.runs = s
	return s, nil
}

// SubmitResult says where JetStream stored a run request.
type SubmitResult struct {
	RunID    string
	Stream   string
	Sequence uint64
}

// JetStream error code for "maximum messages per subject exceeded": the
// runs stream refuses a second request for a run id that is still queued.
const errCodeMaxMsgsPerSubject jetstream.ErrorCode = 10077

// Submit validates req and publishes it on <prefix>.runs.<run_id> with
// Nats-Msg-Id = run id, returning once JetStream has stored it. A bad
// request returns a *ValidationError and publishes nothing. A run id that
// is still queued gives ErrAlreadyQueued; one submitted within the dedupe
// window and taken since gives ErrDuplicateSubmit. Submit never generates
// a run id: use NewRunID. On a dedupe hit (ErrAlreadyQueued or
// ErrDuplicateSubmit with a non-zero result) the result holds the first
// publish's sequence.
func (c *Client) Submit(ctx context.Context, req RunRequest) (SubmitResult, error) {
	if err := req.Validate(); err != nil {
		return SubmitResult{}, err
	}
	data, err := json.Marshal(req)
	if err != nil {
		return SubmitResult{}, fmt.Errorf("events: submit run %s: encode: %w", req.RunID, err)
	}
	subject := c.names.RunSubject(req.RunID)
	ack, err := c.js.Publish(ctx, subject, data,
		jetstream.WithMsgID(req.RunID), jetstream.WithExpectStream(c.names.RunsStream()))
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeMaxMsgsPerSubject {
			return SubmitResult{}, fmt.Errorf("events: submit run %s: %w", req.RunID, ErrAlreadyQueued)
		}
		return SubmitResult{}, fmt.Errorf("events: submit run %s: %w", req.RunID, err)
	}
	res := SubmitResult{RunID: req.RunID, Stream: ack.Stream, Sequence: ack.Sequence}
	if ack.Duplicate {
		// Within the dedupe window JetStream reports the first publish's
		// sequence. If that message is still in the work queue the run is
		// queued; otherwise a worker has taken it.
		if queued, qerr := c.queued(ctx, req.RunID); qerr == nil && queued {
			return res, fmt.Errorf("events: submit run %s: %w", req.RunID, ErrAlreadyQueued)
		}
		return res, fmt.Errorf("events: submit run %s: %w", req.RunID, ErrDuplicateSubmit)
	}
	return res, nil
}

// queued reports whether a request for runID waits in the runs stream.
func (c *Client) queued(ctx context.Context, runID string) (bool, error) {
	s, err := c.runsStream(ctx)
	if err != nil {
		return false, err
	}
	_, err = s.GetLastMsgForSubject(ctx, c.names.RunSubject(runID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("events: look up queued run %s: %w", runID, err)
	}
	return true, nil
}

// Cancel asks the workers to cancel runID (core NATS request on
// <prefix>.cancel.<run_id>) and returns their typed reply. If no worker is
// running (no responders), Cancel records the cancel in the state bucket
// itself so that the worker that takes the run applies it, and answers:
// cancelling if the run is queued or its state is not finished,
// already_finished if the state is finished, not_found if neither exists.
// When no state exists but the run is queued, the recorded state has
// status "queued" and the cancel record; otherwise the stored state keeps
// all its fields and gains the cancel record (compare-and-set), unless it
// already has one. A reply carrying an error gives the reply and an error
// wrapping ErrCancelFailed. reason is free text ("" is sent as no reason
// and recorded as ReasonRequested).
func (c *Client) Cancel(ctx context.Context, runID, reason string) (CancelReply, error) {
	if !ValidRunID(runID) {
		return CancelReply{}, fmt.Errorf("events: cancel run %q: %w", runID, ErrBadRunID)
	}
	creq := CancelRequest{Reason: reason}
	if err := creq.Validate(); err != nil {
		return CancelReply{}, err
	}
	data, err := json.Marshal(creq)
	if err != nil {
		return CancelReply{}, fmt.Errorf("events: cancel run %s: %w", runID, err)
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.CancelTimeout)
	defer cancel()
	msg, err := c.nc.RequestWithContext(rctx, c.names.CancelSubject(runID), data)
	if errors.Is(err, nats.ErrNoResponders) {
		return c.recordCancel(ctx, runID, reason)
	}
	if err != nil {
		return CancelReply{}, fmt.Errorf("events: cancel run %s: %w", runID, err)
	}
	reply, err := DecodeCancelReply(msg.Data)
	if err != nil {
		return reply, fmt.Errorf("events: cancel run %s: %w", runID, err)
	}
	if reply.Error != "" {
		return reply, fmt.Errorf("events: cancel run %s: %w: %s", runID, ErrCancelFailed, reply.Error)
	}
	return reply, nil
}

// recordCancel is the cancel path when no worker answers.
func (c *Client) recordCancel(ctx context.Context, runID, reason string) (CancelReply, error) {
	store, err := c.StateStore(ctx)
	if err != nil {
		return CancelReply{}, fmt.Errorf("events: cancel run %s: %w", runID, err)
	}
	queued, err := c.queued(ctx, runID)
	if err != nil {
		return CancelReply{}, fmt.Errorf("events: cancel run %s: %w", runID, err)
	}
	if reason == "" {
		reason = ReasonRequested
	}
	reply := CancelReply{RunID: runID}
	_, err = store.Upsert(ctx, runID, func(st *RunState, exists bool) error {
		switch {
		case !exists && !queued:
			reply.Result = CancelNotFound
			return ErrSkipUpdate
		case !exists:
			st.Status = StatusQueued
		case st.Finished():
			reply.Result = CancelAlreadyFinished
			reply.Terminal = st.Terminal
			reply.UpstreamStatus = st.UpstreamStatus
			return ErrSkipUpdate
		case st.Cancel != nil:
			reply.Result = CancelCancelling
			return ErrSkipUpdate
		}
		reply.Result = CancelCancelling
		st.Cancel = &CancelRecord{Reason: ReasonRequested, Note: reason, At: time.Now().UTC()}
		return nil
	})
	if err != nil {
		return CancelReply{}, fmt.Errorf("events: cancel run %s: record in state bucket: %w", runID, err)
	}
	return reply, nil
}

// State returns the stored state of runID and its KV revision, or an error
// wrapping ErrStateNotFound.
func (c *Client) State(ctx context.Context, runID string) (RunState, uint64, error) {
	store, err := c.StateStore(ctx)
	if err != nil {
		return RunState{}, 0, err
	}
	return store.Get(ctx, runID)
}
