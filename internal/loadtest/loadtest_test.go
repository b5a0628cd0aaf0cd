package loadtest

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSmall runs both phases at a small scale and checks the outcome, so
// that the benchmark's harness is exercised on every test run.
func TestSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Runs: 20, Tokens: 10, CancelSpread: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.RelayTokens != 200 || rep.FirstToken.N != 20 || rep.CancelReply.N != 20 || rep.CancelToEvent.N != 20 {
		t.Fatalf("report %+v", rep)
	}
	if rep.UpstreamCancelled != 20 || rep.ResponsesNotCancelled != 0 || rep.TokensAfterCancel != 0 || rep.CancelledEventsMissing != 0 {
		t.Fatalf("cancel phase: %+v", rep)
	}
}

// BenchmarkCancel measures cancel latency with LOADTEST_RUNS (default 500)
// concurrent streaming runs on two workers; each iteration is a whole load
// test. Run it with -benchtime=1x:
//
//	go test -run '^$' -bench Cancel -benchtime 1x ./internal/loadtest/
func BenchmarkCancel(b *testing.B) {
	runs := 500
	if v, err := strconv.Atoi(os.Getenv("LOADTEST_RUNS")); err == nil && v > 0 {
		runs = v
	}
	for b.Loop() {
		rep, err := Run(context.Background(), Config{Runs: runs})
		if err != nil {
			b.Fatal(err)
		}
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		b.ReportMetric(ms(rep.CancelReply.P50), "reply-p50-ms")
		b.ReportMetric(ms(rep.CancelReply.P99), "reply-p99-ms")
		b.ReportMetric(ms(rep.CancelToEvent.P50), "cancelled-p50-ms")
		b.ReportMetric(ms(rep.CancelToEvent.P99), "cancelled-p99-ms")
		b.ReportMetric(float64(rep.RelayTokens)/rep.RelayElapsed.Seconds(), "relay-tokens/s")
		b.ReportMetric(float64(rep.TokensAfterCancel), "tokens-after-cancel")
	}
}
