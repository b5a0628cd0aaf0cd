package main

import (
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestEmulatorFlags: the emulator's settings for issue 8 reach its Config.
func TestEmulatorFlags(t *testing.T) {
	t.Parallel()
	f := newFlags("emulator", "emulator [flags]")
	ef := addEmulatorFlags(f, 0)
	if err := f.parse([]string{"--emulator-accept-agent-field", "--emulator-keepalive", "250ms"}, nil); err != nil {
		t.Fatal(err)
	}
	cfg := ef.config(zerolog.Nop())
	if !cfg.AcceptDeprecatedAgentField || cfg.KeepaliveInterval != 250*time.Millisecond {
		t.Fatalf("config = %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	def := addEmulatorFlags(newFlags("emulator", ""), 0).config(zerolog.Nop())
	if def.AcceptDeprecatedAgentField || def.KeepaliveInterval != 30*time.Second {
		t.Fatalf("defaults = %+v", def)
	}
}
