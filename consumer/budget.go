package consumer

// Token budgets per deployment, shared by the fleet in the limits bucket
// (caps.go). Azure OpenAI counts, for every request a deployment takes,
// an estimate of its tokens (the prompt's, plus max_tokens) into a
// counter that is reset each minute, and answers 429 once the counter
// reaches the deployment's tokens-per-minute quota (Microsoft Learn,
// "Manage Azure OpenAI in Azure AI Foundry Models quota", Understanding
// rate limits: https://learn.microsoft.com/azure/ai-services/openai/how-to/quota).
// The budget does the same before a run is taken: one key per deployment
// and window, tpm.<deployment>.<window start>, holding the tokens spent in
// the window, raised by compare-and-set. A run whose estimate does not fit
// waits queued until the next window. The budget is tightened by what the
// service says: x-ratelimit-remaining-tokens (others spend on the same
// deployment), x-ratelimit-remaining-requests at 0, and a 429's
// Retry-After, which closes the deployment for every worker
// (tpm.<deployment>.closed, with that TTL).

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/internal/jserr"
)

// DefaultOutputTokens is what a create is estimated to produce when its
// request sets no max_output_tokens, unless Config.DefaultOutputTokens
// says otherwise.
const DefaultOutputTokens = 1000

// budgetShare is the part of a window's budget a priority may spend: the
// rest is kept for higher priorities.
func budgetShare(p events.Priority) float64 {
	switch p {
	case events.PriorityHigh:
		return 1
	case events.PriorityLow:
		return 0.7
	default:
		return 0.9
	}
}

// spent is the tokens a run took from its deployment's budget.
type spent struct {
	deployment string
	window     time.Time // the window it was spent in
	estimate   int64
}

// budgetName names the deployment a request goes to in Config.TokensPerMinute:
// the model deployment's name, or "agent:" and the agent's name.
func budgetName(req events.RunRequest) string {
	if req.Agent != nil {
		return "agent:" + req.Agent.Name
	}
	return req.Model
}

// estimateTokens is what a create is counted for before it is sent: its
// prompt, at four bytes a token, and its output limit.
func estimateTokens(req events.RunRequest, defaultOutput int) int64 {
	prompt := (len(req.Input) + len(req.Instructions) + 3) / 4
	out := req.MaxOutputTokens
	if out == 0 {
		out = defaultOutput
	}
	return int64(prompt + out)
}

// tokenBudget is the budget of a deployment per window; 0: none.
func (c Config) tokenBudget(deployment string) int64 {
	n := c.TokensPerMinute[deployment]
	return int64(float64(n) * c.BudgetWindow.Seconds() / 60)
}

// window is one window's record. ByKey is what each fairness key spent in
// it; Waiting holds the keys (with their weights) refused in the window
// before, whose runs come back at this one's start: a key that has spent
// more than one of them, for its weight, waits, so that a contended budget
// goes round the keys instead of to whichever key's runs ask first. A key
// waiting that no longer asks holds the others back for one window at
// most.
type window struct {
	Spent   int64            `json:"spent"`
	ByKey   map[string]int64 `json:"by_key,omitempty"`
	Waiting map[string]int   `json:"waiting,omitempty"`
}

// ahead reports whether key (of weight) spent more of the window, for its
// weight, than a key that waits for it.
func (w window) ahead(key string, weight int) bool {
	for other, ow := range w.Waiting {
		if other != key && w.ByKey[key]*int64(ow) > w.ByKey[other]*int64(weight) {
			return true
		}
	}
	return false
}

// closed is the record of a deployment every worker must leave alone.
type closed struct {
	Until time.Time `json:"until"`
}

// budgetToken turns a deployment name into one KV key token: characters a
// key may not hold (and '.') become =XX.
func budgetToken(name string) string {
	var b strings.Builder
	for i := range len(name) {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
		} else {
			b.WriteString("=" + strconv.FormatUint(uint64(c)>>4, 16) + strconv.FormatUint(uint64(c)&15, 16))
		}
	}
	return b.String()
}

func windowKey(deployment string, start time.Time) string {
	return "tpm." + budgetToken(deployment) + "." + strconv.FormatInt(start.Unix(), 10)
}

func closedKey(deployment string) string { return "tpm." + budgetToken(deployment) + ".closed" }

// budgetAttempts bounds the compare-and-set retries of one budget write.
const budgetAttempts = 20

// errContention: a budget record changed under every compare-and-set.
var errContention = errors.New("budget window: too much contention")

// reserve spends cost tokens of deployment's budget (limit per window of
// length win) for a run of priority share and fairness key (of weight). It
// reports false, with when to try again, if they do not fit: the window is
// spent, its key is ahead of a waiting one (window), or the deployment is
// closed; the key then waits in the next window's record. A first spend of
// a window always fits, however large: a run larger than the whole budget
// would otherwise never run.
func (l *limits) reserve(ctx context.Context, deployment string, limit, cost int64, share float64, win time.Duration, key string, weight int) (time.Time, bool, error) {
	now := time.Now()
	if until, err := l.closedUntil(ctx, deployment); err != nil {
		return time.Time{}, false, err
	} else if until.After(now) {
		return until, false, nil
	}
	start := now.Truncate(win)
	fits := false
	err := l.modify(ctx, windowKey(deployment, start), 2*win+time.Minute, func(cur *window) bool {
		fits = cur.Spent == 0 || float64(cur.Spent+cost) <= float64(limit)*share && !cur.ahead(key, weight)
		if fits {
			cur.Spent += cost
			if cur.ByKey == nil {
				cur.ByKey = make(map[string]int64)
			}
			cur.ByKey[key] += cost
		}
		return fits
	})
	switch {
	case errors.Is(err, errContention):
		return now.Add(win / 10), false, nil // come back shortly
	case err != nil:
		return time.Time{}, false, err
	case fits:
		return start, true, nil
	}
	next := start.Add(win)
	err = l.modify(ctx, windowKey(deployment, next), 3*win+time.Minute, func(cur *window) bool {
		if _, ok := cur.Waiting[key]; ok {
			return false
		}
		if cur.Waiting == nil {
			cur.Waiting = make(map[string]int)
		}
		cur.Waiting[key] = weight
		return true
	})
	if err != nil && !errors.Is(err, errContention) {
		return time.Time{}, false, err
	}
	return next, false, nil
}

// modify changes window key's record by compare-and-set (change returns
// false to leave it as it is); errContention if it changed under every
// attempt.
func (l *limits) modify(ctx context.Context, key string, ttl time.Duration, change func(*window) bool) error {
	for range budgetAttempts {
		cur, rev, err := l.window(ctx, key)
		if err != nil {
			return err
		}
		if !change(&cur) {
			return nil
		}
		data, _ := json.Marshal(cur)
		if _, err := l.update(ctx, key, data, rev, ttl); err == nil || !jserr.WrongLastSequence(err) {
			return err
		}
	}
	return errContention
}

// window reads a window's record and its revision (0: none yet).
func (l *limits) window(ctx context.Context, key string) (window, uint64, error) {
	e, err := l.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return window{}, 0, nil
	}
	if err != nil {
		return window{}, 0, err
	}
	var w window
	if json.Unmarshal(e.Value(), &w) != nil {
		w = window{} // unreadable: counted from 0 again
	}
	return w, e.Revision(), nil
}

// raise sets the window's spent tokens to at least floor (add > 0: adds
// it instead).
func (l *limits) raise(ctx context.Context, key string, floor, add int64, ttl time.Duration) error {
	return l.modify(ctx, key, ttl, func(cur *window) bool {
		next := max(cur.Spent, floor) + add
		if next == cur.Spent {
			return false
		}
		cur.Spent = next
		return true
	})
}

func (l *limits) closedUntil(ctx context.Context, deployment string) (time.Time, error) {
	e, err := l.kv.Get(ctx, closedKey(deployment))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	var c closed
	_ = json.Unmarshal(e.Value(), &c)
	return c.Until, nil
}

// close keeps every worker from spending deployment's budget until until
// (the key expires then), unless it is closed for longer already. Two
// workers closing at once: the last write wins, both waits being the
// service's.
func (l *limits) close(ctx context.Context, deployment string, until time.Time) error {
	if cur, err := l.closedUntil(ctx, deployment); err != nil || !cur.Before(until) {
		return err
	}
	data, _ := json.Marshal(closed{Until: until.UTC()})
	_, err := l.js.PublishMsg(ctx, &nats.Msg{Subject: l.prefix + closedKey(deployment), Data: data},
		jetstream.WithMsgTTL(max(time.Until(until), time.Second)))
	return err
}

// spend takes the run's estimate from its deployment's budget, if it has
// one; false, with when to try again, if it does not fit.
func (r *run) spend(req events.RunRequest, fair events.Fairness) (time.Time, bool) {
	w := r.w
	dep := budgetName(req)
	limit := w.cfg.tokenBudget(dep)
	if limit <= 0 {
		return time.Time{}, true
	}
	cost := estimateTokens(req, w.cfg.DefaultOutputTokens)
	ctx, cancel := context.WithTimeout(r.hard, 10*time.Second)
	defer cancel()
	at, ok, err := w.limits.reserve(ctx, dep, limit, cost, budgetShare(fair.Priority), w.cfg.BudgetWindow, fair.Key, w.cfg.keyWeight(fair.Key))
	if err != nil {
		// The budget cannot be read: the run goes ahead, as without a
		// budget; Foundry's 429 and the create limiter still hold it back.
		r.logger().Warn().Err(err).Str("deployment", dep).Msg("spend the token budget; going ahead without it")
		return time.Time{}, true
	}
	if !ok {
		return at, false
	}
	r.mu.Lock()
	r.spent = &spent{deployment: dep, window: at, estimate: cost}
	r.mu.Unlock()
	w.m.limits.budgetTokens.WithLabelValues(dep).Add(float64(cost))
	return time.Time{}, true
}

// endedTokens returns the run's record and, if this attempt ended the run,
// the tokens (total_tokens) its responses used; 0 otherwise, so that they
// are counted once, by the worker that ended it.
func (r *run) endedTokens() (events.RunState, int64) {
	st := r.lastState()
	if st.Usage == nil || !st.Finished() || !r.owner.owns(&st) {
		return st, 0
	}
	return st, st.Usage.TotalTokens
}

// settleSpend charges the run's deployment the tokens its responses
// reported beyond the estimate, in the window it spent in (Azure counts
// the estimate; a run that used less is not refunded, as the service
// does not refund it either).
func (r *run) settleSpend() {
	_, used := r.endedTokens()
	r.mu.Lock()
	s := r.spent
	r.spent = nil
	r.mu.Unlock()
	if s == nil || used <= s.estimate {
		return
	}
	win := r.w.cfg.BudgetWindow
	if time.Since(s.window) > win {
		return // that window is over
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.w.limits.raise(ctx, windowKey(s.deployment, s.window), 0, used-s.estimate, 2*win+time.Minute); err != nil {
		r.logger().Debug().Err(err).Msg("charge the budget what the run used beyond its estimate")
	}
}

// observeRateLimit tightens the budget of req's deployment by what the
// create's answer said: the tokens left this minute (the service counts
// others' requests too), and no requests left.
func (w *Worker) observeRateLimit(ctx context.Context, req events.RunRequest, rl foundry.RateLimit) {
	dep := budgetName(req)
	limit := w.cfg.tokenBudget(dep)
	if w.limits == nil || limit <= 0 {
		return
	}
	win := w.cfg.BudgetWindow
	if rl.RemainingTokens > 0 || (rl.RemainingTokens == 0 && rl.ResetTokens > 0) {
		key := windowKey(dep, time.Now().Truncate(win))
		if err := w.limits.raise(ctx, key, limit-rl.RemainingTokens, 0, 2*win+time.Minute); err != nil {
			w.log.Debug().Err(err).Str("deployment", dep).Msg("tighten the token budget")
		} else {
			w.m.limits.budgetTightened.WithLabelValues(dep).Inc()
		}
	}
	if rl.RemainingRequests == 0 && rl.ResetRequests > 0 {
		w.closeBudget(ctx, dep, rl.ResetRequests)
	}
}

// rateLimited closes the budget of req's deployment for the wait a 429
// asked for, for every worker.
func (w *Worker) rateLimited(ctx context.Context, req events.RunRequest, wait time.Duration) {
	dep := budgetName(req)
	if w.limits == nil || w.cfg.tokenBudget(dep) <= 0 {
		return
	}
	w.closeBudget(ctx, dep, max(wait, time.Second))
}

func (w *Worker) closeBudget(ctx context.Context, dep string, wait time.Duration) {
	if err := w.limits.close(ctx, dep, time.Now().Add(wait)); err != nil {
		w.log.Debug().Err(err).Str("deployment", dep).Msg("close the token budget")
	}
}

// budgetDelay is how long a run that did not fit waits: until the budget
// opens again, higher priorities first, with a jitter.
func budgetDelay(until time.Time, p events.Priority) time.Duration {
	var after time.Duration
	switch p {
	case events.PriorityNormal:
		after = 100 * time.Millisecond
	case events.PriorityLow:
		after = 300 * time.Millisecond
	}
	return max(time.Until(until), 0) + after + rand.N(100*time.Millisecond)
}
