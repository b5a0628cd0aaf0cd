package contract

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foundryq/foundryq/events"
)

// Tap validates every message of the wire contract it sees on a NATS
// connection: what workers, gateways and tools publish must match its
// schema exactly; what producers send (run requests, cancel records,
// answers) must match it whenever the worker's decoder accepts it (a test
// may send a malformed one on purpose: then the schema may refuse it too).
// It reads every subject of the contract but the request subjects (see
// NewTap), the state and callback buckets, and the replies on request
// inboxes. A message on an unknown subject under <prefix>.gateway. (or
// handed to Check) is an error.
type Tap struct {
	set       *Set
	names     events.Names
	bucket    string
	callbacks string // the gateways' callback registrations bucket
	subs      []*nats.Subscription
	nc        *nats.Conn

	mu       sync.Mutex
	errs     []error
	checked  int
	skipRuns map[string]bool // run ids not to check (IgnoreRun)
}

// NewTap starts a tap on nc for the subjects of names, the state bucket
// included.
func NewTap(nc *nats.Conn, set *Set, names events.Names) (*Tap, error) {
	t := &Tap{set: set, names: names, bucket: names.Bucket(), callbacks: strings.ReplaceAll(names.Prefix, ".", "_") + "-callbacks", nc: nc, skipRuns: map[string]bool{}}
	if names.Prefix == "" {
		t.names.Prefix = events.DefaultPrefix
		t.callbacks = events.DefaultPrefix + "-callbacks"
	}
	// Request subjects (cancel, input, tools) are left out: a subscriber
	// there would turn "no responders" into a timeout, and workers,
	// clients and the gateway act on that answer. Notices are read: every
	// worker, the sender included, subscribes to them, so they never get
	// "no responders". Their bodies
	// are seen where they are stored (cancels, inputs), their replies on
	// the inboxes; a test that serves a tool itself hands each call to
	// Check. Of the inboxes, only those of nats.go's request mux
	// (_INBOX.<id>.<token>) are read: a push consumer delivers to an
	// _INBOX.<id> of two tokens, and a subscriber there would keep it
	// delivering to nobody after its client went away.
	p := t.names.Prefix
	for _, subj := range []string{p + ".runs.*", p + ".events.*", p + ".live.*", p + ".cancels.*", p + ".inputs.>",
		p + ".dead.*", p + ".watch.*", p + ".notice.*", p + ".tools.cancel.*", p + ".gateway.>", "$KV." + t.bucket + ".>", "$KV." + t.callbacks + ".>", "_INBOX.*.*"} {
		if err := t.subscribe(subj); err != nil {
			t.stop()
			return nil, err
		}
	}
	if err := nc.Flush(); err != nil {
		t.stop()
		return nil, fmt.Errorf("contract: tap: %w", err)
	}
	return t, nil
}

// TapT starts a tap with the embedded schemas on nc for the default
// prefix; when the test ends it fails the test with every message that
// did not match its schema.
func TapT(t testing.TB, nc *nats.Conn) *Tap {
	t.Helper()
	set, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	tap, err := NewTap(nc, set, events.Names{Prefix: events.DefaultPrefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, err := range tap.Close() {
			t.Errorf("contract: %v", err)
		}
	})
	return tap
}

func (t *Tap) subscribe(subj string) error {
	sub, err := t.nc.Subscribe(subj, t.handle)
	if err != nil {
		return fmt.Errorf("contract: tap %s: %w", subj, err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	t.mu.Lock()
	t.subs = append(t.subs, sub)
	t.mu.Unlock()
	return nil
}

// Check checks msg as if the tap had received it: for a request a test
// serves itself (a tool call), which the tap does not subscribe to.
func (t *Tap) Check(msg *nats.Msg) { t.handle(msg) }

// IgnoreRun stops checking the messages of run runID (its subjects and
// its state record): for a test that writes them itself, off contract on
// purpose (a forged state record, an event with a field from the future).
func (t *Tap) IgnoreRun(runID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.skipRuns[runID] = true
}

func (t *Tap) ignored(subject string) bool {
	id, ok := t.names.RunIDFromSubject(subject)
	if !ok {
		rest, found := strings.CutPrefix(subject, "$KV."+t.bucket+".")
		id, ok = rest, found
	}
	if !ok {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.skipRuns[id]
}

// Checked is the number of messages checked so far.
func (t *Tap) Checked() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.checked
}

// Errors returns the mismatches found so far.
func (t *Tap) Errors() []error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.errs)
}

// Close waits (briefly) for the messages already delivered, stops the tap
// and returns the mismatches it found.
func (t *Tap) Close() []error {
	if !t.nc.IsClosed() {
		_ = t.nc.FlushTimeout(5 * time.Second)
		deadline := time.Now().Add(5 * time.Second)
		t.mu.Lock()
		subs := slices.Clone(t.subs)
		t.mu.Unlock()
		for _, sub := range subs {
			for time.Now().Before(deadline) {
				if n, _, err := sub.Pending(); err != nil || n == 0 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	t.stop()
	return t.Errors()
}

func (t *Tap) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, sub := range t.subs {
		_ = sub.Unsubscribe()
	}
}

func (t *Tap) fail(msg *nats.Msg, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.errs = append(t.errs, fmt.Errorf("%s: %s; body %.300q", msg.Subject, fmt.Sprintf(format, args...), msg.Data))
}

// check validates data (JSON) against schema name.
func (t *Tap) check(msg *nats.Msg, name string, data []byte) {
	t.mu.Lock()
	t.checked++
	t.mu.Unlock()
	if err := t.set.ValidateJSON(name, data); err != nil {
		t.fail(msg, "%v", err)
	}
}

// checkHeaders validates msg's headers (first values) against schema name.
func (t *Tap) checkHeaders(msg *nats.Msg, name string) {
	h := map[string]any{}
	for k, v := range msg.Header {
		if len(v) > 0 {
			h[k] = v[0]
		}
	}
	data, _ := json.Marshal(h)
	t.check(msg, name, data)
}

// checkInbound validates what a producer sent: accepted tells whether the
// worker's decoder takes it. A message the decoder takes must match the
// schema; one it refuses is not checked further (the schema cannot say
// everything the decoder checks, such as run_id against the subject).
func (t *Tap) checkInbound(msg *nats.Msg, name string, accepted bool) {
	if !accepted {
		return
	}
	t.check(msg, name, msg.Data)
}

// checkReply checks a message on an inbox that is a reply of the contract:
// a tool service's (by its headers), a cancel reply (a JSON object with
// result and run_id), an answer's reply (result without run_id) or a
// queue position (where). Other replies (JetStream's, a notice's
// acknowledgement) are not the contract's.
func (t *Tap) checkReply(msg *nats.Msg) {
	if msg.Header.Get(events.HeaderToolStatus) != "" || msg.Header.Get("Nats-Service-Error") != "" {
		t.checkHeaders(msg, "tool-reply-headers")
		return
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(msg.Data, &probe) != nil {
		return
	}
	if probe["where"] != nil {
		t.check(msg, "queue-position", msg.Data)
		return
	}
	if probe["result"] == nil {
		return
	}
	if _, ok := probe["run_id"]; ok {
		t.check(msg, "cancel-reply", msg.Data)
	} else {
		t.check(msg, "input-reply", msg.Data)
	}
}

func (t *Tap) handle(msg *nats.Msg) {
	if t.ignored(msg.Subject) {
		return
	}
	n := t.names
	subj := msg.Subject
	if rest, ok := strings.CutPrefix(subj, "$KV."+t.bucket+"."); ok {
		if msg.Header.Get("KV-Operation") != "" || !events.ValidRunID(rest) {
			return // a delete or purge marker
		}
		t.check(msg, "run-state", msg.Data)
		return
	}
	if _, ok := strings.CutPrefix(subj, "$KV."+t.callbacks+"."); ok {
		if msg.Header.Get("KV-Operation") == "" {
			t.check(msg, "callback-registration", msg.Data)
		}
		return
	}
	if strings.HasPrefix(subj, "_INBOX.") {
		t.checkReply(msg)
		return
	}
	rest, ok := strings.CutPrefix(subj, n.Prefix+".")
	if !ok {
		return
	}
	kind, tail, _ := strings.Cut(rest, ".")
	switch kind {
	case "runs":
		_, err := events.DecodeRunMsg(subj, msg.Data, n)
		t.checkInbound(msg, "run-request", err == nil)
		if err == nil && msg.Header.Get("Nats-Msg-Id") != "" {
			t.checkHeaders(msg, "run-request-headers")
		}
	case "events", "live":
		t.check(msg, "run-event", msg.Data)
		t.checkHeaders(msg, "event-headers")
	case "cancel":
		if msg.Header.Get(events.HeaderCancelNotice) != "" {
			return // ignored by workers
		}
		_, err := events.DecodeCancelRequest(msg.Data)
		if err == nil && len(msg.Data) > 0 {
			t.checkInbound(msg, "cancel-request", true)
		}
		t.checkHeaders(msg, "cancel-headers")
	case "cancels":
		_, err := events.DecodeCancelRequest(msg.Data)
		if err == nil && len(msg.Data) > 0 {
			t.checkInbound(msg, "cancel-request", true)
		}
		t.checkHeaders(msg, "cancel-headers")
	case "notice":
		t.checkHeaders(msg, "notice-headers")
	case "input":
		_, err := events.DecodeInputAnswer(msg.Data)
		t.checkInbound(msg, "input-answer", err == nil)
	case "inputs":
		if strings.HasSuffix(tail, "._request") {
			t.check(msg, "run-request", msg.Data)
		} else {
			t.check(msg, "input-answer", msg.Data)
		}
	case "tools":
		if strings.HasPrefix(tail, "cancel.") {
			t.checkHeaders(msg, "tool-cancel-headers")
			if len(msg.Data) != 0 {
				t.fail(msg, "a tool call cancel has a body")
			}
			return
		}
		t.checkHeaders(msg, "tool-call-headers")
	case "watch":
		if len(msg.Data) != 0 {
			t.fail(msg, "a watcher heartbeat has a body")
		}
	case "position":
		if len(msg.Data) != 0 {
			t.fail(msg, "a position request has a body")
		}
	case "dead":
		t.checkHeaders(msg, "dead-letter-headers")
		if msg.Header.Get(events.HeaderDeadTruncated) == "" && json.Valid(msg.Data) && msg.Header.Get(events.HeaderDeadCode) != events.CodeInvalidRequest {
			var probe map[string]any
			if json.Unmarshal(msg.Data, &probe) == nil {
				if _, err := events.DecodeRunRequest(msg.Data); err == nil {
					t.check(msg, "run-request", msg.Data)
				}
			}
		}
	case "gateway":
		t.checkGateway(msg, tail)
	default:
		t.fail(msg, "subject not in the contract (kind %q)", kind)
	}
}

// checkGateway checks the gateways' own messages: callback deliveries and
// their dead letters.
func (t *Tap) checkGateway(msg *nats.Msg, tail string) {
	kind, _, _ := strings.Cut(tail, ".")
	switch kind {
	case "callbacks":
		t.check(msg, "callback-delivery", msg.Data)
	case "callbacks_dead":
		t.check(msg, "callback-delivery", msg.Data)
		t.checkHeaders(msg, "callback-dead-headers")
	default:
		t.fail(msg, "subject not in the contract (gateway %q)", kind)
	}
}
