package events_test

import (
	"testing"

	"github.com/foundryq/foundryq/events"
)

var benchRequest = []byte(`{"run_id":"run_0123456789abcdefghij","model":"gpt-4o-mini",
"input":[{"role":"user","content":"Summarise the attached report in three bullet points."}],
"instructions":"Be brief.","tools":[{"type":"mcp","server_label":"docs","server_url":"https://mcp.example/sse","require_approval":"never"}],
"metadata":{"team":"search","ticket":"T-1234"},"max_output_tokens":512,"timeout_seconds":600,"options":{"temperature":0.2}}`)

func BenchmarkDecodeRunRequest(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchRequest)))
	for b.Loop() {
		if _, err := events.DecodeRunRequest(benchRequest); err != nil {
			b.Fatal(err)
		}
	}
}
