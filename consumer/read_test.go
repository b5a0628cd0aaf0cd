package consumer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/foundryq/foundryq/events"
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

// A create that never left the machine for a reason a retry does not fix
// started nothing and ends the run at once; a mere network error or a
// connection refused does not.
func TestNeverSent(t *testing.T) {
	dns := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}}
	tests := []struct {
		name  string
		err   error
		never bool
	}{
		{"host not found", fmt.Errorf("foundry: create: %w: %w", foundry.ErrHostNotFound, dns), true},
		{"certificate refused", fmt.Errorf("foundry: create: %w: x509", foundry.ErrTLSVerification), true},
		{"connection refused", fmt.Errorf("foundry: create: %w", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}), false},
		{"404 deployment", &foundry.APIError{Op: "create", StatusCode: 404, Code: "DeploymentNotFound"}, false},
	}
	for _, tt := range tests {
		if got := neverSent(tt.err); got != tt.never {
			t.Errorf("%s: neverSent = %v, want %v", tt.name, got, tt.never)
		}
		if tt.never && !createAnswered(tt.err) {
			t.Errorf("%s: createAnswered = false: it would end upstream_lost", tt.name)
		}
	}
	for _, tt := range []struct {
		err  error
		code string
	}{
		{tests[0].err, events.CodeUpstreamUnreachable},
		{tests[1].err, events.CodeUpstreamTLS},
		{tests[3].err, events.CodeDeploymentNotFound},
		{&foundry.APIError{Op: "create", StatusCode: 403}, events.CodeAuthError},
		{&foundry.APIError{Op: "create", StatusCode: 404}, events.CodeUpstreamError},
	} {
		if code, _ := upstreamFailure(tt.err); code != tt.code {
			t.Errorf("upstreamFailure(%v) = %s, want %s", tt.err, code, tt.code)
		}
	}
}
