package jserr

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/internal/natsembed"
)

// TestStoreFull asks a real server for each refusal StoreFull must
// recognise (the server's store used up; a discard-new stream at its
// max_bytes) and one it must not (a subject's one message already there).
func TestStoreFull(t *testing.T) {
	srv, err := natsembed.Start(natsembed.Config{MaxStore: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ONE", Subjects: []string{"one.*"},
		MaxMsgsPerSubject: 1, Discard: jetstream.DiscardNew, DiscardNewPerSubject: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "one.a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	_, err = js.Publish(ctx, "one.a", []byte("y"))
	if !SubjectFull(err) || StoreFull(err) {
		t.Fatalf("second message on a one-message subject: SubjectFull %v, StoreFull %v (%v)", SubjectFull(err), StoreFull(err), err)
	}

	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "CAPPED", Subjects: []string{"capped"},
		MaxBytes: 64 << 10, Discard: jetstream.DiscardNew}); err != nil {
		t.Fatal(err)
	}
	err = fill(ctx, js, "capped", 1<<20)
	if !StoreFull(err) || SubjectFull(err) {
		t.Fatalf("stream at max_bytes: StoreFull %v, SubjectFull %v (%v)", StoreFull(err), SubjectFull(err), err)
	}

	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler"}}); err != nil {
		t.Fatal(err)
	}
	err = fill(ctx, js, "filler", 8<<20)
	if !StoreFull(err) {
		t.Fatalf("server store used up: StoreFull false (%v)", err)
	}
}

// fill publishes 16 KiB messages on subject until a publish fails (its
// error is returned) or limit bytes were stored (nil).
func fill(ctx context.Context, js jetstream.JetStream, subject string, limit int) error {
	payload := bytes.Repeat([]byte("f"), 16<<10)
	for n := 0; n < limit; n += len(payload) {
		if _, err := js.Publish(ctx, subject, payload); err != nil {
			return err
		}
	}
	return fmt.Errorf("stored %d bytes on %s without a refusal", limit, subject)
}
