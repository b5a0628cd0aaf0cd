package consumer

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/retry"
	"github.com/foundryq/foundryq/internal/secrets"
)

// deadLetterHeadroom is what a dead letter keeps free of the max payload
// for its headers (the reason is at most maxTextLen).
const deadLetterHeadroom = maxTextLen + 1<<10

// deadLetter copies a job that can never run to the dead-letter stream with
// the reason. It retries briefly; a failure is logged, not fatal.
func (w *Worker) deadLetter(ctx context.Context, job jetstream.Msg, runID, code, reason string) {
	token := runID
	if token == "" {
		token = "invalid"
	}
	m := nats.NewMsg(w.names.DeadSubject(token))
	m.Data = secrets.RedactRequest(job.Data()) // no credential is kept for 30 days
	m.Header.Set(events.HeaderDeadCode, code)
	m.Header.Set(events.HeaderDeadReason, truncateText(strings.ReplaceAll(reason, "\n", " ")))
	if limit := int(w.nc.MaxPayload()) - deadLetterHeadroom; limit > 0 && len(m.Data) > limit {
		// The request alone is too large to store with its headers: keep
		// its beginning and say so, rather than lose the dead letter.
		m.Header.Set(events.HeaderDeadTruncated, strconv.Itoa(len(m.Data)))
		m.Data = m.Data[:limit]
	}
	m.Header.Set(events.HeaderDeadSubject, job.Subject())
	m.Header.Set(events.HeaderDeadWorker, w.cfg.WorkerID)
	msgID := "dead:" + token
	if meta, err := job.Metadata(); err == nil {
		msgID = fmt.Sprintf("dead:%s:%d", token, meta.Sequence.Stream)
	}
	var err error
	b := retry.Backoff(100*time.Millisecond, time.Second)
	for range 3 {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = w.js.PublishMsg(pctx, m, jetstream.WithMsgID(msgID))
		cancel()
		if err == nil {
			w.m.deadLetters.Inc()
			return
		}
		retry.Sleep(ctx, b.NextBackOff())
	}
	w.log.Error().Err(err).Str("run_id", runID).Str("code", code).Msg("publish dead letter; it is lost")
}
