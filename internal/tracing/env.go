package tracing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// ErrInvalidEnv reports an OTEL_* variable with a value foundryq does not
// accept; the message names the variable and the accepted values.
var ErrInvalidEnv = errors.New("tracing: invalid OTEL environment")

// Exporters foundryq can build from OTEL_TRACES_EXPORTER.
const (
	ExporterOTLP    = "otlp"    // OTLP over HTTP/protobuf (default) or gRPC
	ExporterConsole = "console" // spans as JSON lines on the given writer
	ExporterNone    = "none"
)

// Plan is what the environment asks for: no exporter means tracing is off.
type Plan struct {
	Exporters []string // ExporterOTLP and/or ExporterConsole
	Protocol  string   // OTLP protocol: "http/protobuf" or "grpc"
}

// Enabled reports whether any exporter is configured.
func (p Plan) Enabled() bool { return len(p.Exporters) > 0 }

// PlanFromEnv reads the standard variables through getenv:
//   - OTEL_SDK_DISABLED=true turns tracing off;
//   - OTEL_TRACES_EXPORTER: a comma-separated list of otlp, console, none;
//     unset, it is otlp when OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, and none otherwise;
//   - OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL:
//     http/protobuf (default) or grpc.
//
// The exporters read the other OTEL_EXPORTER_OTLP_* variables (headers,
// timeout, certificates) themselves, the SDK reads OTEL_TRACES_SAMPLER and
// OTEL_BSP_*, and the resource OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES.
func PlanFromEnv(getenv func(string) string) (Plan, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return Plan{}, nil
	}
	var p Plan
	list := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	if list == "" && (getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "") {
		list = ExporterOTLP
	}
	for _, e := range strings.Split(list, ",") {
		switch e = strings.ToLower(strings.TrimSpace(e)); e {
		case "", ExporterNone:
		case ExporterOTLP, ExporterConsole:
			p.Exporters = append(p.Exporters, e)
		default:
			return Plan{}, fmt.Errorf("%w: OTEL_TRACES_EXPORTER %q: want a comma-separated list of otlp, console, none", ErrInvalidEnv, e)
		}
	}
	p.Protocol = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	name := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	if p.Protocol == "" {
		p.Protocol, name = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL")), "OTEL_EXPORTER_OTLP_PROTOCOL"
	}
	switch p.Protocol {
	case "":
		p.Protocol = "http/protobuf"
	case "http/protobuf", "grpc":
	default:
		return Plan{}, fmt.Errorf("%w: %s %q: want http/protobuf or grpc", ErrInvalidEnv, name, p.Protocol)
	}
	return p, nil
}

// NewProvider builds a tracer provider for plan: a batch span processor
// per exporter, a resource with service.name service (OTEL_SERVICE_NAME
// and OTEL_RESOURCE_ATTRIBUTES take precedence), the sampler of
// OTEL_TRACES_SAMPLER (default: parent-based, always on). console spans are
// written to console. It returns nil when plan is not Enabled. Shut the
// provider down to flush its spans.
func NewProvider(ctx context.Context, plan Plan, service string, console io.Writer) (*sdktrace.TracerProvider, error) {
	if !plan.Enabled() {
		return nil, nil
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	for _, e := range plan.Exporters {
		var exp sdktrace.SpanExporter
		switch {
		case e == ExporterConsole:
			exp, err = stdouttrace.New(stdouttrace.WithWriter(console))
		case plan.Protocol == "grpc":
			exp, err = otlptracegrpc.New(ctx)
		default:
			exp, err = otlptracehttp.New(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("tracing: %s exporter: %w", e, err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	return sdktrace.NewTracerProvider(opts...), nil
}
