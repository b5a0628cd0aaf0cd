package consumer

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // in the error; "" for valid
	}{
		{"defaults", Config{}, ""},
		{"concurrency", Config{Concurrency: -1}, "concurrency"},
		{"default timeout", Config{DefaultTimeout: -time.Second}, "default timeout"},
		{"poll wait", Config{PollWait: time.Millisecond}, "poll wait"},
		{"event interval", Config{EventInterval: time.Minute}, "event interval"},
		{"worker id", Config{WorkerID: "a.b"}, "worker id"},
		{"event interval off", Config{EventInterval: -1}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.withDefaults().validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
	if id := (Config{}).withDefaults().WorkerID; !strings.Contains(id, "-") || strings.ContainsAny(id, ". ") {
		t.Fatalf("default worker id %q", id)
	}
}
