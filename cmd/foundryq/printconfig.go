package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/foundryq/foundryq/internal/secrets"
	"github.com/foundryq/foundryq/internal/tracing"
)

// printConfig prints every setting's effective value (command line over
// environment over default) and where it came from; secrets are redacted.
func (f *flags) printConfig(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SETTING\tENVIRONMENT\tVALUE\tFROM")
	for _, e := range f.entries {
		if e.name == "print-config" {
			continue
		}
		env := e.env
		if env == "" {
			env = "-"
		}
		from := map[string]string{"the command line": "flag", "the environment": "env", "the default": "default"}[f.source(e)]
		fmt.Fprintf(tw, "--%s\t%s\t%s\t%s\n", e.name, env, f.shown(e), from)
	}
	return tw.Flush()
}

// printTracing prints whether tracing is on (tracing.PlanFromEnv) and the
// OTEL_* variables set in environ: headers (credentials, often) redacted,
// passwords and tokens in endpoint URLs too.
func printTracing(w io.Writer, environ []string) error {
	env := map[string]string{}
	var names []string
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "OTEL_") {
			env[k] = v
			names = append(names, k)
		}
	}
	slices.Sort(names)
	plan, err := tracing.PlanFromEnv(func(k string) string { return env[k] })
	switch {
	case err != nil:
		fmt.Fprintf(w, "\ntracing: invalid: %v\n", err)
	case plan.Enabled():
		fmt.Fprintf(w, "\ntracing: on: %s (OTLP protocol %s)\n", strings.Join(plan.Exporters, ", "), plan.Protocol)
	default:
		fmt.Fprintln(w, "\ntracing: off (no OTEL_* exporter)")
	}
	for _, k := range names {
		v := env[k]
		switch {
		case strings.HasSuffix(k, "_HEADERS") && v != "":
			v = "[redacted]"
		case strings.Contains(k, "ENDPOINT"):
			v = secrets.RedactURLs(v)
		}
		fmt.Fprintf(w, "%s=%s\n", k, v)
	}
	return nil
}
