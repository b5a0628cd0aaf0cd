package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
)

// --print-config: every setting with its effective value and where it came
// from (flag over environment over default), secrets redacted, without
// connecting to anything.
func TestWorkerPrintConfig(t *testing.T) {
	t.Setenv("FOUNDRY_API_KEY", "printSecret1")
	t.Setenv("NATS_PASSWORD", "printSecret2")
	t.Setenv("NATS_URL", "nats://w:printSecret3@127.0.0.1:"+strconv.Itoa(freePort(t))) // nothing listens: no connection is made
	t.Setenv("FOUNDRYQ_CONCURRENCY", "8")
	t.Setenv("FOUNDRYQ_ACK_WAIT", "40s")
	t.Setenv("NATS_USER", "worker")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otel:printSecret4@collector:4318")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer printSecret5")
	code, stdout, stderr := runCmd(t, context.Background(), "worker", "--foundry-endpoint", "http://127.0.0.1:8089/openai/v1/",
		"--ack-wait", "45s", "--worker-id", "w-7", "--print-config")
	if code != 0 {
		t.Fatalf("--print-config: exit %d: %s", code, stderr)
	}
	table, tracing, _ := strings.Cut(stdout, "\n\n")
	rows := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(table), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) != 4 {
			t.Fatalf("row %q: want SETTING ENVIRONMENT VALUE FROM", l)
		}
		rows[f[0]] = f[1:]
	}
	for setting, want := range map[string][]string{
		"--foundry-endpoint":            {"FOUNDRY_ENDPOINT", "http://127.0.0.1:8089/openai/v1/", "flag"},
		"--concurrency":                 {"FOUNDRYQ_CONCURRENCY", "8", "env"},
		"--ack-wait":                    {"FOUNDRYQ_ACK_WAIT", "45s", "flag"}, // the flag over the environment
		"--worker-id":                   {"FOUNDRYQ_WORKER_ID", "w-7", "flag"},
		"--max-deliver":                 {"FOUNDRYQ_MAX_DELIVER", "10", "default"},
		"--max-ack-pending":             {"FOUNDRYQ_MAX_ACK_PENDING", "10000", "default"},
		"--state-ttl":                   {"FOUNDRYQ_STATE_TTL", "168h0m0s", "default"},
		"--default-timeout":             {"FOUNDRYQ_DEFAULT_TIMEOUT", "1h0m0s", "default"}, // every run ends
		"--cancel-confirm-timeout":      {"FOUNDRYQ_CANCEL_CONFIRM_TIMEOUT", "10m0s", "default"},
		"--foundry-stream-idle-timeout": {"FOUNDRY_STREAM_IDLE_TIMEOUT", "1m30s", "default"},
		"--foundry-api-key":             {"FOUNDRY_API_KEY", "[redacted]", "env"},
		"--nats-password":               {"NATS_PASSWORD", "[redacted]", "env"},
		"--nats-user":                   {"NATS_USER", "worker", "env"},
		"--foundry-scope":               {"FOUNDRY_SCOPE", `""`, "default"},
	} {
		if got := rows[setting]; strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: %v, want %v", setting, got, want)
		}
	}
	if got := rows["--nats-url"]; len(got) != 3 || !strings.Contains(got[1], "w:REDACTED@127.0.0.1:") || got[2] != "env" {
		t.Errorf("--nats-url: %v, want the URL with its password redacted, from env", got)
	}
	for _, want := range []string{"tracing: on: otlp (OTLP protocol http/protobuf)\n", "OTEL_EXPORTER_OTLP_ENDPOINT=https://otel:REDACTED@collector:4318\n", "OTEL_EXPORTER_OTLP_HEADERS=[redacted]\n"} {
		if !strings.Contains(tracing, want) {
			t.Errorf("--print-config tracing part lacks %q:\n%s", want, tracing)
		}
	}
	for _, secret := range []string{"printSecret1", "printSecret2", "printSecret3", "printSecret4", "printSecret5"} {
		if strings.Contains(stdout+stderr, secret) {
			t.Errorf("--print-config shows %s:\n%s", secret, stdout)
		}
	}
	// Every worker setting is listed.
	f := newFlags("worker", "")
	addNATSFlags(f)
	addWorkerFlags(f, true)
	for _, e := range f.entries {
		if _, ok := rows["--"+e.name]; !ok {
			t.Errorf("--print-config does not list --%s", e.name)
		}
	}
}

// Every setting is checked at start; the error names the setting, its
// environment variable, the value and where it came from, and what is
// accepted.
func TestWorkerSettingsValidated(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	endpoint := []string{"--foundry-endpoint", "http://127.0.0.1:8089/openai/v1/"}
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		want []string // in stderr; none: valid
	}{
		{name: "valid", args: []string{"--nats-tls-ca", file, "--event-interval", "-1s", "--cancel-audit-delay", "-1s", "--http-addr", ""}},
		{name: "concurrency 0", args: []string{"--concurrency", "0"}, want: []string{"--concurrency (FOUNDRYQ_CONCURRENCY) 0 from the command line: want an integer of at least 1"}},
		{name: "concurrency from env", env: map[string]string{"FOUNDRYQ_CONCURRENCY": "-3"}, want: []string{"--concurrency (FOUNDRYQ_CONCURRENCY) -3 from the environment: want an integer of at least 1"}},
		{name: "replicas", args: []string{"--replicas", "6"}, want: []string{"--replicas (FOUNDRYQ_REPLICAS) 6", "want an integer from 1 to 5"}},
		{name: "max deliver", args: []string{"--max-deliver", "0"}, want: []string{"--max-deliver (FOUNDRYQ_MAX_DELIVER) 0", "at least 1"}},
		{name: "max ack pending 0", args: []string{"--max-ack-pending", "0"}, want: []string{"--max-ack-pending (FOUNDRYQ_MAX_ACK_PENDING) 0", "-1 (no limit) or an integer of at least 1"}},
		{name: "max ack pending -2", args: []string{"--max-ack-pending", "-2"}, want: []string{"--max-ack-pending (FOUNDRYQ_MAX_ACK_PENDING) -2", "-1 (no limit)"}},
		{name: "default timeout", args: []string{"--default-timeout", "-1s"}, want: []string{"--default-timeout (FOUNDRYQ_DEFAULT_TIMEOUT) -1s", "a duration of 0 (none) or more"}},
		{name: "event interval 0", args: []string{"--event-interval", "0"}, want: []string{"--event-interval (FOUNDRYQ_EVENT_INTERVAL) 0s", "a positive duration up to 5s, or a negative one for off"}},
		{name: "event interval too long", args: []string{"--event-interval", "6s"}, want: []string{"--event-interval", "up to 5s"}},
		{name: "cancel audit 0", args: []string{"--cancel-audit-delay", "0"}, want: []string{"--cancel-audit-delay (FOUNDRYQ_CANCEL_AUDIT_DELAY) 0s", "a negative one for off"}},
		{name: "cancel confirm", args: []string{"--cancel-confirm-timeout", "0"}, want: []string{"--cancel-confirm-timeout (FOUNDRYQ_CANCEL_CONFIRM_TIMEOUT)", "a positive duration"}},
		{name: "shutdown", args: []string{"--shutdown-timeout", "0"}, want: []string{"--shutdown-timeout (FOUNDRYQ_SHUTDOWN_TIMEOUT)", "a positive duration"}},
		{name: "foreground poll", args: []string{"--foreground-poll-timeout", "-1m"}, want: []string{"--foreground-poll-timeout (FOUNDRYQ_FOREGROUND_POLL_TIMEOUT)", "a positive duration"}},
		{name: "retry delay", args: []string{"--retry-delay", "0"}, want: []string{"--retry-delay (FOUNDRYQ_RETRY_DELAY)", "a positive duration"}},
		{name: "ack wait", args: []string{"--ack-wait", "500ms"}, want: []string{"--ack-wait (FOUNDRYQ_ACK_WAIT) 500ms", "at least 1s"}},
		{name: "events max age", args: []string{"--events-max-age", "0"}, want: []string{"--events-max-age (FOUNDRYQ_EVENTS_MAX_AGE)", "at least 1s"}},
		{name: "state ttl", args: []string{"--state-ttl", "1h"}, want: []string{"--state-ttl (FOUNDRYQ_STATE_TTL) 1h0m0s", "at least --events-max-age (24h0m0s)"}},
		{name: "worker id", args: []string{"--worker-id", "a.b"}, want: []string{"--worker-id (FOUNDRYQ_WORKER_ID) a.b", "[A-Za-z0-9_-]{1,64}"}},
		{name: "prefix", args: []string{"--prefix", "a..b"}, want: []string{"--prefix (FOUNDRYQ_PREFIX) a..b", "NATS subject tokens"}},
		{name: "http addr", args: []string{"--http-addr", "9090"}, want: []string{"--http-addr (FOUNDRYQ_HTTP_ADDR) 9090", "HOST:PORT or :PORT"}},
		{name: "log level", args: []string{"--log-level", "loud"}, want: []string{"--log-level (LOG_LEVEL) loud", "one of debug, info, warn, error"}},
		{name: "log format", env: map[string]string{"LOG_FORMAT": "xml"}, want: []string{"--log-format (LOG_FORMAT) xml from the environment", "one of json, console"}},
		{name: "agent field", args: []string{"--agent-field", "a b"}, want: []string{`--agent-field (FOUNDRY_AGENT_FIELD) "a b"`, "a JSON field name"}},
		{name: "scope", args: []string{"--foundry-scope", "cognitive"}, want: []string{"--foundry-scope (FOUNDRY_SCOPE) cognitive", "an absolute URL"}},
		{name: "tls ca", args: []string{"--nats-tls-ca", file + ".missing"}, want: []string{"--nats-tls-ca (NATS_TLS_CA)", "the path of a readable file"}},
		{name: "creds", args: []string{"--nats-creds", file + ".missing"}, want: []string{"--nats-creds (NATS_CREDS)", "the path of a readable file"}},
		{name: "nats url", args: []string{"--nats-url", ""}, want: []string{`--nats-url (NATS_URL) ""`, "nats://HOST:PORT"}},
		{name: "secrets dir", args: []string{"--secrets-dir", file}, want: []string{"--secrets-dir (FOUNDRYQ_SECRETS_DIR)", "an existing directory"}},
		{name: "tool settings", args: []string{"--tool-timeout", "5s", "--tool-timeouts", "get_weather=5s, search=2m", "--tool-idempotent", "get_weather,search", "--serve-tools=false"}},
		{name: "tool timeout", args: []string{"--tool-timeout", "0"}, want: []string{"--tool-timeout (FOUNDRYQ_TOOL_TIMEOUT) 0s", "a positive duration"}},
		{name: "tool timeouts", args: []string{"--tool-timeouts", "get_weather=5s,search"}, want: []string{"--tool-timeouts (FOUNDRYQ_TOOL_TIMEOUTS) get_weather=5s,search from the command line", "NAME=DURATION entries separated by commas"}},
		{name: "tool timeouts zero", env: map[string]string{"FOUNDRYQ_TOOL_TIMEOUTS": "get_weather=0s"}, want: []string{"--tool-timeouts (FOUNDRYQ_TOOL_TIMEOUTS) get_weather=0s from the environment", "DURATION positive"}},
		{name: "tool idempotent", args: []string{"--tool-idempotent", "get.weather"}, want: []string{"--tool-idempotent (FOUNDRYQ_TOOL_IDEMPOTENT) get.weather", "tool names of [A-Za-z0-9_-]{1,64}"}},
		{name: "tool cancel grace", args: []string{"--tool-cancel-grace", "0"}, want: []string{"--tool-cancel-grace (FOUNDRYQ_TOOL_CANCEL_GRACE) 0s", "a positive duration"}},
		{name: "serve tools", env: map[string]string{"FOUNDRYQ_SERVE_TOOLS": "maybe"}, want: []string{`FOUNDRYQ_SERVE_TOOLS="maybe": not a boolean`}},
		{name: "two at once", args: []string{"--concurrency", "0", "--replicas", "0"}, want: []string{"--concurrency (FOUNDRYQ_CONCURRENCY)", "--replicas (FOUNDRYQ_REPLICAS)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			args := append(append([]string{"worker"}, endpoint...), append(c.args, "--print-config")...)
			code, _, stderr := runCmd(t, context.Background(), args...)
			if len(c.want) == 0 {
				if code != 0 {
					t.Fatalf("exit %d: %s", code, stderr)
				}
				return
			}
			if code != exitUsage {
				t.Fatalf("exit %d, want %d (usage): %s", code, exitUsage, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("error %q does not say %q", strings.TrimSpace(stderr), w)
				}
			}
		})
	}
}

// The tool settings reach the worker's configuration.
func TestWorkerToolSettings(t *testing.T) {
	f := newFlags("worker", "")
	wf := addWorkerFlags(f, true)
	if err := f.parse([]string{"--tool-timeout", "30s", "--tool-timeouts", "get_weather=5s, search=2m", "--tool-idempotent", " get_weather ,search",
		"--tool-cancel-grace", "2s", "--serve-tools=false"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	cfg := wf.config("", nil)
	if cfg.ToolTimeout != 30*time.Second || len(cfg.ToolTimeouts) != 2 || cfg.ToolTimeouts["get_weather"] != 5*time.Second ||
		cfg.ToolTimeouts["search"] != 2*time.Minute || !slices.Equal(cfg.IdempotentTools, []string{"get_weather", "search"}) ||
		cfg.ToolCancelGrace != 2*time.Second || !cfg.DisableServedTools {
		t.Fatalf("config %+v", cfg)
	}
	def := addWorkerFlags(newFlags("worker", ""), true).config("", nil)
	if def.ToolTimeout != consumer.DefaultToolTimeout || def.ToolTimeouts != nil || def.IdempotentTools != nil || def.ToolCancelGrace != time.Second || def.DisableServedTools {
		t.Fatalf("defaults %+v", def)
	}
}

// --foundry-stream-obfuscation (FOUNDRY_STREAM_OBFUSCATION) reaches the
// Foundry client: off by default, the worker's creates ask for no
// obfuscation (stream_options.include_obfuscation false) and the emulator
// pads no delta; turned on by the flag or the variable, they do not ask,
// and every delta carries its padding.
func TestWorkerStreamObfuscationSetting(t *testing.T) {
	srv := foundrytest.NewServer(foundrytest.Config{APIKey: "obf-key"})
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		name string
		env  string // FOUNDRY_STREAM_OBFUSCATION; "-": unset
		args []string
		want bool
	}{
		{"default", "-", nil, false},
		{"flag", "-", []string{"--foundry-stream-obfuscation"}, true},
		{"environment", "true", nil, true},
		{"flag over environment", "true", []string{"--foundry-stream-obfuscation=false"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.env == "-" {
				t.Setenv("FOUNDRY_STREAM_OBFUSCATION", "")
				os.Unsetenv("FOUNDRY_STREAM_OBFUSCATION")
			} else {
				t.Setenv("FOUNDRY_STREAM_OBFUSCATION", c.env)
			}
			f := newFlags("worker", "")
			wf := addWorkerFlags(f, true)
			if err := f.parse(c.args, io.Discard); err != nil {
				t.Fatal(err)
			}
			cfg := wf.foundryConfig(srv.BaseURL(), "obf-key")
			if cfg.IncludeObfuscation != c.want {
				t.Fatalf("foundry.Config.IncludeObfuscation = %t, want %t", cfg.IncludeObfuscation, c.want)
			}
			fc, err := foundry.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(fc.CloseIdleConnections)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			runID := "obf-" + strings.ReplaceAll(c.name, " ", "-")
			s, err := fc.Create(ctx, foundry.CreateRequest{Model: "gpt-test", Input: json.RawMessage(`"hi"`),
				Metadata: map[string]string{"run_id": runID, "emu_tokens": "3"}})
			if err != nil {
				t.Fatal(err)
			}
			deltas, padded := 0, 0
			for s.Next() {
				if ev := s.Event(); ev.Type == foundry.EventOutputTextDelta {
					deltas++
					if strings.Contains(string(ev.Raw), `"obfuscation":"`) {
						padded++
					}
				}
			}
			wantPadded := 0
			if c.want {
				wantPadded = deltas
			}
			if s.Err() != nil || deltas != 3 || padded != wantPadded {
				t.Fatalf("stream: err %v, %d deltas, %d padded; want padded %t", s.Err(), deltas, padded, c.want)
			}
			body := string(srv.CreateRequests(runID)[0])
			if asked := strings.Contains(body, `"include_obfuscation":false`); asked == c.want {
				t.Fatalf("create body %s: asks for no obfuscation %t, want %t", body, asked, !c.want)
			}
		})
	}
}

// --max-ack-pending (FOUNDRYQ_MAX_ACK_PENDING) reaches the provisioning:
// the runs the whole fleet may run at once, which the job consumers hold
// (each streaming run holds its job unacked). The scale phase of the bench
// found that with no setting for it a fleet never ran more than 10,000 runs
// at once, whatever its workers.
func TestWorkerMaxAckPendingSetting(t *testing.T) {
	names, err := events.NewNames("")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want int
	}{
		{nil, events.DefaultMaxAckPending},
		{[]string{"--max-ack-pending", "50000"}, 50000},
		{[]string{"--max-ack-pending", "-1"}, -1},
	} {
		f := newFlags("worker", "")
		wf := addWorkerFlags(f, true)
		if err := f.parse(c.args, io.Discard); err != nil {
			t.Fatal(err)
		}
		cfg := wf.config("", nil)
		if got := cfg.Provision.MaxAckPending; got != c.want {
			t.Errorf("%v: Provision.MaxAckPending %d, want %d", c.args, got, c.want)
		}
		if got := events.LaneConsumerConfig(names, cfg.Provision, events.Fairness{Priority: events.PriorityNormal, Key: "k"}).MaxAckPending; got != c.want {
			t.Errorf("%v: lane consumer MaxAckPending %d, want %d", c.args, got, c.want)
		}
	}
}
