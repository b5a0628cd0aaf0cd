package events_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
)

func TestFairnessOf(t *testing.T) {
	t.Parallel()
	hdr := func(kv ...string) nats.Header {
		h := nats.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	tests := []struct {
		name     string
		key      string
		prio     events.Priority
		h        nats.Header
		want     events.Fairness
		is       error  // nil: no error
		field    string // field named by the error
		reasonIn string // part of the error's reason
	}{
		{name: "defaults", want: events.Fairness{Key: "default", Priority: "normal"}},
		{name: "defaults with nil header", h: nil, want: events.Fairness{Key: "default", Priority: "normal"}},
		{name: "body", key: "team-a", prio: "high", want: events.Fairness{Key: "team-a", Priority: "high"}},
		{name: "headers", h: hdr(events.HeaderFairnessKey, "team-b", events.HeaderPriority, "low"),
			want: events.Fairness{Key: "team-b", Priority: "low"}},
		{name: "body key, header priority", key: "team-a", h: hdr(events.HeaderPriority, "low"),
			want: events.Fairness{Key: "team-a", Priority: "low"}},
		{name: "both, equal", key: "team-a", prio: "high", h: hdr(events.HeaderFairnessKey, "team-a", events.HeaderPriority, "high"),
			want: events.Fairness{Key: "team-a", Priority: "high"}},
		{name: "keys disagree", key: "team-a", h: hdr(events.HeaderFairnessKey, "team-b"),
			is: events.ErrFairnessConflict, field: "fairness_key", reasonIn: `"team-a" in the body but "team-b" in header Foundryq-Fairness-Key`},
		{name: "priorities disagree", prio: "high", h: hdr(events.HeaderPriority, "low"),
			is: events.ErrFairnessConflict, field: "priority", reasonIn: "Foundryq-Priority"},
		{name: "bad header key", h: hdr(events.HeaderFairnessKey, "a b"),
			is: events.ErrBadFairnessKey, field: "header Foundryq-Fairness-Key", reasonIn: "[A-Za-z0-9_-]{1,64}"},
		{name: "empty header key", h: hdr(events.HeaderFairnessKey, ""),
			is: events.ErrBadFairnessKey, field: "header Foundryq-Fairness-Key"},
		{name: "long header key", h: hdr(events.HeaderFairnessKey, strings.Repeat("k", 65)),
			is: events.ErrBadFairnessKey, field: "header Foundryq-Fairness-Key"},
		{name: "bad header priority", h: hdr(events.HeaderPriority, "urgent"),
			is: events.ErrBadPriority, field: "header Foundryq-Priority", reasonIn: `"urgent" is not one of`},
		{name: "header given twice", h: hdr(events.HeaderPriority, "low", events.HeaderPriority, "high"),
			is: events.ErrBadPriority, field: "header Foundryq-Priority", reasonIn: "given 2 times"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := validRequest("r1")
			req.FairnessKey, req.Priority = tt.key, tt.prio
			got, err := events.FairnessOf(req, tt.h)
			if tt.is == nil {
				if err != nil || got != tt.want {
					t.Fatalf("FairnessOf = %+v, %v; want %+v", got, err, tt.want)
				}
				return
			}
			if !errors.Is(err, tt.is) || !errors.Is(err, events.ErrInvalidRequest) {
				t.Fatalf("err = %v, want errors.Is %v and ErrInvalidRequest", err, tt.is)
			}
			var ve *events.ValidationError
			if !errors.As(err, &ve) || ve.Field != tt.field || !strings.Contains(ve.Reason, tt.reasonIn) {
				t.Fatalf("err = %#v, want field %q and a reason with %q", err, tt.field, tt.reasonIn)
			}
		})
	}
}

// The fairness key and the priority say how a run is scheduled, not what
// it runs: the same request with other ones (or with them in headers) is
// the same request, and a resubmit of it is a retry.
func TestDigestLeavesFairnessOut(t *testing.T) {
	t.Parallel()
	a := validRequest("r1")
	b := a
	b.FairnessKey, b.Priority = "team-a", events.PriorityHigh
	if a.Digest() != b.Digest() {
		t.Fatal("the fairness key and the priority change the digest")
	}
	b.Instructions = "other"
	if a.Digest() == b.Digest() {
		t.Fatal("the digest ignores the instructions")
	}
}

func TestNewerFields(t *testing.T) {
	t.Parallel()
	n := events.Names{}
	subject := n.RunSubject("r1")
	tests := []struct {
		name string
		body string
		want []string
	}{
		{"valid", `{"run_id":"r1","model":"m","input":"x"}`, nil},
		{"one newer field", `{"run_id":"r1","model":"m","input":"x","speed":"fast"}`, []string{"speed"}},
		{"two newer fields", `{"run_id":"r1","model":"m","input":"x","zeta":1,"alpha":{"a":1}}`, []string{"alpha", "zeta"}},
		{"newer agent field", `{"run_id":"r1","agent":{"name":"a","label":"x"},"input":"x"}`, []string{"agent.label"}},
		{"newer field and a bad one", `{"run_id":"r1","model":"m","input":"x","speed":"fast","max_output_tokens":3}`, nil},
		{"newer field, no input", `{"run_id":"r1","model":"m","speed":"fast"}`, nil},
		{"newer field, run id of another subject", `{"run_id":"r2","model":"m","input":"x","speed":"fast"}`, nil},
		{"known field in capitals", `{"run_id":"r1","model":"m","input":"x","Priority":"high"}`, nil},
		{"agent field in capitals", `{"run_id":"r1","agent":{"Name":"a"},"input":"x"}`, nil},
		{"not JSON", `{"run_id":`, nil},
		{"newer field and a known one twice", `{"run_id":"r1","model":"m","model":"n","input":"x","speed":1}`, nil},
		{"newer field twice", `{"run_id":"r1","model":"m","input":"x","speed":1,"speed":2}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := events.NewerFields(subject, []byte(tt.body), n); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("NewerFields = %q, want %q", got, tt.want)
			}
		})
	}
}

// Submit sends the fairness key and the priority as headers and leaves
// them out of the body, which workers from before them would refuse.
func TestSubmitSendsFairnessAsHeaders(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)

	req := validRequest(events.NewRunID())
	req.FairnessKey, req.Priority = "team-a", events.PriorityLow
	if _, err := e.client.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	msg, err := e.res.Runs.GetLastMsgForSubject(ctx, e.names.RunSubject(req.RunID))
	if err != nil {
		t.Fatal(err)
	}
	if k, p := msg.Header.Get(events.HeaderFairnessKey), msg.Header.Get(events.HeaderPriority); k != "team-a" || p != "low" {
		t.Fatalf("headers %s=%q %s=%q", events.HeaderFairnessKey, k, events.HeaderPriority, p)
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(msg.Data, &body); err != nil {
		t.Fatal(err)
	}
	if _, ok := body["fairness_key"]; ok {
		t.Errorf("body has fairness_key: %s", msg.Data)
	}
	if _, ok := body["priority"]; ok {
		t.Errorf("body has priority: %s", msg.Data)
	}
	got, err := events.DecodeRunMsg(msg.Subject, msg.Data, e.names)
	if err != nil {
		t.Fatal(err)
	}
	f, err := events.FairnessOf(got, msg.Header)
	if err != nil || f != (events.Fairness{Key: "team-a", Priority: "low"}) {
		t.Fatalf("FairnessOf the stored request = %+v, %v", f, err)
	}

	// Without them, no headers: a worker applies the defaults.
	plain := validRequest(events.NewRunID())
	if _, err := e.client.Submit(ctx, plain); err != nil {
		t.Fatal(err)
	}
	msg, err = e.res.Runs.GetLastMsgForSubject(ctx, e.names.RunSubject(plain.RunID))
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header.Get(events.HeaderFairnessKey) != "" || msg.Header.Get(events.HeaderPriority) != "" {
		t.Fatalf("headers without fairness: %v", msg.Header)
	}

	// A bad value publishes nothing.
	bad := validRequest(events.NewRunID())
	bad.Priority = "urgent"
	if _, err := e.client.Submit(ctx, bad); !errors.Is(err, events.ErrBadPriority) {
		t.Fatalf("submit with priority urgent: %v, want ErrBadPriority", err)
	}
	if _, err := e.res.Runs.GetLastMsgForSubject(ctx, e.names.RunSubject(bad.RunID)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("a refused request was stored: %v", err)
	}
}

// NewerFields takes bytes from outside: it never panics, and what it
// names are exactly the fields DecodeRunMsg refuses as unknown, the rest
// of the request being valid.
func FuzzNewerFields(f *testing.F) {
	for _, s := range []string{
		`{"run_id":"r1","model":"m","input":"x","speed":"fast"}`,
		`{"run_id":"r1","agent":{"name":"a","label":"x"},"input":"x","z":[1]}`,
		`{"run_id":"r1","model":"m","input":"x","Model":"n"}`,
		`{"run_id":"r1","model":"m","input":"x","priority":"high","fairness_key":"k","a":null}`,
		`{"run_id":"r1","model":"m","input":"x","a":1,"a":2}`, `[]`, `null`,
	} {
		f.Add([]byte(s))
	}
	n := events.Names{}
	f.Fuzz(func(t *testing.T, data []byte) {
		fields := events.NewerFields(n.RunSubject("r1"), data, n)
		if fields == nil {
			return
		}
		if _, err := events.DecodeRunMsg(n.RunSubject("r1"), data, n); !errors.Is(err, events.ErrUnknownField) {
			t.Fatalf("NewerFields = %q for a request DecodeRunMsg answers %v", fields, err)
		}
	})
}
