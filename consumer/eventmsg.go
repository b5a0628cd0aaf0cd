package consumer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
)

// The wire form of a run event as the worker stores it.

// msgID is the Nats-Msg-Id of a run's event number seq: "<run_id>:<seq>".
func msgID(runID string, seq uint64) string {
	return runID + ":" + strconv.FormatUint(seq, 10)
}

// newEventMsg builds the message for ev on its event subject, with the
// headers every event carries: Nats-Msg-Id, Foundryq-Type and, when
// upstreamSeq >= 0, Foundryq-Upstream-Seq.
func newEventMsg(n events.Names, ev events.RunEvent, upstreamSeq int64) (*nats.Msg, error) {
	if !events.ValidRunID(ev.RunID) {
		return nil, fmt.Errorf("consumer: event run id %q: %w", ev.RunID, events.ErrBadRunID)
	}
	if ev.Seq == 0 {
		return nil, fmt.Errorf("consumer: event for run %s: seq must start at 1", ev.RunID)
	}
	data, ok := appendTextDeltaJSON(make([]byte, 0, 96+len(ev.Text)), &ev)
	if !ok {
		var err error
		if data, err = json.Marshal(ev); err != nil {
			return nil, fmt.Errorf("consumer: encode event %s: %w", msgID(ev.RunID, ev.Seq), err)
		}
	}
	m := nats.NewMsg(n.EventSubject(ev.RunID))
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, msgID(ev.RunID, ev.Seq))
	m.Header.Set(events.HeaderType, string(ev.Type))
	if upstreamSeq >= 0 {
		m.Header.Set(events.HeaderUpstreamSeq, strconv.FormatInt(upstreamSeq, 10))
	}
	return m, nil
}

// upstreamSeqOf returns the Foundryq-Upstream-Seq header of an event message.
func upstreamSeqOf(h nats.Header) (int64, bool) {
	v := h.Get(events.HeaderUpstreamSeq)
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}

// rawDigest is the digest of a request body that does not decode: the hex
// SHA-256 of the bytes as they arrived (events.RunRequest.Digest for one
// that does).
func rawDigest(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}
