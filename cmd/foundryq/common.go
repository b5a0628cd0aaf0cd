package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// natsFlags are the settings every command that talks to NATS shares.
type natsFlags struct {
	url, creds, prefix *string
}

func addNATSFlags(f *flags) natsFlags {
	return natsFlags{
		url:    f.String("nats-url", "NATS_URL", nats.DefaultURL, "NATS server URL(s), comma-separated"),
		creds:  f.String("nats-creds", "NATS_CREDS", "", "NATS credentials file (JWT + seed)"),
		prefix: f.String("prefix", "FOUNDRYQ_PREFIX", "foundryq", "subject prefix of the wire contract"),
	}
}

// connect dials NATS. Every command reconnects after a lost connection; a
// worker also waits for a server that is not up yet, while the client
// commands fail at once with a hint.
func (n natsFlags) connect(name string, waitForServer bool) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second), nats.Timeout(3 * time.Second)}
	if *n.creds != "" {
		opts = append(opts, nats.UserCredentials(*n.creds))
	}
	if waitForServer {
		opts = append(opts, nats.RetryOnFailedConnect(true))
	}
	nc, err := nats.Connect(*n.url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w (is a server running? try: go run ./cmd/foundryq dev)", *n.url, err)
	}
	return nc, nil
}

// logFlags select the log level and format.
type logFlags struct {
	level, format *string
}

func addLogFlags(f *flags, defFormat string) logFlags {
	return logFlags{
		level:  f.String("log-level", "LOG_LEVEL", "info", "log level: debug, info, warn, error"),
		format: f.String("log-format", "LOG_FORMAT", defFormat, "log format: json or console"),
	}
}

func (l logFlags) logger(w io.Writer) (zerolog.Logger, error) {
	level, err := zerolog.ParseLevel(strings.ToLower(*l.level))
	if err != nil || level == zerolog.NoLevel {
		return zerolog.Nop(), usageError{fmt.Errorf("log level %q: want debug, info, warn or error", *l.level)}
	}
	switch *l.format {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000"}
	default:
		return zerolog.Nop(), usageError{fmt.Errorf("log format %q: want json or console", *l.format)}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger(), nil
}

// needArgs checks the positional arguments.
func needArgs(f *flags, n int, what string) error {
	if f.fs.NArg() != n {
		return usageError{fmt.Errorf("%s: want %s (see foundryq %s --help)", f.fs.Name(), what, f.fs.Name())}
	}
	return nil
}
