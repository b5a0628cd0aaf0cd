package jserr

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

// TestStoreFull asks a real server for each refusal StoreFull must
// recognise (the server's store used up; a discard-new stream at its
// max_bytes) and one it must not (a subject's one message already there).
func TestStoreFull(t *testing.T) {
	srv := natsembed.StartT(t, natsembed.Config{MaxStore: 4 << 20})
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
	err = testkit.Fill(ctx, js, "capped", 16<<10, 1<<20)
	if !StoreFull(err) || SubjectFull(err) {
		t.Fatalf("stream at max_bytes: StoreFull %v, SubjectFull %v (%v)", StoreFull(err), SubjectFull(err), err)
	}

	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler"}}); err != nil {
		t.Fatal(err)
	}
	err = testkit.Fill(ctx, js, "filler", 16<<10, 8<<20)
	if !StoreFull(err) {
		t.Fatalf("server store used up: StoreFull false (%v)", err)
	}
}
