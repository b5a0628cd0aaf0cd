package contract_test

import (
	"strings"
	"testing"

	"github.com/foundryq/foundryq/events/contract"
)

func load(t *testing.T) (*contract.Set, *contract.Recorder) {
	t.Helper()
	rec := contract.NewRecorder("")
	set, err := contract.LoadFS(schemaFS(), rec)
	if err != nil {
		t.Fatal(err)
	}
	return set, rec
}

func TestValidate(t *testing.T) {
	t.Parallel()
	set, rec := load(t)
	const ok = `{"run_id":"r1","seq":3,"type":"run.completed","time":"2026-01-02T03:04:05Z","response_id":"resp_1","status":"completed","usage":{"input_tokens":1,"output_tokens":2,"total_tokens":3}}`
	if err := set.ValidateJSON("run-event", []byte(ok)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"event-run.completed.json#/properties/status",
		"common.json#/$defs/usage/properties/total_tokens",
	} {
		if !strings.Contains(strings.Join(rec.Seen(), "\n"), want) {
			t.Errorf("seen lacks %s: %v", want, rec.Seen())
		}
	}
	for _, tc := range []struct{ name, schema, body, want string }{
		{"undeclared", "run-event", `{"run_id":"r1","seq":1,"type":"text.delta","time":"2026-01-02T03:04:05Z","text":"x","colour":"red"}`, "/colour"},
		{"undeclared nested", "run-event", strings.Replace(ok, `"total_tokens":3`, `"total_tokens":3,"gpu_seconds":1`, 1), "/usage/gpu_seconds"},
		{"missing", "run-event", `{"run_id":"r1","seq":1,"type":"text.delta","time":"2026-01-02T03:04:05Z"}`, "text"},
		{"bad enum", "cancel-reply", `{"run_id":"r1","result":"maybe"}`, "/result"},
		{"bad time", "run-event", strings.Replace(ok, "2026-01-02T03:04:05Z", "yesterday", 1), "/time"},
		{"refused by request", "run-request", `{"run_id":"r1","model":"m","input":"x","temperature":1}`, "temperature"},
		{"model and agent", "run-request", `{"run_id":"r1","model":"m","agent":{"name":"a"},"input":"x"}`, "'not' failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := set.ValidateJSON(tc.schema, []byte(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error about %s", err, tc.want)
			}
		})
	}
	// Maps and pass-through objects take any key.
	for _, body := range []string{
		`{"run_id":"r1","model":"m","input":[{"role":"user","content":"hi"}],"metadata":{"a":"b"},"tools":[{"type":"mcp","server_label":"s"}],"options":{"temperature":0.5}}`,
	} {
		if err := set.ValidateJSON("run-request", []byte(body)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}
