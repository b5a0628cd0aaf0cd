package consumer

import (
	"fmt"
	"testing"

	"github.com/foundryq/foundryq/events"
)

// BenchmarkStateStoreRunWrites: the state writes of one run as its owner
// makes them (created queued, claimed, create started, response id,
// finished), on an embedded server over loopback. go test -run '^$'
// -bench StateStoreRunWrites -count 10 ./consumer/
func BenchmarkStateStoreRunWrites(b *testing.B) {
	s := testStore(b)
	ctx := b.Context()
	steps := []func(*events.RunState) error{
		func(st *events.RunState) error {
			st.Status, st.Owner, st.Attempt = events.StatusRunning, "w", 1
			return nil
		},
		func(st *events.RunState) error { st.Failures = 0; st.Owner = "w"; return nil },
		func(st *events.RunState) error { st.ResponseID = "resp_1"; return nil },
		func(st *events.RunState) error { st.Status = events.StatusCompleted; return nil },
	}
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("bench_%d", i)
		if _, err := s.Create(ctx, events.RunState{RunID: id, Status: events.StatusQueued}); err != nil {
			b.Fatal(err)
		}
		for _, f := range steps {
			if _, err := s.Update(ctx, id, f); err != nil {
				b.Fatal(err)
			}
		}
	}
}
