// Package natsembed starts an embedded nats-server with JetStream, for tests
// and for `foundryq dev`, either with defaults (no authentication) or from a
// nats-server configuration file such as deploy/nats/nats-server.conf, with
// its listen address, store directory and monitoring port replaced.
//
// The server never installs signal handlers (NoSigs) and never uses the
// stock logger, whose Fatalf calls os.Exit: log lines go to the zerolog
// logger in Config, or nowhere.
package natsembed

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/foundryq/foundryq/internal/natsguard"
)

// Config configures an embedded server. The zero value starts a server on a
// random loopback port with JetStream in a temporary directory.
type Config struct {
	// Host is the interface to listen on. Default "127.0.0.1".
	Host string
	// Port is the client port. 0 or -1 picks a free port; foundryq dev passes 4222.
	Port int
	// StoreDir is the JetStream store directory. Default: a new temporary
	// directory that Shutdown removes.
	StoreDir string
	// InProcess starts the server with no TCP listener: clients connect
	// through Connect (nats.InProcessServer) and ClientURL returns "".
	InProcess bool
	// ServerName is the server's name. Default "foundryq-embedded".
	ServerName string
	// ReadyTimeout bounds the wait for the server to accept connections.
	// Default 10s.
	ReadyTimeout time.Duration
	// Logger receives the server's log lines (Fatalf is logged at error
	// level and never exits). Nil discards them.
	Logger *zerolog.Logger
	// Debug enables the server's debug lines on Logger. Default off.
	Debug bool
	// MaxPayload is the largest message the server accepts, in bytes.
	// Default 0: the server's default (1 MiB), or the config file's.
	MaxPayload int32
	// ConfigFile, if set, is a nats-server configuration file to start
	// from (parsed by nats-server itself, environment variables and
	// includes resolved as nats-server does), e.g. one with accounts,
	// users and permissions. Host, Port, StoreDir and InProcess above
	// replace its listen address and store directory; its monitoring port,
	// cluster and leaf node listeners are turned off, and JetStream is on.
	// Its server_name is kept unless ServerName is set.
	ConfigFile string
	// MaxStore caps JetStream's file storage, in bytes (max_file_store):
	// once the streams hold that much, JetStream refuses writes. Default
	// 0: the server's default (most of the disk).
	MaxStore int64
}

func (c Config) withDefaults() Config {
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	if c.Port == 0 {
		c.Port = server.RANDOM_PORT
	}
	if c.ServerName == "" && c.ConfigFile == "" {
		c.ServerName = "foundryq-embedded"
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 10 * time.Second
	}
	return c
}

func (c Config) validate() error {
	if c.Port < -1 || c.Port > 65535 {
		return fmt.Errorf("natsembed: Port %d out of range (0 or -1 for random, else 1-65535)", c.Port)
	}
	if c.MaxStore < 0 {
		return fmt.Errorf("natsembed: MaxStore %d must not be negative", c.MaxStore)
	}
	if c.ReadyTimeout < 0 {
		return fmt.Errorf("natsembed: ReadyTimeout %s must be positive", c.ReadyTimeout)
	}
	return nil
}

// Server is a running embedded nats-server.
type Server struct {
	srv       *server.Server
	opts      *server.Options // what srv was started with, for Restart
	cfg       Config
	inProcess bool
	port      int // the TCP port it listens on
	storeDir  string
	tempDir   string // removed by Shutdown when set
}

// Start starts a server and waits until it accepts connections (with
// JetStream ready) or Config.ReadyTimeout passes.
func Start(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{inProcess: cfg.InProcess, cfg: cfg}
	storeDir := cfg.StoreDir
	if storeDir == "" {
		dir, err := os.MkdirTemp("", "foundryq-nats-*")
		if err != nil {
			return nil, fmt.Errorf("natsembed: create store dir: %w", err)
		}
		storeDir, s.tempDir = dir, dir
	}
	s.storeDir = storeDir
	opts := &server.Options{}
	if cfg.ConfigFile != "" {
		fopts, err := server.ProcessConfigFile(cfg.ConfigFile)
		if err != nil {
			s.cleanup()
			return nil, fmt.Errorf("natsembed: config file: %w", err)
		}
		// An empty password variable gives a user without a password:
		// refuse it as the NATS image does.
		if err := natsguard.CheckFile(cfg.ConfigFile); err != nil {
			s.cleanup()
			return nil, fmt.Errorf("natsembed: %w", err)
		}
		opts = fopts
		// Listeners the file may open besides the client port.
		opts.HTTPPort, opts.HTTPSPort = 0, 0
		opts.Cluster.Port, opts.LeafNode.Port, opts.Websocket.Port, opts.MQTT.Port = 0, 0, 0, 0
	}
	if cfg.ServerName != "" {
		opts.ServerName = cfg.ServerName
	}
	if cfg.MaxPayload != 0 {
		opts.MaxPayload = cfg.MaxPayload
	}
	if cfg.MaxStore != 0 {
		opts.JetStreamMaxStore = cfg.MaxStore
	}
	opts.Host, opts.Port, opts.DontListen = cfg.Host, cfg.Port, cfg.InProcess
	opts.JetStream, opts.StoreDir = true, storeDir
	opts.NoSigs, opts.NoLog, opts.Debug = true, cfg.Logger == nil, cfg.Debug
	if err := s.start(opts); err != nil {
		s.Shutdown()
		return nil, err
	}
	return s, nil
}

func (s *Server) start(opts *server.Options) error {
	srv, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("natsembed: new server: %w", err)
	}
	s.srv, s.opts = srv, opts
	if s.cfg.Logger != nil {
		srv.SetLoggerV2(zerologAdapter{l: s.cfg.Logger.With().Str("component", "nats-server").Logger()}, s.cfg.Debug, false, false)
	}
	go srv.Start()
	if !srv.ReadyForConnections(s.cfg.ReadyTimeout) {
		return fmt.Errorf("natsembed: server not ready after %s (port %d in use?)", s.cfg.ReadyTimeout, opts.Port)
	}
	if !srv.JetStreamEnabled() {
		return errors.New("natsembed: JetStream did not start (store dir " + s.storeDir + ")")
	}
	if addr, ok := srv.Addr().(*net.TCPAddr); ok {
		s.port = addr.Port
	}
	return nil
}

// Stop stops the server as an outage would, keeping its store: clients
// see the connection drop and reconnect after Restart.
func (s *Server) Stop() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}

// Restart starts a stopped server again on the same port with the same
// store, as after an outage. Only for servers with a TCP listener.
func (s *Server) Restart() error {
	if s.inProcess {
		return errors.New("natsembed: Restart needs a TCP listener")
	}
	opts := s.opts.Clone()
	opts.Port = s.port // a random port stays the same across the restart
	return s.start(opts)
}

// ClientURL returns the nats:// URL clients connect to, or "" for an
// in-process server.
func (s *Server) ClientURL() string {
	if s.inProcess {
		return ""
	}
	return s.srv.ClientURL()
}

// NATS returns the underlying nats-server (for tests that need more).
func (s *Server) NATS() *server.Server { return s.srv }

// StoreDir returns the store directory the server was given (JetStream
// keeps its files in a "jetstream" directory below it).
func (s *Server) StoreDir() string { return s.storeDir }

// Connect opens a client connection to the server (in process when the
// server has no listener). Options are applied after the defaults.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	all := []nats.Option{nats.Name("foundryq-natsembed")}
	url := s.ClientURL()
	if s.inProcess {
		all = append(all, nats.InProcessServer(s.srv))
	}
	all = append(all, opts...)
	nc, err := nats.Connect(url, all...)
	if err != nil {
		return nil, fmt.Errorf("natsembed: connect: %w", err)
	}
	return nc, nil
}

// Shutdown stops the server, waits until it has stopped, and removes the
// temporary store directory if Start created one. It is safe to call twice.
func (s *Server) Shutdown() {
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	}
	s.cleanup()
}

func (s *Server) cleanup() {
	if s.tempDir != "" {
		_ = os.RemoveAll(s.tempDir)
		s.tempDir = ""
	}
}

// zerologAdapter implements server.Logger; Fatalf logs and never exits.
type zerologAdapter struct{ l zerolog.Logger }

func (z zerologAdapter) Noticef(format string, v ...any) { z.l.Info().Msgf(format, v...) }
func (z zerologAdapter) Warnf(format string, v ...any)   { z.l.Warn().Msgf(format, v...) }
func (z zerologAdapter) Fatalf(format string, v ...any)  { z.l.Error().Msgf(format, v...) }
func (z zerologAdapter) Errorf(format string, v ...any)  { z.l.Error().Msgf(format, v...) }
func (z zerologAdapter) Debugf(format string, v ...any)  { z.l.Debug().Msgf(format, v...) }
func (z zerologAdapter) Tracef(format string, v ...any)  { z.l.Trace().Msgf(format, v...) }
