package bench

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/foundryq/foundryq/foundry/foundrytest"
)

// TestReaderAgainstEmulator runs the bare reader on an emulator that
// records token times, and joins them: every token is received once, after
// it was generated, and the receipts add up to the text.
func TestReaderAgainstEmulator(t *testing.T) {
	emu := foundrytest.NewServer(foundrytest.Config{RecordTimes: true})
	defer emu.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := RunReader(ctx, ReaderConfig{BaseURL: emu.BaseURL(), Prefix: "rt", Runs: 5, Tokens: 30, TokenDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Tokens != 150 || len(res.Receipts) != 5 || res.CPU <= 0 {
		t.Fatalf("tokens %d, runs %d, cpu %d", res.Tokens, len(res.Receipts), res.CPU)
	}
	recs := emu.Handler().RecordsByPrefix("rt-")
	if len(recs) != 5 {
		t.Fatalf("%d records", len(recs))
	}
	for _, rec := range recs {
		rs := res.Receipts[rec.RunID]
		if len(rs) != 30 || rs[len(rs)-1].Cum != len(rec.Text) {
			t.Fatalf("%s: %d receipts, text %d bytes, last receipt %+v", rec.RunID, len(rs), len(rec.Text), rs[len(rs)-1])
		}
		ds := tokenLatencies(nil, rec, rs)
		if len(ds) != 30 {
			t.Fatalf("%s: %d latencies", rec.RunID, len(ds))
		}
		for _, d := range ds {
			if d < 0 || d > time.Minute {
				t.Fatalf("%s: latency %s", rec.RunID, d)
			}
		}
	}
}

// TestReadStream decodes frames, skips other lines, and takes a line longer
// than the read buffer.
func TestReadStream(t *testing.T) {
	long := strings.Repeat("x", 10_000)
	in := "event: response.created\ndata: {\"type\":\"response.created\"}\n\n" +
		": a comment\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"" + long + "\"}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\"}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"after the end\"}\n\n"
	var types []string
	var deltas []int
	if err := readStream(strings.NewReader(in), func(typ string, delta int) bool {
		types = append(types, typ)
		deltas = append(deltas, delta)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(types, ",") != "response.created,response.output_text.delta,response.completed" || deltas[1] != len(long) {
		t.Fatalf("types %v, deltas %v", types, deltas)
	}
	if err := readStream(strings.NewReader("data: {not json\n"), func(string, int) bool { return true }); err == nil {
		t.Fatal("bad JSON accepted")
	}
}

// TestReadGoStats parses the two gauges from a Prometheus page.
func TestReadGoStats(t *testing.T) {
	page := "# HELP go_goroutines Number of goroutines.\n# TYPE go_goroutines gauge\ngo_goroutines 412\n" +
		"go_memstats_heap_inuse_bytes 1.2345678e+07\ngo_memstats_heap_alloc_bytes 5\ngo_memstats_stack_inuse_bytes 65536\n"
	hs := newPageServer(t, page)
	got, err := readGoStats(context.Background(), http.DefaultClient, hs)
	if err != nil {
		t.Fatal(err)
	}
	if got.Goroutines != 412 || got.HeapInuse != 12345678 || got.StackInuse != 65536 {
		t.Fatalf("%+v", got)
	}
	if _, err := readGoStats(context.Background(), http.DefaultClient, newPageServer(t, "go_goroutines 3\n")); err == nil {
		t.Fatal("a page without the heap gauge accepted")
	}
}

// TestSteadyRate counts the middle half of a load's span only.
func TestSteadyRate(t *testing.T) {
	w := &watcher{runs: map[string]*watchedRun{}}
	// One run: a receipt every 10ms for 4s, 5 bytes each.
	r := &watchedRun{}
	for i := range 401 {
		r.receipts = append(r.receipts, receipt{At: int64(i) * int64(10*time.Millisecond), Cum: 5 * (i + 1)})
	}
	w.runs["a"] = r
	evs, text := w.steadyRate([]string{"a", "missing"})
	if evs < 99 || evs > 101 || text < 495 || text > 505 {
		t.Fatalf("%.1f events/s, %.1f bytes/s", evs, text)
	}
}
