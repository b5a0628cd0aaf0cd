// Package jserr tells JetStream errors apart, once for every caller.
package jserr

import (
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MaxMsgsPerSubject is the error code of a publish refused because its
// subject already holds the one message a DiscardNewPerSubject stream
// allows (a run id still queued; a cancel already on record).
const MaxMsgsPerSubject jetstream.ErrorCode = 10077

// WrongLastSequence reports a publish or KV update refused by its
// expected-last-sequence fence (10071; 10164 on replicated streams).
func WrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// SubjectFull reports a publish refused with MaxMsgsPerSubject. The same
// error code (JSStreamStoreFailedF) also reports other store refusals, such
// as a stream's max_bytes reached: the server's description tells them
// apart.
func SubjectFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == MaxMsgsPerSubject &&
		strings.Contains(apiErr.Description, "per subject")
}

// Error codes of writes JetStream refuses for want of space.
const (
	// InsufficientResources: the server's (or the account's) JetStream
	// storage is used up (max_file_store / max_mem_store reached).
	InsufficientResources jetstream.ErrorCode = 10023
	// StorageResourcesExceeded: the account's JetStream storage limit.
	StorageResourcesExceeded jetstream.ErrorCode = 10047
)

// StoreFull reports a write JetStream refused because there is no room:
// the server's or the account's storage is used up, or a stream with
// discard-new reached its max_bytes. The write may succeed once space is
// freed; until then every write to the same store fails the same way.
func StoreFull(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case InsufficientResources, StorageResourcesExceeded:
		return true
	case MaxMsgsPerSubject:
		return strings.Contains(apiErr.Description, "maximum bytes")
	}
	return false
}

// MissingResource reports an error that says a stream, consumer or bucket
// is gone (or no stream took a publish).
func MissingResource(err error) bool {
	return errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
		errors.Is(err, jetstream.ErrConsumerDoesNotExist) || errors.Is(err, jetstream.ErrBucketNotFound) ||
		errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrNoResponders)
}

// Unavailable reports an error that says JetStream could not answer for
// the moment: a request not answered in time (while a stream or the
// cluster elects a leader, requests go unanswered) or a 503 ("JetStream
// system temporarily unavailable"). Trying again later may succeed.
func Unavailable(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code == 503
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}
