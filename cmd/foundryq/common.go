package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/secrets"
)

// natsAuthFlags are the credentials of a NATS connection.
type natsAuthFlags struct {
	user, password, creds, inboxPrefix *string
}

func addNATSAuthFlags(f *flags) natsAuthFlags {
	return natsAuthFlags{
		user:        f.String("nats-user", "NATS_USER", "", "NATS user (or in the URL: nats://USER:PASSWORD@host)"),
		password:    f.Secret("nats-password", "NATS_PASSWORD", "password of --nats-user"),
		creds:       f.String("nats-creds", "NATS_CREDS", "", "NATS credentials file (JWT + seed)", fileOrEmpty()),
		inboxPrefix: f.String("nats-inbox-prefix", "NATS_INBOX_PREFIX", "", "reply inbox prefix; default _INBOX.<user> when the user has a name (the deploy/ configs allow each user only its own)"),
	}
}

// options returns the connection options the flags ask for.
func (a natsAuthFlags) options() ([]nats.Option, error) {
	var opts []nats.Option
	switch {
	case *a.user != "":
		opts = append(opts, nats.UserInfo(*a.user, *a.password))
	case *a.password != "":
		return nil, usageError{errors.New("--nats-password (NATS_PASSWORD) needs --nats-user (NATS_USER)")}
	}
	if *a.creds != "" {
		opts = append(opts, nats.UserCredentials(*a.creds))
	}
	if *a.inboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(*a.inboxPrefix))
	}
	return opts, nil
}

// natsFlags are the settings every command that talks to NATS shares.
type natsFlags struct {
	url, prefix            *string
	auth                   natsAuthFlags
	tlsCA, tlsCert, tlsKey *string
}

func addNATSFlags(f *flags) natsFlags {
	return natsFlags{
		url:     f.String("nats-url", "NATS_URL", nats.DefaultURL, "NATS server URL(s), comma-separated; tls://host:port requires TLS", notEmpty("nats://HOST:PORT or tls://HOST:PORT, comma-separated")),
		auth:    addNATSAuthFlags(f),
		tlsCA:   f.String("nats-tls-ca", "NATS_TLS_CA", "", "CA certificate(s) (PEM) that sign the NATS server's certificate; turns TLS on", fileOrEmpty()),
		tlsCert: f.String("nats-tls-cert", "NATS_TLS_CERT", "", "client certificate (PEM) for NATS servers that verify clients (with --nats-tls-key)", fileOrEmpty()),
		tlsKey:  f.String("nats-tls-key", "NATS_TLS_KEY", "", "private key (PEM) of --nats-tls-cert", fileOrEmpty()),
		prefix:  f.String("prefix", "FOUNDRYQ_PREFIX", "foundryq", "subject prefix of the wire contract", validPrefix()),
	}
}

// options returns the connection options of the credentials and TLS flags.
func (n natsFlags) options() ([]nats.Option, error) {
	opts, err := n.auth.options()
	if err != nil {
		return nil, err
	}
	if (*n.tlsCert == "") != (*n.tlsKey == "") {
		return nil, usageError{errors.New("--nats-tls-cert (NATS_TLS_CERT) and --nats-tls-key (NATS_TLS_KEY) go together")}
	}
	if *n.tlsCA != "" {
		opts = append(opts, nats.RootCAs(*n.tlsCA))
	}
	if *n.tlsCert != "" {
		opts = append(opts, nats.ClientCert(*n.tlsCert, *n.tlsKey))
	}
	return opts, nil
}

// connect dials NATS. Every command reconnects after a lost connection; a
// worker also waits for a server that is not up yet, while the client
// commands fail at once with a hint. Errors never show a password or
// token of the URL (events.Connect).
func (n natsFlags) connect(name string, waitForServer bool) (*nats.Conn, error) {
	extra, err := n.options()
	if err != nil {
		return nil, err
	}
	opts := append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second), nats.Timeout(3 * time.Second)}, extra...)
	if waitForServer {
		opts = append(opts, nats.RetryOnFailedConnect(true))
	}
	nc, err := events.Connect(*n.url, opts...)
	if errors.Is(err, nats.ErrNoServers) {
		err = fmt.Errorf("%w (is a server running? try: go run ./cmd/foundryq dev)", err)
	}
	if err != nil {
		return nil, natsUnreachable{err}
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

// secretSettings are the settings whose values are credentials: --help
// never shows a value for them, and every value given (flag or
// environment) is scrubbed from stderr, where logs and errors go. For URLs
// (url true) the passwords and tokens in them are the secrets.
var secretSettings = []struct {
	flag, env string
	url       bool
}{
	{"nats-url", "NATS_URL", true},
	{"nats-password", "NATS_PASSWORD", false},
	{"foundry-api-key", "FOUNDRY_API_KEY", false},
	{"foundry-endpoint", "FOUNDRY_ENDPOINT", true},
	{"emulator-api-key", "FOUNDRYQ_EMULATOR_API_KEY", false},
	{"", "FOUNDRYQ_CONFORMANCE_API_KEY", false}, // foundryq conformance: read from the environment only
	{"callbacks-secret", "FOUNDRYQ_GATEWAY_CALLBACKS_SECRET", false},
	{"gateway-nats-password", "FOUNDRYQ_DEV_GATEWAY_NATS_PASSWORD", false},
}

// secretURLSetting reports whether the setting name holds URLs whose
// passwords and tokens are secrets.
func secretURLSetting(name string) bool {
	for _, s := range secretSettings {
		if s.flag == name && s.url {
			return true
		}
	}
	return false
}

// knownSecrets returns the secret values among the command line's flags
// and the environment.
func knownSecrets(args []string, lookupEnv func(string) (string, bool)) []string {
	var out []string
	add := func(v string, isURL bool) {
		if isURL {
			out = append(out, secrets.URLSecrets(v)...)
		} else if v != "" {
			out = append(out, v)
		}
	}
	for _, s := range secretSettings {
		if v, ok := lookupEnv(s.env); ok {
			add(v, s.url)
		}
		for i, a := range args {
			name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if s.flag == "" || !strings.HasPrefix(a, "-") || name != s.flag {
				continue
			}
			if !hasValue && i+1 < len(args) {
				value = args[i+1]
			}
			add(value, s.url)
		}
	}
	return out
}

// runIDArg is the single RUN_ID argument of a command.
func runIDArg(f *flags) (string, error) {
	if err := needArgs(f, 1, "one RUN_ID"); err != nil {
		return "", err
	}
	runID := f.Arg(0)
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
	return addLogFlagsLevel(f, defFormat, "info")
}

// addLogFlagsLevel is addLogFlags with another default level (LOG_LEVEL and
// --log-level still win).
func addLogFlagsLevel(f *flags, defFormat, defLevel string) logFlags {
	return logFlags{
		level:  f.String("log-level", "LOG_LEVEL", defLevel, "log level: debug, info, warn, error", oneOf("debug", "info", "warn", "error")),
		format: f.String("log-format", "LOG_FORMAT", defFormat, "log format: json, or console (human-readable, durations with units; coloured on a terminal only, never with NO_COLOR set)", oneOf("json", "console")),
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
		w = consoleWriter(w)
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
	if f.NArg() != n {
		return usageError{fmt.Errorf("%s: want %s (see foundryq %s --help)", f.fs.Name(), what, f.fs.Name())}
	}
	return nil
}
