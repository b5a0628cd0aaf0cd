package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/foundryq/foundryq/events/schema"
)

func TestSchemaCommand(t *testing.T) {
	ctx := context.Background()
	code, stdout, stderr := runCmd(t, ctx, "schema")
	if code != 0 {
		t.Fatalf("schema: code %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != len(schema.Names())+2 {
		t.Fatalf("listed %d schemas, want %d and the two documents:\n%s", len(lines), len(schema.Names()), stdout)
	}
	for _, want := range []string{"run-request", "event-run.completed", "run-state", "dead-letter-headers", "asyncapi", "openapi"} {
		if !strings.Contains(stdout, want+" ") {
			t.Errorf("listing lacks %s:\n%s", want, stdout)
		}
	}

	code, stdout, stderr = runCmd(t, ctx, "schema", "run-request")
	if code != 0 {
		t.Fatalf("schema run-request: code %d, stderr %q", code, stderr)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil || doc["title"] != "RunRequest" {
		t.Fatalf("schema run-request printed %v (%v):\n%s", doc["title"], err, stdout)
	}

	for name, want := range map[string]string{"asyncapi": "asyncapi: 3.0.0", "openapi": `"openapi": "3.1.0"`} {
		if code, stdout, stderr := runCmd(t, ctx, "schema", name); code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("schema %s: code %d, stderr %q, stdout lacks %s", name, code, stderr, want)
		}
	}

	if code, _, stderr := runCmd(t, ctx, "schema", "nope"); code != exitUsage || !strings.Contains(stderr, `no schema "nope"`) {
		t.Errorf("schema nope: code %d, stderr %q", code, stderr)
	}
	if code, _, _ := runCmd(t, ctx, "schema", "a", "b"); code != exitUsage {
		t.Errorf("schema a b: code %d, want %d", code, exitUsage)
	}
}
