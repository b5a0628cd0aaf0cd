package consumer

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers on a dead letter (the body is the original run request).
const (
	HeaderDeadCode    = "Foundryq-Dead-Code"    // invalid_request, upstream_error
	HeaderDeadReason  = "Foundryq-Dead-Reason"  // a human-readable message
	HeaderDeadSubject = "Foundryq-Dead-Subject" // the subject the request arrived on
	HeaderDeadWorker  = "Foundryq-Dead-Worker"  // the worker that gave up on it
)

// deadLetter copies a job that can never run to the dead-letter stream with
// the reason. It retries briefly; a failure is logged, not fatal.
func (w *Worker) deadLetter(ctx context.Context, job jetstream.Msg, runID, code, reason string) {
	token := runID
	if token == "" {
		token = "invalid"
	}
	m := nats.NewMsg(w.names.DeadSubject(token))
	m.Data = job.Data()
	m.Header.Set(HeaderDeadCode, code)
	m.Header.Set(HeaderDeadReason, strings.ReplaceAll(reason, "\n", " "))
	m.Header.Set(HeaderDeadSubject, job.Subject())
	m.Header.Set(HeaderDeadWorker, w.cfg.WorkerID)
	msgID := "dead:" + token
	if meta, err := job.Metadata(); err == nil {
		msgID = fmt.Sprintf("dead:%s:%d", token, meta.Sequence.Stream)
	}
	var err error
	for attempt := range 3 {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = w.js.PublishMsg(pctx, m, jetstream.WithMsgID(msgID))
		cancel()
		if err == nil {
			w.m.deadLetters.Inc()
			return
		}
		sleep(ctx, time.Duration(attempt+1)*100*time.Millisecond)
	}
	w.log.Error().Err(err).Str("run_id", runID).Msg("publish dead letter")
}
