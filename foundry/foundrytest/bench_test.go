package foundrytest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foundryq/foundryq/internal/testkit"
)

// benchEnv reads an integer knob of the benchmark from the environment.
func benchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkEmulatorThroughput holds FOUNDRYQ_BENCH_STREAMS (2000) concurrent
// background streaming responses with zero token delay and counts the
// response.output_text.delta events clients receive. b.N is the number of
// deltas to deliver; each stream carries FOUNDRYQ_BENCH_TOKENS (250) and
// is deleted when read, and each client opens the next one, so the
// concurrency holds for the whole run. Reported: deltas/s, the peak number
// of streams open at once (client side and server side), MB/s of SSE, and
// the CPU time per delta of server and client together (the machine may be
// shared). FOUNDRYQ_BENCH_MIN_DELTAS makes it fail below that rate.
//
//	go test -run '^$' -bench EmulatorThroughput -benchtime 4000000x ./foundry/foundrytest/
func BenchmarkEmulatorThroughput(b *testing.B) {
	streams := benchEnv("FOUNDRYQ_BENCH_STREAMS", 2000)
	tokens := benchEnv("FOUNDRYQ_BENCH_TOKENS", 250)
	res, err := measureThroughput(streams, tokens, max(streams, b.N/tokens), b.ResetTimer)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	rate := float64(res.deltas) / res.elapsed.Seconds()
	b.ReportMetric(rate, "deltas/s")
	b.ReportMetric(float64(res.peak), "streams")
	b.ReportMetric(float64(res.serverPeak), "server-peak-streams")
	b.ReportMetric(float64(res.dials), "dials")
	b.ReportMetric(float64(res.bytes)/res.elapsed.Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(res.cpu.Nanoseconds())/float64(res.deltas), "cpu-ns/delta")
	if floor := benchEnv("FOUNDRYQ_BENCH_MIN_DELTAS", 0); floor > 0 && rate < float64(floor) {
		b.Fatalf("%.0f deltas/s, want at least %d", rate, floor)
	}
}

// TestThroughputHarness runs the benchmark's harness small, so that it is
// checked by every test run.
func TestThroughputHarness(t *testing.T) {
	t.Parallel()
	res, err := measureThroughput(50, 30, 200, func() {})
	if err != nil {
		t.Fatal(err)
	}
	if res.deltas != 200*30 || res.peak != 50 || res.dials < 50 {
		t.Fatalf("%+v", res)
	}
}

// throughput is what measureThroughput saw.
type throughput struct {
	deltas, bytes           int64
	peak, serverPeak, dials int64
	elapsed, cpu            time.Duration
}

// measureThroughput reads total streams of tokens deltas each through
// streams concurrent clients. The first stream of every client waits, after
// its first event, until all clients have one open, so that all of them are
// held at once. begin is called just before the clients start.
func measureThroughput(streams, tokens, total int, begin func()) (throughput, error) {
	srv := NewServer(Config{})
	defer srv.Close()
	var dials atomic.Int64
	dialer := &net.Dialer{}
	tr := &http.Transport{MaxIdleConns: 2 * streams, MaxIdleConnsPerHost: 2 * streams, DisableCompression: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return dialer.DialContext(ctx, network, addr)
		}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	body := []byte(fmt.Sprintf(`{"model":"bench","input":"go","background":true,"store":true,"stream":true,`+
		`"metadata":{"run_id":"bench","emu_tokens":"%d","emu_token_ms":"0"}}`, tokens))

	var next, open, peak, received, bytesRead atomic.Int64
	var failed atomic.Value
	start := make(chan struct{})
	var allOpen, wg sync.WaitGroup
	allOpen.Add(streams)
	for w := 0; w < streams; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			arrived := sync.OnceFunc(allOpen.Done)
			defer arrived() // a client that fails must not hold the others
			arrive := func() { arrived(); allOpen.Wait() }
			rd := bufio.NewReaderSize(nil, 64<<10)
			<-start
			for next.Add(1) <= int64(total) {
				n, size, err := benchStream(client, srv, body, rd, &open, &peak, arrive)
				arrive = nil
				if err == nil && n != tokens {
					err = fmt.Errorf("stream carried %d deltas, want %d", n, tokens)
				}
				if err != nil {
					failed.Store(err)
					return
				}
				received.Add(int64(n))
				bytesRead.Add(size)
			}
		}()
	}
	begin()
	cpuBefore := testkit.CPUTime()
	began := time.Now()
	close(start)
	wg.Wait()
	res := throughput{
		deltas: received.Load(), bytes: bytesRead.Load(), peak: peak.Load(), dials: dials.Load(),
		elapsed: time.Since(began), cpu: testkit.CPUTime() - cpuBefore,
	}
	if err, _ := failed.Load().(error); err != nil {
		return res, err
	}
	st := srv.Stats()
	res.serverPeak = st.PeakOpenStreams
	switch {
	case res.peak < int64(streams):
		return res, fmt.Errorf("only %d streams were open at once, want %d", res.peak, streams)
	case st.OpenStreams != 0 || st.TokensGenerated != res.deltas || st.ResponsesCreated != int64(total):
		return res, fmt.Errorf("emulator counted %+v for %d deltas of %d streams", st, res.deltas, total)
	}
	return res, nil
}

var (
	deltaLine    = []byte("event: " + evTextDelta + "\n")
	completeLine = []byte("event: " + evCompleted + "\n")
	idPrefix     = []byte(`"id":"`)
)

// benchStream opens one stream, counts its delta frames reading raw lines
// (so the client costs little), checks it ends with response.completed and
// deletes the response. The peak of concurrently open streams is tracked;
// arrive, if not nil, is called once the first frame has been read.
func benchStream(client *http.Client, srv *Server, body []byte, rd *bufio.Reader, open, peak *atomic.Int64, arrive func()) (int, int64, error) {
	req, err := http.NewRequestWithContext(context.Background(), "POST", srv.BaseURL()+"responses", bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("create: %s", resp.Status)
	}
	if n := open.Add(1); n > peak.Load() {
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
	}
	defer open.Add(-1)
	rd.Reset(resp.Body)
	var id string
	deltas, completed := 0, false
	var size int64
	for {
		line, err := rd.ReadSlice('\n')
		size += int64(len(line))
		if err == io.EOF {
			break
		}
		if err != nil {
			return deltas, size, err
		}
		if arrive != nil && len(line) == 1 { // end of the first frame
			arrive()
			arrive = nil
		}
		switch {
		case bytes.Equal(line, deltaLine):
			deltas++
		case bytes.Equal(line, completeLine):
			completed = true
		case id == "" && bytes.HasPrefix(line, []byte("data: ")):
			if i := bytes.Index(line, idPrefix); i >= 0 {
				rest := line[i+len(idPrefix):]
				id = string(rest[:bytes.IndexByte(rest, '"')])
			}
		}
	}
	if !completed || !strings.HasPrefix(id, "resp_") {
		return deltas, size, fmt.Errorf("stream of %q ended without response.completed", id)
	}
	del, err := http.NewRequest("DELETE", srv.BaseURL()+"responses/"+id, nil)
	if err != nil {
		return deltas, size, err
	}
	dresp, err := client.Do(del)
	if err != nil {
		return deltas, size, err
	}
	_, _ = io.Copy(io.Discard, dresp.Body)
	dresp.Body.Close()
	return deltas, size, nil
}
