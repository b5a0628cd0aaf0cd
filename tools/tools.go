package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/foundryq/foundryq/events"
)

// Call is one call of the tool by a run's model.
type Call struct {
	RunID  string // the run the call belongs to
	CallID string // the function_call's call_id
	Name   string // the tool's name
	// Arguments are the call's arguments exactly as the model wrote them
	// (JSON text; not checked).
	Arguments json.RawMessage
	// Deadline is when the worker gives the call up (zero if the request
	// named none); the handler's ctx ends then.
	Deadline time.Time
}

// Handler runs one call and returns the function's output (usually JSON
// text), which the model receives. It must return soon after ctx ends. An
// error is replied as a micro error: code "500" with the error's text,
// unless it is (or wraps) an Error, which names its code.
type Handler func(ctx context.Context, call Call) (string, error)

// Error is a handler's error with a code of its own choosing (an HTTP-like
// status is customary: "404", "429"...). The worker fails the run
// tool_failed with the description.
type Error struct {
	Code        string // "500" if empty
	Description string // "tool <name> failed" if empty
}

func (e Error) Error() string { return "tool error " + e.Code + ": " + e.Description }

// Causes of a handler's ctx ending (context.Cause). A closed connection
// gives nats.ErrConnectionClosed.
var (
	ErrCancelled = errors.New("tools: the worker cancelled the call")
	ErrDeadline  = errors.New("tools: the call's deadline passed")
	ErrStopped   = errors.New("tools: the service stopped")
)

// ErrInvalidName is returned by Serve for a tool name that is not
// [a-zA-Z0-9_-]{1,64} (the Responses API's rule for function names).
var ErrInvalidName = errors.New("tools: invalid tool name")

// Defaults of the options.
const (
	DefaultHeartbeat   = time.Second
	DefaultMaxInFlight = 64
	DefaultVersion     = "1.0.0"
)

// config is what the options set.
type config struct {
	prefix      string
	version     string
	description string
	heartbeat   time.Duration
	maxInFlight int
}

// Option configures Serve.
type Option func(*config)

// WithPrefix sets the subject prefix (events.Names; default "foundryq"):
// the worker's --prefix.
func WithPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithVersion sets the service's version, a SemVer string shown by nats
// micro (default "1.0.0").
func WithVersion(v string) Option { return func(c *config) { c.version = v } }

// WithDescription sets the service's description shown by nats micro info.
func WithDescription(d string) Option { return func(c *config) { c.description = d } }

// WithHeartbeat sets the interval of progress messages while a handler
// runs (default 1 s; the worker takes a tool that stops sending them for
// 3 s as dead, so keep the default outside tests).
func WithHeartbeat(d time.Duration) Option { return func(c *config) { c.heartbeat = d } }

// WithMaxInFlight bounds the calls this Service runs at once (default 64).
// Calls beyond it wait for a free slot; their deadline and a cancel still
// end them (answered 503 without running).
func WithMaxInFlight(n int) Option { return func(c *config) { c.maxInFlight = n } }

// newConfig applies opts to the defaults and checks the result.
func newConfig(name string, opts []Option) (config, events.Names, error) {
	c := config{version: DefaultVersion, heartbeat: DefaultHeartbeat, maxInFlight: DefaultMaxInFlight}
	for _, o := range opts {
		o(&c)
	}
	if !events.ValidToolName(name) {
		return c, events.Names{}, fmt.Errorf("%w %q: it must match ^[a-zA-Z0-9_-]{1,64}$", ErrInvalidName, name)
	}
	names, err := events.NewNames(c.prefix)
	if err != nil {
		return c, names, fmt.Errorf("tools: %w", err)
	}
	if c.heartbeat <= 0 {
		return c, names, fmt.Errorf("tools: heartbeat %s: must be positive", c.heartbeat)
	}
	if c.maxInFlight <= 0 {
		return c, names, fmt.Errorf("tools: max in flight %d: must be positive", c.maxInFlight)
	}
	return c, names, nil
}
