package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/foundryq/foundryq/events"
)

// Defaults and limits of Config.
const (
	DefaultAddr            = "127.0.0.1:8080"
	DefaultMaxBodyBytes    = 512 << 10
	DefaultSSEHeartbeat    = 15 * time.Second
	DefaultWriteTimeout    = 30 * time.Second
	DefaultCancelTimeout   = events.DefaultCancelTimeout // one bound on a whole cancel, as in the Go client and the CLI
	DefaultShutdownTimeout = 10 * time.Second
	DefaultListLimit       = 100
	MaxListLimit           = 1000

	DefaultReadTimeout        = 30 * time.Second
	DefaultReadHeaderTimeout  = 10 * time.Second
	DefaultIdleTimeout        = 2 * time.Minute
	DefaultMaxStreamsPerToken = 32
	DefaultRateLimit          = 20.0
	DefaultRateBurst          = 40
)

// Config configures a Gateway. Zero fields take the defaults noted on each.
type Config struct {
	// Addr is the address to listen on. Default "127.0.0.1:8080"; port 0
	// picks a free port (see Gateway.Addr).
	Addr string
	// NATSURL is the NATS URL of tenants that do not name one. Default
	// nats.DefaultURL.
	NATSURL string
	// Prefix is the subject prefix of tenants that do not name one.
	// Default "foundryq".
	Prefix string
	// Tenants are the tenants and their tokens. With NoAuth, exactly one
	// tenant without tokens.
	Tenants []Tenant
	// NoAuth serves every request, without a token, as the only tenant.
	// For development only: the gateway logs loudly that it is open, and
	// Validate refuses it on an address that is not loopback unless
	// NoAuthAnyAddr is set too.
	NoAuth bool
	// NoAuthAnyAddr lets NoAuth listen on a non-loopback address (behind
	// an authenticating proxy). Default false.
	NoAuthAnyAddr bool
	// CORSOrigins are the origins allowed to call the API from a browser
	// ("https://app.example.com", or "*" for any). Default none: only the
	// console served by the gateway itself (same origin).
	CORSOrigins []string
	// MaxBodyBytes bounds request bodies; a larger one is refused with 413.
	// Default 512 KiB (a run request must fit in one NATS message, 1 MiB by
	// default).
	MaxBodyBytes int64
	// SSEHeartbeat is how long an event stream may stay silent before the
	// gateway writes a comment line, so that proxies keep it open. Default 15s.
	SSEHeartbeat time.Duration
	// WatchHeartbeat is the interval of the watcher heartbeats sent for
	// streams opened with ?cancel_on_disconnect=1. Default 1s (the events
	// client's default).
	WatchHeartbeat time.Duration
	// WriteTimeout bounds each write to a client; an event stream whose
	// client stops reading is closed after it. Default 30s.
	WriteTimeout time.Duration
	// CancelTimeout bounds a whole cancel (POST /v1/runs/{id}/cancel after
	// the run's look-up): storing it, asking the workers, asking again past
	// a worker that does not answer. It is the events client's
	// ClientConfig.CancelTimeout; default events.DefaultCancelTimeout (5s).
	CancelTimeout time.Duration
	// ReadTimeout bounds reading a request's body, from the end of its
	// headers: a client that sends it slower is answered 408 and
	// disconnected. Requests without a body (event streams) are not
	// affected. Default 30s.
	ReadTimeout time.Duration
	// ReadHeaderTimeout bounds reading a request's headers. Default 10s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout is how long a kept-alive connection may wait for its
	// next request. Default 2m.
	IdleTimeout time.Duration
	// AllowedHosts are the host names (Host header, port aside) the
	// gateway answers: a request for another host is refused with 403
	// (DNS rebinding: a page of another site whose name resolves to the
	// gateway). With NoAuth the default is localhost, 127.0.0.1, ::1 and
	// the host of Addr, and NoAuthAnyAddr requires the list; with tokens
	// the default is any host. /healthz answers any host.
	AllowedHosts []string
	// MaxStreamsPerToken bounds the event streams open at once with one
	// token (without authentication: from one client address); one more
	// is refused with 429 and Retry-After. Default 32.
	MaxStreamsPerToken int
	// RateLimit is the requests per second one token (without
	// authentication: one client address) may make, on average, with
	// bursts of RateBurst; beyond, 429 with Retry-After. Default 20/s,
	// bursts of 40.
	RateLimit float64
	RateBurst int
	// ShutdownTimeout bounds the graceful shutdown of the HTTP server when
	// Run's context ends (event streams are ended at once). Default 10s.
	ShutdownTimeout time.Duration
	// ListLimit is the number of runs GET /v1/runs returns without a
	// limit parameter. Default 100; at most 1000.
	ListLimit int
	// TLSCertFile and TLSKeyFile, both or neither, serve HTTPS (the gateway
	// carries bearer tokens). Default: plain HTTP.
	TLSCertFile, TLSKeyFile string
	// Callbacks configures completion callbacks (callback_url on POST
	// /v1/runs). Off for a tenant unless Callbacks.Secret or a key of the
	// tenant's own (Tenant.CallbackSecretFiles) is set.
	Callbacks CallbackConfig
	// Logger receives the gateway's logs. Default: disabled.
	Logger *zerolog.Logger
}

func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.NATSURL == "" {
		c.NATSURL = nats.DefaultURL
	}
	if c.Prefix == "" {
		c.Prefix = events.DefaultPrefix
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.SSEHeartbeat == 0 {
		c.SSEHeartbeat = DefaultSSEHeartbeat
	}
	if c.WatchHeartbeat == 0 {
		c.WatchHeartbeat = time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.ListLimit == 0 {
		c.ListLimit = DefaultListLimit
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	if c.ReadHeaderTimeout == 0 {
		c.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxStreamsPerToken == 0 {
		c.MaxStreamsPerToken = DefaultMaxStreamsPerToken
	}
	if c.RateLimit == 0 {
		c.RateLimit = DefaultRateLimit
	}
	if c.RateBurst == 0 {
		c.RateBurst = DefaultRateBurst
	}
	if c.NoAuth && !c.NoAuthAnyAddr && len(c.AllowedHosts) == 0 {
		c.AllowedHosts = []string{"localhost", "127.0.0.1", "::1"}
		if host, _, err := net.SplitHostPort(c.Addr); err == nil && host != "" {
			c.AllowedHosts = append(c.AllowedHosts, host)
		}
	}
	if c.Logger == nil {
		nop := zerolog.Nop()
		c.Logger = &nop
	}
	c.Callbacks = c.Callbacks.withDefaults()
	ts := make([]Tenant, len(c.Tenants))
	for i, t := range c.Tenants {
		if t.NATSURL == "" {
			t.NATSURL = c.NATSURL
		}
		if t.Prefix == "" {
			t.Prefix = c.Prefix
		}
		ts[i] = t
	}
	c.Tenants = ts
	return c
}

// Validate checks the configuration (after defaults) and says which
// setting is wrong.
func (c Config) Validate() error { return c.withDefaults().validate() }

func (c Config) validate() error {
	host, _, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return fmt.Errorf("gateway: Addr %q: want host:port: %w", c.Addr, err)
	}
	switch {
	case c.MaxBodyBytes < 1024:
		return fmt.Errorf("gateway: MaxBodyBytes %d must be at least 1024", c.MaxBodyBytes)
	case c.SSEHeartbeat < 10*time.Millisecond:
		return fmt.Errorf("gateway: SSEHeartbeat %s must be at least 10ms", c.SSEHeartbeat)
	case c.WatchHeartbeat < 10*time.Millisecond:
		return fmt.Errorf("gateway: WatchHeartbeat %s must be at least 10ms", c.WatchHeartbeat)
	case c.WriteTimeout < 0, c.CancelTimeout < 0, c.ShutdownTimeout < 0:
		return errors.New("gateway: WriteTimeout, CancelTimeout and ShutdownTimeout must not be negative")
	case c.ReadTimeout < 10*time.Millisecond, c.ReadHeaderTimeout < 10*time.Millisecond, c.IdleTimeout < 10*time.Millisecond:
		return fmt.Errorf("gateway: ReadTimeout %s, ReadHeaderTimeout %s and IdleTimeout %s must be at least 10ms", c.ReadTimeout, c.ReadHeaderTimeout, c.IdleTimeout)
	case c.MaxStreamsPerToken < 1:
		return fmt.Errorf("gateway: MaxStreamsPerToken %d must be at least 1", c.MaxStreamsPerToken)
	case c.RateLimit <= 0 || c.RateBurst < 1:
		return fmt.Errorf("gateway: RateLimit %g must be above 0 and RateBurst %d at least 1", c.RateLimit, c.RateBurst)
	case c.NoAuth && c.NoAuthAnyAddr && len(c.AllowedHosts) == 0:
		return errors.New("gateway: NoAuthAnyAddr needs AllowedHosts: the host names the proxy in front forwards (an open gateway answering any Host can be reached by DNS rebinding)")
	case c.ListLimit < 1 || c.ListLimit > MaxListLimit:
		return fmt.Errorf("gateway: ListLimit %d must be between 1 and %d", c.ListLimit, MaxListLimit)
	case (c.TLSCertFile == "") != (c.TLSKeyFile == ""):
		return errors.New("gateway: TLSCertFile and TLSKeyFile go together: set both or neither")
	}
	for _, h := range c.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "/:@ ") && net.ParseIP(h) == nil {
			return fmt.Errorf("gateway: AllowedHosts: %q is not a host name (without scheme or port)", h)
		}
	}
	for _, o := range c.CORSOrigins {
		if o == "*" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return fmt.Errorf("gateway: CORSOrigins: %q is not an origin (want scheme://host[:port], or *)", o)
		}
	}
	on := len(c.Callbacks.Secret) > 0
	for _, t := range c.Tenants {
		on = on || len(t.CallbackSecretFiles)+len(t.CallbackSecrets) > 0
	}
	if err := c.Callbacks.validate(on); err != nil {
		return err
	}
	return c.validateTenants(host)
}

func (c Config) validateTenants(host string) error {
	if len(c.Tenants) == 0 {
		return errors.New("gateway: no tenant: give Tenants (tokens and NATS settings), or NoAuth with one tenant")
	}
	if c.NoAuth {
		if len(c.Tenants) != 1 || len(c.Tenants[0].TokenSHA256) != 0 {
			return errors.New("gateway: NoAuth serves exactly one tenant, without tokens")
		}
		if !c.NoAuthAnyAddr && !isLoopbackHost(host) {
			return fmt.Errorf("gateway: NoAuth on %s would open the API to the network: listen on a loopback address, or set NoAuthAnyAddr behind an authenticating proxy", c.Addr)
		}
	}
	names := map[string]bool{}
	hashes := map[string]string{}
	for i, t := range c.Tenants {
		if !tenantName.MatchString(t.Name) {
			return fmt.Errorf("gateway: Tenants[%d]: name %q must match [A-Za-z0-9_-]{1,64}", i, t.Name)
		}
		if names[t.Name] {
			return fmt.Errorf("gateway: tenant %q is named twice", t.Name)
		}
		names[t.Name] = true
		if _, err := events.NewNames(t.Prefix); err != nil {
			return fmt.Errorf("gateway: tenant %q: prefix: %w", t.Name, err)
		}
		if !c.NoAuth && len(t.TokenSHA256) == 0 {
			return fmt.Errorf("gateway: tenant %q has no token_sha256", t.Name)
		}
		if _, err := t.callbackKeys(); err != nil {
			return err
		}
		for j, h := range t.TokenSHA256 {
			n, err := normalizeHash(h)
			if err != nil {
				return fmt.Errorf("gateway: tenant %q: token_sha256[%d]: %w", t.Name, j, err)
			}
			if other, dup := hashes[n]; dup {
				return fmt.Errorf("gateway: the same token hash is given to tenants %q and %q", other, t.Name)
			}
			hashes[n] = t.Name
		}
	}
	return nil
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// hostAllowed reports whether a request's Host header names a host the
// gateway answers.
func (c Config) hostAllowed(hostport string) bool {
	if len(c.AllowedHosts) == 0 {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	for _, a := range c.AllowedHosts {
		if strings.EqualFold(a, host) {
			return true
		}
	}
	return false
}

// corsAllowed reports whether origin may call the API.
func (c Config) corsAllowed(origin string) bool {
	for _, o := range c.CORSOrigins {
		if o == "*" || strings.EqualFold(strings.TrimSuffix(o, "/"), origin) {
			return true
		}
	}
	return false
}
