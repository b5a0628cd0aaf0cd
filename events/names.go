package events

import (
	"fmt"
	"strings"
)

// DefaultPrefix is the subject prefix used when none is configured.
const DefaultPrefix = "foundryq"

// Per-run subject kinds: the token after the prefix.
const (
	kindRuns   = "runs"
	kindEvents = "events"
	kindCancel = "cancel"
	kindWatch  = "watch"
	kindDead   = "dead"
	// kindCancels holds the durable cancel records (stream <PREFIX>_CANCELS).
	kindCancels = "cancels"
	// kindLive carries the events stream's copies of stored events.
	kindLive = "live"
	// kindNotice carries the workers' internal notices to each other
	// (a cancel for the run's owner); only workers may publish there.
	kindNotice = "notice"
	// Runs that ask: answers are requests on <prefix>.input.<run_id>,
	// stored by workers on <prefix>.inputs.<run_id>.<item_id>.
	kindInput  = "input"
	kindInputs = "inputs"
	// kindPosition carries requests for a queued run's place in the
	// queue, answered by a worker.
	kindPosition = "position"
)

// Names derives every subject and JetStream name from a prefix. The zero
// value uses DefaultPrefix.
//
// With prefix "foundryq": subjects foundryq.{runs,events,cancel,watch,dead}.<run_id>,
// streams FOUNDRYQ_RUNS, FOUNDRYQ_EVENTS, FOUNDRYQ_DEAD, KV bucket
// foundryq-runs and durable consumer foundryq-workers. A prefix with several
// tokens ("acme.foundryq") gives ACME_FOUNDRYQ_RUNS, acme_foundryq-runs, etc.
type Names struct{ Prefix string }

// NewNames returns the Names for prefix ("" means DefaultPrefix). Each
// dot-separated token of the prefix must match [A-Za-z0-9_-]+.
func NewNames(prefix string) (Names, error) {
	if prefix == "" {
		return Names{Prefix: DefaultPrefix}, nil
	}
	for _, tok := range strings.Split(prefix, ".") {
		if tok == "" || !validToken(tok) {
			return Names{}, fmt.Errorf("events: subject prefix %q: each dot-separated token must match [A-Za-z0-9_-]+", prefix)
		}
	}
	return Names{Prefix: prefix}, nil
}

func (n Names) prefix() string {
	if n.Prefix == "" {
		return DefaultPrefix
	}
	return n.Prefix
}

func (n Names) subject(kind, runID string) string { return n.prefix() + "." + kind + "." + runID }

// RunSubject is the subject a run request is published on: <prefix>.runs.<id>.
func (n Names) RunSubject(runID string) string { return n.subject(kindRuns, runID) }

// EventSubject is the subject of a run's events: <prefix>.events.<id>.
func (n Names) EventSubject(runID string) string { return n.subject(kindEvents, runID) }

// CancelSubject is the core NATS request subject for cancelling a run: <prefix>.cancel.<id>.
func (n Names) CancelSubject(runID string) string { return n.subject(kindCancel, runID) }

// WatchSubject is the core NATS subject watcher heartbeats go to: <prefix>.watch.<id>.
func (n Names) WatchSubject(runID string) string { return n.subject(kindWatch, runID) }

// DeadSubject is the subject of a run's dead letter: <prefix>.dead.<id>.
func (n Names) DeadSubject(runID string) string { return n.subject(kindDead, runID) }

// LiveSubject is where the events stream republishes each event of a run
// once it is stored: <prefix>.live.<id> (core NATS). A subscriber there
// sees only stored events, in order, without a JetStream consumer (a
// subscriber on the event subject itself also sees a publish the stream
// refuses, such as a worker's that lost the run).
func (n Names) LiveSubject(runID string) string { return n.subject(kindLive, runID) }

// NoticeSubject is the subject of the workers' internal notices about a
// run: <prefix>.notice.<id>. The worker that answered a cancel tells the
// run's owner there. Internal: only workers publish or subscribe to it
// (the deploy/ configs refuse it to every other user).
func (n Names) NoticeSubject(runID string) string { return n.subject(kindNotice, runID) }

// CancelRecordSubject is the subject of a run's durable cancel record:
// <prefix>.cancels.<id> (stream <PREFIX>_CANCELS). Client.Cancel stores the
// cancel there before it asks the workers, so that a cancel sent while no
// worker runs is found by the worker that takes the run.
func (n Names) CancelRecordSubject(runID string) string { return n.subject(kindCancels, runID) }

// RunsWildcard, EventsWildcard, CancelWildcard, WatchWildcard and
// DeadWildcard match the subject of every run of their kind.
func (n Names) RunsWildcard() string   { return n.subject(kindRuns, "*") }
func (n Names) EventsWildcard() string { return n.subject(kindEvents, "*") }
func (n Names) CancelWildcard() string { return n.subject(kindCancel, "*") }
func (n Names) WatchWildcard() string  { return n.subject(kindWatch, "*") }
func (n Names) DeadWildcard() string   { return n.subject(kindDead, "*") }

// LiveWildcard matches every run's live subject.
func (n Names) LiveWildcard() string { return n.subject(kindLive, "*") }

// NoticeWildcard matches every NoticeSubject.
func (n Names) NoticeWildcard() string { return n.subject(kindNotice, "*") }

// CancelRecordsWildcard matches every run's durable cancel record subject.
func (n Names) CancelRecordsWildcard() string { return n.subject(kindCancels, "*") }

// InputSubject is where a caller answers what run runID waits for (a
// request: workers reply with an InputReply).
func (n Names) InputSubject(runID string) string { return n.subject(kindInput, runID) }

// PositionSubject is where a client asks the workers where run runID
// waits (Client.QueuePosition).
func (n Names) PositionSubject(runID string) string { return n.subject(kindPosition, runID) }

// PositionWildcard matches every PositionSubject.
func (n Names) PositionWildcard() string { return n.subject(kindPosition, "*") }

// InputWildcard matches every run's input subject.
func (n Names) InputWildcard() string { return n.subject(kindInput, "*") }

// InputRecordSubject is where the answer to item id of run runID is stored
// (one per item: the first answer stays).
func (n Names) InputRecordSubject(runID, id string) string {
	return n.subject(kindInputs, runID) + "." + id
}

// ParkedRequestSubject is where a paused run's request is kept for its
// next step (its job is acked while it waits). "_request" cannot be an
// item id (ValidInputID).
func (n Names) ParkedRequestSubject(runID string) string {
	return n.subject(kindInputs, runID) + "._request"
}

// InputRecordsWildcard matches every stored answer and parked request.
func (n Names) InputRecordsWildcard() string { return n.prefix() + "." + kindInputs + ".>" }

// InputsStream stores answers and parked requests.
func (n Names) InputsStream() string { return n.upper() + "_INPUTS" }

func (n Names) upper() string { return strings.ToUpper(strings.ReplaceAll(n.prefix(), ".", "_")) }
func (n Names) lower() string { return strings.ReplaceAll(n.prefix(), ".", "_") }

// RunsStream is the work-queue stream of run requests (FOUNDRYQ_RUNS).
func (n Names) RunsStream() string { return n.upper() + "_RUNS" }

// EventsStream is the stream of run events (FOUNDRYQ_EVENTS).
func (n Names) EventsStream() string { return n.upper() + "_EVENTS" }

// DeadStream is the stream of dead letters (FOUNDRYQ_DEAD).
func (n Names) DeadStream() string { return n.upper() + "_DEAD" }

// CancelsStream is the stream of durable cancel records (FOUNDRYQ_CANCELS).
func (n Names) CancelsStream() string { return n.upper() + "_CANCELS" }

// Bucket is the KV bucket of run states (foundryq-runs).
func (n Names) Bucket() string { return n.lower() + "-runs" }

// Consumer is the durable pull consumer the workers share (foundryq-workers).
func (n Names) Consumer() string { return n.lower() + "-workers" }

// WorkerQueueGroup is the queue group workers use to answer cancel
// requests, so that exactly one worker answers each (foundryq-workers).
func (n Names) WorkerQueueGroup() string { return n.Consumer() }

// RunIDFromSubject returns the run id of any per-run subject (runs, events,
// cancel, watch, dead, cancels, live, notice, input) under this prefix, and false if subject is not one or
// the id is not a valid run id.
func (n Names) RunIDFromSubject(subject string) (string, bool) {
	p := n.prefix() + "."
	rest, ok := strings.CutPrefix(subject, p)
	if !ok {
		return "", false
	}
	kind, id, ok := strings.Cut(rest, ".")
	if !ok {
		return "", false
	}
	switch kind {
	case kindRuns, kindEvents, kindCancel, kindWatch, kindDead, kindCancels, kindLive, kindNotice, kindInput, kindPosition:
	default:
		return "", false
	}
	if !ValidRunID(id) {
		return "", false
	}
	return id, true
}

// MaxRunIDLen is the longest valid run id.
const MaxRunIDLen = 64

// ValidRunID reports whether id matches [A-Za-z0-9_-]{1,64}.
func ValidRunID(id string) bool {
	return len(id) >= 1 && len(id) <= MaxRunIDLen && validToken(id)
}

func validToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
