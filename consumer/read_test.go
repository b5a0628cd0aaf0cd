package consumer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/foundryq/foundryq/foundry"
)

// Which failed creates certainly started nothing (the create may be sent
// again), and which upstream errors are worth retrying.
func TestCreateErrorClassification(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	read := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset")}
	tests := []struct {
		name      string
		err       error
		answered  bool // no response can exist
		retryable bool
	}{
		{"429", &foundry.APIError{Op: "create", StatusCode: 429}, true, true},
		{"500", &foundry.APIError{Op: "create", StatusCode: 500}, true, true},
		{"400", &foundry.APIError{Op: "create", StatusCode: 400}, true, false},
		{"refused before sending", fmt.Errorf("x: %w", foundry.ErrInvalidRequest), true, false},
		{"connection refused", fmt.Errorf("foundry: create: %w", dial), true, true},
		{"connection reset after sending", fmt.Errorf("foundry: create: %w", read), false, true},
		{"JSON instead of a stream", fmt.Errorf("x: %w", foundry.ErrNotStreaming), false, false},
		{"cancelled", context.Canceled, false, false},
		{"no token", fmt.Errorf("x: %w", foundry.ErrAuth), true, false},
		{"401", &foundry.APIError{Op: "create", StatusCode: 401}, true, false},
	}
	for _, tt := range tests {
		if got := createAnswered(tt.err); got != tt.answered {
			t.Errorf("%s: createAnswered = %v, want %v", tt.name, got, tt.answered)
		}
		if got := retryable(tt.err); got != tt.retryable {
			t.Errorf("%s: retryable = %v, want %v", tt.name, got, tt.retryable)
		}
	}
}
