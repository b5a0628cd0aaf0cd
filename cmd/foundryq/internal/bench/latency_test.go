package bench

import (
	"testing"
	"time"

	"github.com/foundryq/foundryq/foundry/foundrytest"
)

// TestTokenLatencies joins generation times with merged deliveries: a
// delivery carrying several tokens counts for each of them.
func TestTokenLatencies(t *testing.T) {
	rec := foundrytest.ResponseRecord{TokenTimes: []int64{100, 200, 300, 400}, TokenEnds: []int{5, 9, 14, 20}}
	rs := []receipt{{At: 150, Cum: 5}, {At: 350, Cum: 14}} // the fourth token never arrived
	got := tokenLatencies(nil, rec, rs)
	want := []time.Duration{50, 150, 50}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	p := percentiles([]time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond})
	if p.N != 3 || p.P50 != 2 || p.Max != 3 {
		t.Fatalf("percentiles %+v", p)
	}
}
