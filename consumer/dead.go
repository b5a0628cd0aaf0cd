package consumer

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
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
	m.Header.Set(events.HeaderDeadCode, code)
	m.Header.Set(events.HeaderDeadReason, strings.ReplaceAll(reason, "\n", " "))
	m.Header.Set(events.HeaderDeadSubject, job.Subject())
	m.Header.Set(events.HeaderDeadWorker, w.cfg.WorkerID)
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
