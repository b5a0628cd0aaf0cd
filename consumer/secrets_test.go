package consumer_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/secrets"
	"github.com/foundryq/foundryq/internal/testkit"
)

const crmTool = `{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp","require_approval":"never","headers":{"Authorization":{"secret":"crm-token"}}}`

// A secret reference in a tool is resolved by the worker just before the
// create: Foundry gets the value, the bus never holds it.
func TestSecretReferencesAreResolved(t *testing.T) {
	t.Parallel()
	e := setup(t)
	res, err := secrets.NewResolver(secrets.Config{
		LookupEnv: func(name string) (string, bool) {
			if name == "FOUNDRYQ_SECRET_CRM_TOKEN" {
				return "Bearer sk-crm-4711", true
			}
			return "", false
		},
		Hosts: map[string][]string{"crm-token": {"crm.example.com"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.startWorker(consumer.Config{WorkerID: "sec", Secrets: res})

	req := request("sec-1", nil)
	req.Tools = []json.RawMessage{json.RawMessage(crmTool)}
	e.submit(req)
	if last := checkWellFormed(t, e.collect("sec-1", 10*time.Second)); last.Type != events.TypeRunCompleted {
		t.Fatalf("run ended %s %+v", last.Type, last.Error)
	}
	bodies := e.emu.CreateRequests("sec-1")
	if len(bodies) != 1 || !strings.Contains(string(bodies[0]), "sk-crm-4711") || strings.Contains(string(bodies[0]), `"secret"`) {
		t.Fatalf("create body %s: want the resolved value and no reference", bodies)
	}

	// A reference to a secret the worker does not have: the run cannot run.
	bad := request("sec-2", nil)
	bad.Tools = []json.RawMessage{json.RawMessage(strings.Replace(crmTool, "crm-token", "other-token", 1))}
	e.submit(bad)
	last := checkWellFormed(t, e.collect("sec-2", 10*time.Second))
	if last.Type != events.TypeRunFailed || last.Error.Code != events.CodeInvalidRequest || !strings.Contains(last.Error.Message, "other-token") {
		t.Fatalf("run ended %s %+v", last.Type, last.Error)
	}
	if n := len(e.emu.CreateRequests("sec-2")); n != 0 {
		t.Fatalf("%d creates sent with an unresolved secret", n)
	}
}

// A refused reference fails the run with a message every submitter may
// read (run.failed, the state's end, the dead letter's reason): it says
// what is wrong, never where the secret may go, where secrets are kept or
// what the variables are called. The worker logs those at debug level.
func TestSecretRefusalsRevealNoConfiguration(t *testing.T) {
	t.Parallel()
	e := setup(t)
	dir := t.TempDir()
	res, err := secrets.NewResolver(secrets.Config{
		Dir:       dir,
		LookupEnv: func(string) (string, bool) { return "", false },
		Hosts:     map[string][]string{"crm-token": {"crm.example.com", "*.private-zone.example"}, "gone": {"tools.example.org"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	log := zerolog.New(&logs).Level(zerolog.DebugLevel)
	e.startWorker(consumer.Config{WorkerID: "sec-conf", Secrets: res, Logger: &log})

	tests := []struct {
		runID, tool string
		hidden      []string // in the worker's debug log, never in what is stored
	}{
		{"conf-host", strings.Replace(crmTool, "https://crm.example.com/mcp", "https://evil.example.net/mcp", 1), []string{"crm.example.com", "*.private-zone.example"}},
		{"conf-connector", strings.Replace(crmTool, `"require_approval"`, `"connector_id":"connector_gmail","require_approval"`, 1), []string{"crm.example.com", "*.private-zone.example"}},
		{"conf-missing", strings.Replace(strings.Replace(crmTool, "crm-token", "gone", 1), "crm.example.com", "tools.example.org", 1), []string{dir, "FOUNDRYQ_SECRET_GONE"}},
	}
	for _, tt := range tests {
		req := request(tt.runID, nil)
		req.Tools = []json.RawMessage{json.RawMessage(tt.tool)}
		e.submit(req)
		last := checkWellFormed(t, e.collect(tt.runID, 10*time.Second))
		if last.Type != events.TypeRunFailed || last.Error.Code != events.CodeInvalidRequest {
			t.Fatalf("%s ended %s %+v", tt.runID, last.Type, last.Error)
		}
		st := e.state(tt.runID)
		stored := map[string]string{
			"run.failed":  last.Error.Message,
			"state":       st.LastError + " " + st.End.Error.Message,
			"dead letter": e.deadLetter(tt.runID).Header.Get(events.HeaderDeadReason),
		}
		for where, msg := range stored {
			if !strings.Contains(msg, "tools[0].headers.Authorization") {
				t.Errorf("%s: %s %q does not name the field", tt.runID, where, msg)
			}
			for _, h := range append(tt.hidden, dir, "FOUNDRYQ_SECRET", "--secret", "private-zone") {
				if strings.Contains(msg, h) {
					t.Errorf("%s: %s %q names %q", tt.runID, where, msg, h)
				}
			}
		}
		testkit.Eventually(t, 10*time.Second, "the debug line of "+tt.runID, func() bool {
			for _, l := range strings.Split(logs.String(), "\n") {
				if !strings.Contains(l, `"level":"debug"`) || !strings.Contains(l, "secret reference refused") {
					continue
				}
				all := true
				for _, h := range tt.hidden {
					all = all && strings.Contains(l, h)
				}
				if all {
					return true
				}
			}
			return false
		})
	}
}

// A dead letter keeps the request, never the credentials in it (they were
// kept verbatim for 30 days).
func TestDeadLettersAreRedacted(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "red"})
	body := `{"run_id":"red-1","model":"bad model","input":"hi","bogus":1,"tools":[{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp","require_approval":"never","headers":{"Authorization":"Bearer sk-raw-8815"}}]}`
	if _, err := e.js.Publish(context.Background(), "foundryq.runs.red-1", []byte(body)); err != nil {
		t.Fatal(err)
	}
	m := e.deadLetter("red-1")
	if strings.Contains(string(m.Data), "sk-raw-8815") || !strings.Contains(string(m.Data), secrets.Redacted) || !strings.Contains(string(m.Data), "crm.example.com") {
		t.Fatalf("dead letter %s: want the request with its credential redacted", m.Data)
	}
}

// A dead letter redacts every header value whatever its JSON shape: an
// object ({"value": "sk-live-…"}), an array, a number, a bool, nested.
func TestDeadLettersRedactEveryHeaderShape(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker(consumer.Config{WorkerID: "red-shapes"})
	headers := `{"B":{"value":"sk-live-obj-5521"},"C":["sk-live-arr-5522"],"D":{"x":{"y":"sk-live-nest-5523"}},"E":5524000001,"F":true,"G":{"secret":"crm-token"}}`
	body := `{"run_id":"red-2","model":"bad model","input":"hi","bogus":1,"tools":[{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp","require_approval":"never","headers":` + headers + `}]}`
	if _, err := e.js.Publish(context.Background(), "foundryq.runs.red-2", []byte(body)); err != nil {
		t.Fatal(err)
	}
	m := e.deadLetter("red-2")
	for _, s := range []string{"sk-live-obj-5521", "sk-live-arr-5522", "sk-live-nest-5523", "5524000001", "true"} {
		if strings.Contains(string(m.Data), s) {
			t.Errorf("dead letter kept %s: %s", s, m.Data)
		}
	}
	if !strings.Contains(string(m.Data), `"G":{"secret":"crm-token"}`) || !strings.Contains(string(m.Data), "crm.example.com") {
		t.Errorf("dead letter %s: want the request with its reference and server kept", m.Data)
	}
}
