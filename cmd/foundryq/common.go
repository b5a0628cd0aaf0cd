package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/foundryq/foundryq/events"
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

// client connects (failing fast) and returns an events client on the
// connection, with the function that closes it.
func (n natsFlags) client(name string) (*events.Client, func(), error) {
	nc, err := n.connect(name, false)
	if err != nil {
		return nil, nil, err
	}
	c, err := events.NewClient(nc, events.ClientConfig{Prefix: *n.prefix})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return c, nc.Close, nil
}

// runIDArg is the single RUN_ID argument of a command.
func runIDArg(f *flags) (string, error) {
	if err := needArgs(f, 1, "one RUN_ID"); err != nil {
		return "", err
	}
	runID := f.fs.Arg(0)
	if !events.ValidRunID(runID) {
		return "", usageError{fmt.Errorf("%s: run id %q must match [A-Za-z0-9_-]{1,64}", f.fs.Name(), runID)}
	}
	return runID, nil
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

// parseCommand parses the flags of a command that takes no arguments and
// returns its logger.
func parseCommand(f *flags, lf logFlags, args []string, stdout, stderr io.Writer) (zerolog.Logger, error) {
	if err := f.parse(args, stdout); err != nil {
		return zerolog.Nop(), err
	}
	if err := needArgs(f, 0, "no arguments"); err != nil {
		return zerolog.Nop(), err
	}
	return lf.logger(stderr)
}

// needArgs checks the positional arguments.
func needArgs(f *flags, n int, what string) error {
	if f.fs.NArg() != n {
		return usageError{fmt.Errorf("%s: want %s (see foundryq %s --help)", f.fs.Name(), what, f.fs.Name())}
	}
	return nil
}
