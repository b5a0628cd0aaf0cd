package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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
	}
}

func (e emulatorFlags) config(log zerolog.Logger) foundrytest.Config {
	return foundrytest.Config{
		APIKey:            *e.apiKey,
		DefaultTokens:     *e.tokens,
		DefaultTokenDelay: *e.tokenDelay,
		ResumeWindow:      *e.resumeWindow,
		KeepaliveInterval: *e.keepalive,
		Logger:            log,

		AcceptDeprecatedAgentField: *e.acceptAgentField,
	}
}

func runEmulator(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("emulator", "emulator [flags]")
	addr := f.String("addr", "FOUNDRYQ_EMULATOR_ADDR", "127.0.0.1:8089", "listen address")
	ef := addEmulatorFlags(f, 0)
	lf := addLogFlags(f, "console")
	log, err := parseCommand(f, lf, args, stdout, stderr)
	if err != nil {
		return err
	}
	cfg := ef.config(log)
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	emu, err := startEmulator(*addr, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Foundry emulator serving %s (stats at %s, throttle at %s)\n", emu.baseURL(),
		emu.url()+"/_emulator/stats", emu.url()+"/_emulator/throttle")
	<-ctx.Done()
	return emu.close()
}

// emulator is a foundrytest.Handler served over HTTP.
type emulator struct {
	h   *foundrytest.Handler
	srv *http.Server
	ln  net.Listener
	err chan error
}

func startEmulator(addr string, cfg foundrytest.Config) (*emulator, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("emulator: listen on %s: %w", addr, err)
	}
	h := foundrytest.NewHandler(cfg)
	e := &emulator{h: h, ln: ln, err: make(chan error, 1), srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	go func() { e.err <- e.srv.Serve(ln) }()
	return e, nil
}

func (e *emulator) url() string     { return "http://" + e.ln.Addr().String() }
func (e *emulator) baseURL() string { return e.url() + "/openai/v1/" }

// close stops generations, then the HTTP server.
func (e *emulator) close() error {
	e.h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := e.srv.Shutdown(ctx)
	if serr := <-e.err; !errors.Is(serr, http.ErrServerClosed) && serr != nil {
		err = serr
	}
	return err
}
