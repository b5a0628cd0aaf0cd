package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/internal/jserr"
)

// faultKinds is the number of fault kinds inject knows.
const faultKinds = 10

// fillStream is the stream that fills JetStream's store (fillSubject).
const fillStream = "CHAOSFILL"

// faults injects the chaos run's faults and tells the Auditor about the
// outages they cause. inject is called from one goroutine; submitted and
// cancel from any.
type faults struct {
	t      *testing.T
	s      *devstack.Stack
	js     jetstream.JetStream
	a      *Auditor
	proxy  *Proxy
	cutOff string // the id of the worker behind proxy
	// cancel cancels a run after a delay (set by TestChaos).
	cancel func(id string, delay time.Duration)

	count       map[string]int // faults injected, by kind
	ran         map[int]bool   // the kinds (inject's k) injected and exercised
	cutCancels  [2]int         // cancels sent while a worker was cut off: for its runs, for others
	noFaultsAPI bool           // the emulator has no /_emulator/faults

	mu     sync.Mutex
	recent []string // the last runs submitted
}

func newFaults(t *testing.T, s *devstack.Stack, js jetstream.JetStream, a *Auditor, proxy *Proxy, cutOff string) *faults {
	return &faults{t: t, s: s, js: js, a: a, proxy: proxy, cutOff: cutOff, count: map[string]int{}, ran: map[int]bool{}}
}

// submitted notes a run just submitted (a candidate for the cancels a
// fault sends).
func (f *faults) submitted(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recent = append(f.recent, id)
	if len(f.recent) > 30 {
		f.recent = f.recent[len(f.recent)-30:]
	}
}

func (f *faults) recentRuns() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.recent...)
}

// inject injects one fault of kind k (0 <= k < faultKinds) and returns
// when it is over (a throttle and Foundry's cancel faults last on a little
// after).
func (f *faults) inject(ctx context.Context, k int, fl *fleet, r *rand.Rand) {
	start := time.Now()
	exercised := true
	defer func() {
		f.t.Logf("fault %d from %s for %s", k, start.Format("15:04:05.000"), time.Since(start).Round(time.Millisecond))
		if exercised {
			f.ran[k] = true
		}
	}()
	switch k {
	case 0:
		f.count["worker SIGKILL"]++
		fl.kill()
		fl.start()
		f.a.Outage(OutageWorker, start, time.Now())
	case 1:
		f.count["worker SIGSTOP past the lease, SIGCONT"]++
		fl.pause(chaosAckWait + time.Duration(500+r.IntN(2000))*time.Millisecond)
		f.a.Outage(OutageWorker, start, time.Now())
	case 2:
		f.count["worker SIGTERM (hand-off)"]++
		fl.term()
		fl.start()
		f.a.Outage(OutageWorker, start, time.Now())
	case 3:
		f.count["NATS restart"]++
		from := time.Now()
		f.s.NATS.Stop()
		time.Sleep(time.Duration(200+r.IntN(1500)) * time.Millisecond) // the outage
		if err := f.s.NATS.Restart(); err != nil {
			f.t.Fatalf("restart NATS: %v", err)
		}
		f.a.Outage(OutageNATS, from, time.Now())
	case 4:
		f.count["upstream throttle (429 on every create)"]++
		f.s.Emulator.Throttle(time.Duration(500+r.IntN(2000))*time.Millisecond, 500*time.Millisecond)
	case 5:
		f.count["calm"]++
	case 6, 7:
		key, name := "cancel_fail_for", "Foundry's cancel failing"
		if k == 7 {
			key, name = "cancel_hang_for", "Foundry's cancel hanging"
		}
		d := time.Duration(3000+r.IntN(3000)) * time.Millisecond
		from := time.Now()
		if !f.emulatorFault(ctx, key, d) {
			f.count[name+" (not exercised: the emulator has no /_emulator/faults)"]++
			exercised = false
			return
		}
		f.count[name+", with cancels"]++
		f.a.Outage(OutageCancel, from, from.Add(d))
		f.cancelSome(f.recentRuns(), 4, r)
	case 8:
		f.count["a worker cut off from NATS past the lease, with cancels"]++
		f.cutOffWorker(ctx, r)
	case 9:
		f.count["store full past the store-full timeout, then freed"]++
		f.fillStore(ctx, r)
	}
}

// cancelSome cancels up to n of ids, picked at random, each within half
// a second; it returns how many.
func (f *faults) cancelSome(ids []string, n int, r *rand.Rand) int {
	r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	ids = ids[:min(n, len(ids))]
	for _, id := range ids {
		f.cancel(id, time.Duration(r.IntN(500))*time.Millisecond)
	}
	return len(ids)
}

// emulatorFault makes every cancel of the emulator fail (cancel_fail_for)
// or hang (cancel_hang_for) for d: POST /_emulator/faults?key=d. False if
// the emulator does not know the request.
func (f *faults) emulatorFault(ctx context.Context, key string, d time.Duration) bool {
	if f.noFaultsAPI {
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	u := f.s.Emulator.URL() + "/_emulator/faults?" + key + "=" + d.String()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, u, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Errorf("POST %s: %v", u, err)
		return false
	}
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		f.noFaultsAPI = true
		f.t.Logf("POST %s: %s: the emulator has no cancel faults; they are not exercised", u, resp.Status)
		return false
	case resp.StatusCode/100 != 2:
		f.t.Errorf("POST %s: %s", u, resp.Status)
		return false
	}
	return true
}

// cutOffWorker black-holes the proxied worker's NATS connection for
// longer than the lease and, meanwhile, cancels some of the runs it owns
// and some others (whose cancel requests it may be the one to answer).
func (f *faults) cutOffWorker(ctx context.Context, r *rand.Rand) {
	var owned, others []string
	for _, id := range f.recentRuns() {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, _, err := f.s.Client.State(sctx, id)
		cancel()
		switch {
		case err != nil || st.Finished():
		case st.Owner == f.cutOff:
			owned = append(owned, id)
		default:
			others = append(others, id)
		}
	}
	from := time.Now()
	f.proxy.Block()
	f.cutCancels[0] += f.cancelSome(owned, 3, r)
	f.cutCancels[1] += f.cancelSome(others, 3, r)
	time.Sleep(chaosAckWait + time.Duration(1000+r.IntN(1500))*time.Millisecond) // how long it stays cut off
	f.proxy.Resume()
	f.a.Outage(OutageBlackHole, from, time.Now())
}

// createFiller creates the filler stream (file storage, its own subject).
func (f *faults) createFiller(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := f.js.CreateOrUpdateStream(cctx, jetstream.StreamConfig{
		Name: fillStream, Subjects: []string{fillSubject}, Storage: jetstream.FileStorage,
	}); err != nil {
		f.t.Fatalf("create the filler stream: %v", err)
	}
}

// fillStore fills JetStream's store through the filler stream until it
// refuses even a one-byte message, keeps it full for longer than the
// workers' store-full timeout while some runs are cancelled, then purges
// the filler.
func (f *faults) fillStore(ctx context.Context, r *rand.Rand) {
	from := time.Now()
	defer func() { f.a.Outage(OutageStoreFull, from, time.Now()) }()
	size := 256 << 10
	payload := make([]byte, size)
	deadline := time.Now().Add(30 * time.Second)
	for size > 0 {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := f.js.Publish(pctx, fillSubject, payload[:size])
		cancel()
		switch {
		case err == nil:
		case jserr.StoreFull(err):
			size /= 4 // what is left may take a smaller message
		case time.Now().After(deadline):
			f.t.Errorf("fill the store: %v", err)
			size = 0
		}
	}
	full := time.Now()
	f.cancelSome(f.recentRuns(), 2, r)
	time.Sleep(chaosStoreFull + time.Duration(1000+r.IntN(2000))*time.Millisecond) // how long it stays full
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		stream, err := f.js.Stream(pctx, fillStream)
		if err == nil {
			err = stream.Purge(pctx)
		}
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(full.Add(30*time.Second)) || ctx.Err() != nil {
			f.t.Errorf("purge the filler stream: %v", err)
			return
		}
		time.Sleep(200 * time.Millisecond) // try again
	}
}

// String lists the faults injected.
func (f *faults) String() string {
	return fmt.Sprintf("%v; cancels sent while a worker was cut off: %d for its runs, %d for others",
		f.count, f.cutCancels[0], f.cutCancels[1])
}
