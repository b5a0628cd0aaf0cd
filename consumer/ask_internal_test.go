package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/jserr"
	"github.com/foundryq/foundryq/internal/natsembed"
)

// The inputs stream keeps the first answer to an item and refuses a second
// with the error jserr.SubjectFull recognises (two workers answering the same
// item at once: one wins, the other replies already_answered).
func TestSecondAnswerIsRefusedByTheStream(t *testing.T) {
	t.Parallel()
	_, nc := natsembed.RunTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names, _ := events.NewNames("")
	res, err := Provision(ctx, js, names, ProvisionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	subject := names.InputRecordSubject("r1", "call_1")
	if _, err := js.Publish(ctx, subject, []byte(`{"id":"call_1","output":"first"}`)); err != nil {
		t.Fatal(err)
	}
	_, err = js.Publish(ctx, subject, []byte(`{"id":"call_1","output":"second"}`))
	if !jserr.SubjectFull(err) {
		t.Fatalf("second answer: %v, want the per-subject refusal", err)
	}
	m, err := res.Inputs.GetLastMsgForSubject(ctx, subject)
	if err != nil || string(m.Data) != `{"id":"call_1","output":"first"}` {
		t.Fatalf("stored answer %s, %v", m.Data, err)
	}
}
