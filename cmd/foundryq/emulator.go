package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"

	"github.com/foundryq/foundryq/foundry/foundrytest"
)

// emulatorFlags are the settings of the Foundry emulator (shared by emulator
// and dev).
type emulatorFlags struct {
	apiKey           *string
	tokens           *int
	tokenDelay       *time.Duration
	resumeWindow     *time.Duration
	acceptAgentField *bool
	keepalive        *time.Duration
	recordTimes      *bool
	tokensPerMinute  *string
}

func addEmulatorFlags(f *flags, defDelay time.Duration) emulatorFlags {
	return emulatorFlags{
		apiKey:       f.String("emulator-api-key", "FOUNDRYQ_EMULATOR_API_KEY", "", "API key the emulator requires (empty: none)"),
		tokens:       f.Int("emulator-tokens", "FOUNDRYQ_EMULATOR_TOKENS", 20, "text tokens per response when the request has no emu_tokens metadata"),
		tokenDelay:   f.Duration("emulator-token-delay", "FOUNDRYQ_EMULATOR_TOKEN_DELAY", defDelay, "pause between tokens when the request has no emu_token_ms metadata"),
		resumeWindow: f.Duration("emulator-resume-window", "FOUNDRYQ_EMULATOR_RESUME_WINDOW", 5*time.Minute, "how long a background response can be re-streamed"),
		acceptAgentField: f.Bool("emulator-accept-agent-field", "FOUNDRYQ_EMULATOR_ACCEPT_AGENT_FIELD", false,
			`accept the deprecated "agent" request field (the service refuses it; pair with --agent-field agent)`),
		keepalive: f.Duration("emulator-keepalive", "FOUNDRYQ_EMULATOR_KEEPALIVE", 30*time.Second,
			"interval of keepalive events while response.created is held back (emu_created_ms)"),
		recordTimes: f.Bool("emulator-record-times", "FOUNDRYQ_EMULATOR_RECORD_TIMES", false,
			"keep each token's and tool call's time, served at /_emulator/records?run_prefix=P (16 bytes a token; for foundryq bench)"),
		tokensPerMinute: f.String("emulator-tokens-per-minute", "FOUNDRYQ_EMULATOR_TOKENS_PER_MINUTE", "",
			"a tokens-per-minute quota per deployment, as Azure enforces it (429 with retry-after once spent; x-ratelimit-remaining-tokens on every answer): DEPLOYMENT=N entries separated by commas (empty: no quota)",
			rule[string]{func(v string) bool { _, err := parseNamedCounts(v, validDeployment); return err == nil }, "DEPLOYMENT=N entries separated by commas (N at least 1)"}),
	}
}

func (e emulatorFlags) config(log zerolog.Logger) foundrytest.Config {
	return foundrytest.Config{
		APIKey:            *e.apiKey,
		DefaultTokens:     *e.tokens,
		DefaultTokenDelay: *e.tokenDelay,
		ResumeWindow:      *e.resumeWindow,
		KeepaliveInterval: *e.keepalive,
		RecordTimes:       *e.recordTimes,
		TokensPerMinute:   checked(parseNamedCounts(*e.tokensPerMinute, validDeployment)),
		Logger:            log,

		AcceptDeprecatedAgentField: *e.acceptAgentField,
	}
}

func runEmulator(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("emulator", "emulator [flags]")
	addr := f.String("addr", "FOUNDRYQ_EMULATOR_ADDR", "127.0.0.1:8089", "listen address")
	tlsCert := f.String("tls-cert", "FOUNDRYQ_EMULATOR_TLS_CERT", "",
		"TLS certificate file (PEM); with --tls-key the emulator serves HTTPS on --addr, offering HTTP/2 and HTTP/1.1 (ALPN), as Azure's endpoints do", fileOrEmpty())
	tlsKey := f.String("tls-key", "FOUNDRYQ_EMULATOR_TLS_KEY", "", "TLS private key file (PEM) of --tls-cert", fileOrEmpty())
	plainAddr := f.String("plain-addr", "FOUNDRYQ_EMULATOR_PLAIN_ADDR", "",
		"also serve the same emulator over plain HTTP (HTTP/1.1, and HTTP/2 without TLS) on this address, e.g. beside --tls-cert (empty: off)", hostPortOrEmpty())
	ef := addEmulatorFlags(f, 0)
	lf := addLogFlags(f, "console")
	log, err := parseCommand(f, lf, args, stdout, stderr)
	if err != nil {
		return err
	}
	if (*tlsCert == "") != (*tlsKey == "") {
		return usageError{errors.New("emulator: --tls-cert (FOUNDRYQ_EMULATOR_TLS_CERT) and --tls-key (FOUNDRYQ_EMULATOR_TLS_KEY) go together: set both or neither")}
	}
	cfg := ef.config(log)
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	var emu *foundrytest.Server
	if *tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			return usageError{fmt.Errorf("emulator: load TLS certificate %s and key %s: %w", *tlsCert, *tlsKey, err)}
		}
		emu, err = foundrytest.ListenTLS(*addr, cfg, cert)
		if err != nil {
			return fmt.Errorf("emulator: %w", asListenError(err, *addr, emulatorSetting))
		}
	} else if emu, err = foundrytest.Listen(*addr, cfg); err != nil {
		return fmt.Errorf("emulator: %w", asListenError(err, *addr, emulatorSetting))
	}
	defer emu.Close()
	fmt.Fprintf(stdout, "Foundry emulator serving %s (stats at %s, throttle at %s)\n", emu.BaseURL(),
		emu.URL()+"/_emulator/stats", emu.URL()+"/_emulator/throttle")
	if *plainAddr != "" {
		plain, err := emu.ListenPlain(*plainAddr)
		if err != nil {
			return fmt.Errorf("emulator: %w", asListenError(err, *plainAddr, emulatorPlainSetting))
		}
		fmt.Fprintf(stdout, "Foundry emulator also serving %s over plain HTTP\n", plain+"/openai/v1/")
	}
	<-ctx.Done()
	return nil
}
