package events_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is one embedded server with provisioned resources and a client.
type env struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	names  events.Names
	res    consumer.Resources
	client *events.Client
	store  testStore
}

// setup starts a server, provisions it and returns a client on it.
func setup(t *testing.T) *env {
	t.Helper()
	_, nc := natsembed.RunTest(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	names := events.Names{}
	res, err := consumer.Provision(ctx, js, names, consumer.ProvisionConfig{})
	if err != nil {
		t.Fatalf("provision: %v", err)
	}
	c, err := events.NewClient(nc, events.ClientConfig{HeartbeatInterval: 50 * time.Millisecond, CancelTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &env{nc: nc, js: js, names: names, res: res, client: c, store: testStore{res.State, nc}}
}

// testCtx is a context that ends with the test or after 20s.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// validRequest returns a request that passes validation.
func validRequest(runID string) events.RunRequest {
	return events.RunRequest{RunID: runID, Model: "gpt-4o-mini", Input: []byte(`"hello"`)}
}

// testStore reads and writes state records as a worker would, for tests
// that need a record in a given state.
type testStore struct {
	kv jetstream.KeyValue
	nc *nats.Conn
}

func (s testStore) Get(ctx context.Context, runID string) (events.RunState, uint64, error) {
	return events.ReadState(ctx, s.nc, s.kv.Bucket(), runID)
}

func (s testStore) Create(ctx context.Context, st events.RunState) (uint64, error) {
	now := time.Now().UTC()
	if st.UpdatedAt.IsZero() {
		st.UpdatedAt = now
	}
	if st.CreatedAt.IsZero() {
		st.CreatedAt = now
	}
	data, err := json.Marshal(st)
	if err != nil {
		return 0, err
	}
	return s.kv.Create(ctx, st.RunID, data)
}
