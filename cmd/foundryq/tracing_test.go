package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/internal/natsembed"
)

// TestSubmitTraceparent: with OTEL_TRACES_EXPORTER=console, foundryq submit
// exports its span (to stderr) and the stored run request carries that
// span's W3C traceparent; an unknown exporter is a usage error naming the
// variable.
func TestSubmitTraceparent(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	t.Setenv("OTEL_SERVICE_NAME", "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := devstack.StartT(t, devstack.Config{NATS: natsembed.Config{Port: -1}})

	code, stdout, stderr := runCmd(t, ctx, "submit", "--nats-url", s.NATS.ClientURL(), "--model", "gpt-4o", "--input", "hi", "--run-id", "traced-cli")
	if code != 0 || strings.TrimSpace(stdout) != "traced-cli" {
		t.Fatalf("submit: code %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// The console exporter writes one JSON object per span.
	var span struct {
		Name        string
		SpanContext struct{ TraceID, SpanID string }
		Resource    []struct {
			Key   string
			Value struct{ Value any }
		}
	}
	dec := json.NewDecoder(strings.NewReader(stderr[strings.Index(stderr, "{"):]))
	for span.Name != "foundryq submit" {
		if err := dec.Decode(&span); err != nil {
			t.Fatalf("no foundryq submit span on stderr: %v\n%s", err, stderr)
		}
	}
	var service any
	for _, a := range span.Resource {
		if a.Key == "service.name" {
			service = a.Value.Value
		}
	}
	if service != "foundryq-submit" {
		t.Fatalf("service.name %v, want foundryq-submit", service)
	}

	js, err := jetstream.New(s.Conn)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, s.Client.Names().RunsStream())
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, s.Client.Names().RunSubject("traced-cli"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := msg.Header.Get("traceparent"), "00-"+span.SpanContext.TraceID+"-"+span.SpanContext.SpanID+"-01"; got != want {
		t.Fatalf("run request traceparent %q, want the submit span's %q", got, want)
	}

	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	if code, _, stderr := runCmd(t, ctx, "submit", "--nats-url", s.NATS.ClientURL(), "--model", "gpt-4o", "--input", "hi"); code != exitUsage ||
		!strings.Contains(stderr, "OTEL_TRACES_EXPORTER") {
		t.Fatalf("unknown exporter: code %d, stderr %q", code, stderr)
	}
}
