package main

import (
	"io"

	"github.com/rs/zerolog"
	"testing"
	"time"

	"github.com/foundryq/foundryq/consumer"
)

// The fleet-wide limits reach the worker's configuration, with their
// defaults when not given, and bad entries are refused.
func TestWorkerLimitSettings(t *testing.T) {
	f := newFlags("worker", "")
	wf := addWorkerFlags(f, true)
	if err := f.parse([]string{"--cap-per-key", "3", "--cap", "tenant-a=10, batch=1", "--slot-lease", "10s", "--cap-retry-delay", "500ms",
		"--tokens-per-minute", "gpt-4o=150000,agent:helper=9000", "--default-output-tokens", "400"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	cfg := wf.config("", nil)
	if cfg.CapPerKey != 3 || len(cfg.Caps) != 2 || cfg.Caps["tenant-a"] != 10 || cfg.Caps["batch"] != 1 || cfg.SlotLease != 10*time.Second ||
		cfg.CapRetryDelay != 500*time.Millisecond || cfg.TokensPerMinute["gpt-4o"] != 150000 || cfg.TokensPerMinute["agent:helper"] != 9000 ||
		cfg.DefaultOutputTokens != 400 {
		t.Fatalf("config %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	def := addWorkerFlags(newFlags("worker", ""), true).config("", nil)
	if def.CapPerKey != 0 || def.Caps != nil || def.TokensPerMinute != nil || def.SlotLease != consumer.DefaultSlotLease ||
		def.DefaultOutputTokens != consumer.DefaultOutputTokens {
		t.Fatalf("defaults %+v", def)
	}
	for _, bad := range [][]string{
		{"--cap", "tenant.a=2"},
		{"--cap", "tenant-a=0"},
		{"--cap", "tenant-a"},
		{"--cap-per-key", "-1"},
		{"--slot-lease", "500ms"},
		{"--tokens-per-minute", "gpt-4o=lots"},
		{"--tokens-per-minute", "agent:=5"},
	} {
		f := newFlags("worker", "")
		addWorkerFlags(f, true)
		if err := f.parse(bad, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestEmulatorQuotaSetting(t *testing.T) {
	f := newFlags("emulator", "")
	ef := addEmulatorFlags(f, 0)
	if err := f.parse([]string{"--emulator-tokens-per-minute", "gpt-test=6000"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if cfg := ef.config(zerolog.Nop()); cfg.TokensPerMinute["gpt-test"] != 6000 {
		t.Fatalf("config %+v", cfg)
	}
	if cfg := addEmulatorFlags(newFlags("emulator", ""), 0).config(zerolog.Nop()); cfg.TokensPerMinute != nil {
		t.Fatalf("a quota by default: %+v", cfg.TokensPerMinute)
	}
}

// --metric-keys: the default is consumer.DefaultMetricKeys, 0 means none
// but the keys the configuration names (MetricKeys negative in the
// worker's settings, where 0 is the default), and out of range is refused.
func TestWorkerMetricKeys(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{nil, consumer.DefaultMetricKeys},
		{[]string{"--metric-keys", "0"}, -1},
		{[]string{"--metric-keys", "7"}, 7},
	} {
		f := newFlags("worker", "")
		wf := addWorkerFlags(f, true)
		if err := f.parse(c.args, io.Discard); err != nil {
			t.Fatal(err)
		}
		if got := wf.config("", nil).MetricKeys; got != c.want {
			t.Errorf("%v: MetricKeys %d, want %d", c.args, got, c.want)
		}
	}
	for _, bad := range []string{"-1", "10001"} {
		f := newFlags("worker", "")
		addWorkerFlags(f, true)
		if err := f.parse([]string{"--metric-keys", bad}, io.Discard); err == nil {
			t.Errorf("--metric-keys %s accepted", bad)
		}
	}
}
