package gateway

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limits are the per-token bounds: requests per second and event streams
// open at once (Config.RateLimit, RateBurst, MaxStreamsPerToken). A token
// is keyed by its digest; without authentication the client's address
// stands for it.
type limits struct {
	rate    rate.Limit
	burst   int
	streams int

	mu sync.Mutex
	by map[string]*limitEntry
}

type limitEntry struct {
	lim     *rate.Limiter
	streams int
	seen    time.Time
}

// maxLimitEntries is when idle entries (no stream, unused for pruneAfter)
// are dropped: without authentication every client address has one.
const (
	maxLimitEntries = 10000
	pruneAfter      = 10 * time.Minute
)

func newLimits(cfg Config) *limits {
	return &limits{rate: rate.Limit(cfg.RateLimit), burst: cfg.RateBurst, streams: cfg.MaxStreamsPerToken, by: map[string]*limitEntry{}}
}

func (l *limits) entry(key string, now time.Time) *limitEntry {
	e := l.by[key]
	if e == nil {
		if len(l.by) >= maxLimitEntries {
			for k, o := range l.by {
				if o.streams == 0 && now.Sub(o.seen) > pruneAfter {
					delete(l.by, k)
				}
			}
		}
		e = &limitEntry{lim: rate.NewLimiter(l.rate, l.burst)}
		l.by[key] = e
	}
	e.seen = now
	return e
}

// allow takes one request from key's budget, or says how long to wait.
func (l *limits) allow(key string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.entry(key, now).lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d, false
	}
	return 0, true
}

// openStream takes one of key's stream slots; release gives it back.
func (l *limits) openStream(key string, now time.Time) (release func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entry(key, now)
	if e.streams >= l.streams {
		return nil, false
	}
	e.streams++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			e.streams--
			l.mu.Unlock()
		})
	}, true
}

// tooMany answers 429 with Retry-After (whole seconds, at least 1).
func tooMany(w http.ResponseWriter, wait time.Duration, format string, args ...any) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
	writeError(w, apiErr(http.StatusTooManyRequests, CodeTooManyRequests, format, args...))
}

// clientKey is the limits' key of a request without a token: its
// client's address.
func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "addr:" + host
}
