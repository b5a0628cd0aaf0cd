package jserr

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestClassification(t *testing.T) {
	wrong := &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}
	wrongR3 := &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant}
	full := &jetstream.APIError{ErrorCode: MaxMsgsPerSubject, Description: "maximum messages per subject exceeded"}
	for _, tt := range []struct {
		err                  error
		wrong, subject, gone bool
	}{
		{fmt.Errorf("publish: %w", wrong), true, false, false},
		{wrongR3, true, false, false},
		{fmt.Errorf("x: %w", full), false, true, false},
		{fmt.Errorf("x: %w", jetstream.ErrStreamNotFound), false, false, true},
		{nats.ErrNoResponders, false, false, true},
		{nats.ErrTimeout, false, false, false},
		{&jetstream.APIError{ErrorCode: MaxMsgsPerSubject, Description: "maximum bytes exceeded"}, false, false, false},
	} {
		if WrongLastSequence(tt.err) != tt.wrong || SubjectFull(tt.err) != tt.subject || MissingResource(tt.err) != tt.gone {
			t.Errorf("%v: wrong=%v full=%v gone=%v", tt.err, WrongLastSequence(tt.err), SubjectFull(tt.err), MissingResource(tt.err))
		}
	}
}

func TestUnavailable(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("stream info: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}), true},
		{fmt.Errorf("stream info: %w", context.DeadlineExceeded), true},
		{nats.ErrTimeout, true},
		{fmt.Errorf("x: %w", jetstream.ErrStreamNotFound), false},
		{nats.ErrNoResponders, false},
		{&jetstream.APIError{Code: 400, ErrorCode: 10052}, false},
		{context.Canceled, false},
	} {
		if got := Unavailable(tt.err); got != tt.want {
			t.Errorf("Unavailable(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
