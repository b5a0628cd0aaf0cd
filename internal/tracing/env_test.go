package tracing

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestPlanFromEnv(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		env       func(string) string
		exporters string
		protocol  string
		err       error
		errNames  string
	}{
		{name: "nothing set: off", env: env()},
		{name: "exporter none", env: env("OTEL_TRACES_EXPORTER", "none")},
		{name: "endpoint alone turns otlp on", env: env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"), exporters: "otlp", protocol: "http/protobuf"},
		{name: "traces endpoint alone", env: env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://collector:4318/v1/traces"), exporters: "otlp", protocol: "http/protobuf"},
		{name: "exporter none beats an endpoint", env: env("OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")},
		{name: "sdk disabled", env: env("OTEL_SDK_DISABLED", "true", "OTEL_TRACES_EXPORTER", "otlp")},
		{name: "console and otlp over grpc", env: env("OTEL_TRACES_EXPORTER", "console, otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"), exporters: "console,otlp", protocol: "grpc"},
		{name: "traces protocol wins", env: env("OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"), exporters: "otlp", protocol: "http/protobuf"},
		{name: "unknown exporter", env: env("OTEL_TRACES_EXPORTER", "jaeger"), err: ErrInvalidEnv, errNames: "OTEL_TRACES_EXPORTER"},
		{name: "unsupported protocol", env: env("OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"), err: ErrInvalidEnv, errNames: "OTEL_EXPORTER_OTLP_PROTOCOL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, err := PlanFromEnv(c.env)
			if !errors.Is(err, c.err) {
				t.Fatalf("error %v, want %v", err, c.err)
			}
			if err != nil {
				if !strings.Contains(err.Error(), c.errNames) {
					t.Fatalf("error %q does not name %s", err, c.errNames)
				}
				return
			}
			if got := strings.Join(p.Exporters, ","); got != c.exporters || p.Enabled() != (c.exporters != "") {
				t.Fatalf("exporters %q (enabled %v), want %q", got, p.Enabled(), c.exporters)
			}
			if p.Enabled() && p.Protocol != c.protocol {
				t.Fatalf("protocol %q, want %q", p.Protocol, c.protocol)
			}
		})
	}
}

// TestConsoleProvider: the console exporter writes the spans it ends, with
// the resource's service name, when the provider shuts down.
func TestConsoleProvider(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	tp, err := NewProvider(context.Background(), Plan{Exporters: []string{ExporterConsole}}, "foundryq-test", &out)
	if err != nil {
		t.Fatal(err)
	}
	_, span := Tracer(tp).Start(context.Background(), "console span")
	span.End()
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, `"console span"`) || !strings.Contains(s, "foundryq-test") {
		t.Fatalf("console output lacks the span or the service name:\n%s", s)
	}
	if tp, err := NewProvider(context.Background(), Plan{}, "x", &out); tp != nil || err != nil {
		t.Fatalf("a plan without exporters gave %v, %v; want no provider", tp, err)
	}
}
