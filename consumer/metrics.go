package consumer

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
)

// metrics are the worker's Prometheus metrics, all in one place.
type metrics struct {
	runsActive          prometheus.Gauge
	runsStarted         *prometheus.CounterVec // by how: created, resumed, polled
	runsFinished        *prometheus.CounterVec // by terminal event type
	runsCancelled       *prometheus.CounterVec // by reason
	eventsPublished     *prometheus.CounterVec // by event type
	deltasCoalesced     prometheus.Counter
	publishSeconds      prometheus.Histogram
	publishRetries      prometheus.Counter
	upstreamErrors      *prometheus.CounterVec // by operation
	cancelRequests      *prometheus.CounterVec // by result
	cancelReplySeconds  prometheus.Histogram
	completedAfterCancl prometheus.Counter
	deadLetters         prometheus.Counter
	handoffs            prometheus.Counter
	lostOwnership       prometheus.Counter
	cancelsUnconfirmed  prometheus.Counter
	cancelsPending      prometheus.Gauge       // runs whose owner is calling Foundry's cancel now
	storeRefusals       *prometheus.CounterVec // writes JetStream refused, its store full, by what: event, state
	runsStalled         *prometheus.CounterVec // runs ended for a stalled upstream, by code
	deadlinesEnforced   prometheus.Counter
	runsPaused          prometheus.Counter       // runs that stopped to wait for their caller's answers
	inputAnswers        *prometheus.CounterVec   // answers to waiting runs, by result
	queueSeconds        *prometheus.HistogramVec // by fairness key and priority
	firstTokenSeconds   prometheus.Histogram
	runSeconds          *prometheus.HistogramVec // by outcome: completed, failed, cancelled
	upstreamSeconds     *prometheus.HistogramVec // by op and status
	tokens              *prometheus.CounterVec   // by kind: input, output, reasoning, cached
	toolCalls           *prometheus.CounterVec   // function calls sent to tools served over NATS, by tool and result
	toolSeconds         *prometheus.HistogramVec // their duration, by tool
	keyRunsActive       *prometheus.GaugeVec     // runs this worker owns now, by fairness key and priority
	keyTokens           *prometheus.CounterVec   // tokens the runs this worker ended used, by fairness key and priority
	keys                keyLabels                // the fairness keys with a label value of their own
	limits              limitMetrics
}

// limitMetrics are those of the fleet-wide caps and budgets (caps.go,
// budget.go), by fairness key or deployment.
type limitMetrics struct {
	keyRunning      *prometheus.GaugeVec   // runs holding a slot across the fleet, by fairness key
	keyWaits        *prometheus.CounterVec // runs handed back to wait, by fairness key and reason
	capSlotsLost    prometheus.Counter     // slots that expired before their worker renewed them
	budgetTokens    *prometheus.CounterVec // tokens this worker took from a budget (estimates), by deployment
	budgetTightened *prometheus.CounterVec // budgets tightened by Foundry's x-ratelimit-* headers, by deployment
}

func newLimitMetrics() limitMetrics {
	return limitMetrics{
		keyRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "foundryq", Name: "key_running", Help: "Runs holding a concurrency slot across the fleet, by fairness key, as this worker last saw them (with caps only).",
		}, []string{"key"}),
		keyWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "key_waits_total", Help: "Runs handed back to wait for a fleet-wide limit, by fairness key and reason (concurrency_cap, token_budget).",
		}, []string{"key", "reason"}),
		capSlotsLost: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "cap_slots_lost_total", Help: "Concurrency slots whose lease ran out before this worker renewed them (its key may have had one run too many).",
		}),
		budgetTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "budget_tokens_total", Help: "Tokens this worker took from a deployment's budget (the estimates of its creates), by deployment.",
		}, []string{"deployment"}),
		budgetTightened: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "budget_tightened_total", Help: "Creates whose x-ratelimit-remaining-tokens was applied to a deployment's budget, by deployment.",
		}, []string{"deployment"}),
	}
}

func (l limitMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{l.keyRunning, l.keyWaits, l.capSlotsLost, l.budgetTokens, l.budgetTightened}
}

// Label values set up front, so that every series a dashboard or an alert
// queries exists (at 0) from the worker's start, not only after its first
// occurrence.
var (
	terminalTypes  = []events.EventType{events.TypeRunCompleted, events.TypeRunFailed, events.TypeRunCancelled}
	cancelReasons  = []string{events.ReasonRequested, events.ReasonTimeout, events.ReasonAbandoned}
	cancelResults  = []string{string(events.CancelCancelling), string(events.CancelCancelled), string(events.CancelAlreadyFinished), string(events.CancelNotFound), "error"}
	upstreamOps    = []string{"create", "resume", "get", "cancel"}
	tokenKinds     = []string{"input", "output", "reasoning", "cached"}
	startedHows    = []string{"created", "resumed", "polled"}
	runOutcomes    = []string{"completed", "failed", "cancelled"}
	upstreamStatus = []string{"ok"} // others appear when seen
	priorities     = []events.Priority{events.PriorityHigh, events.PriorityNormal, events.PriorityLow}
)

// newMetrics makes the worker's metrics and registers them with reg (if
// not nil), with stuck, the gauge of runs that have stored no event for a
// while, computed when scraped.
func newMetrics(reg prometheus.Registerer, stuck func() float64) *metrics {
	m := &metrics{
		runsActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "foundryq", Name: "runs_active", Help: "Runs this worker owns now.",
		}),
		runsStarted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "runs_started_total", Help: "Runs taken, by how the upstream response was reached (created, resumed, polled).",
		}, []string{"how"}),
		runsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "runs_finished_total", Help: "Runs ended by this worker, by terminal event type.",
		}, []string{"type"}),
		runsCancelled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "runs_cancelled_total", Help: "Runs ended as run.cancelled, by reason.",
		}, []string{"reason"}),
		eventsPublished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "events_published_total", Help: "Run events stored on the events stream, by type.",
		}, []string{"type"}),
		deltasCoalesced: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "deltas_coalesced_total", Help: "Upstream text deltas merged into an event that was already queued.",
		}),
		publishSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "foundryq", Name: "event_publish_seconds", Help: "Time from publishing a run event to its JetStream ack.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		publishRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "event_publish_retries_total", Help: "Event publishes retried after a transient error.",
		}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "upstream_errors_total", Help: "Errors from Foundry, by operation.",
		}, []string{"op"}),
		cancelRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "cancel_requests_total", Help: "Cancel requests answered by this worker, by result.",
		}, []string{"result"}),
		cancelReplySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "foundryq", Name: "cancel_reply_seconds", Help: "Time to answer a cancel request.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		completedAfterCancl: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "completed_after_cancel_total", Help: "Cancelled runs that Foundry nevertheless reported completed.",
		}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "dead_letters_total", Help: "Run requests copied to the dead-letter stream.",
		}),
		handoffs: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "runs_handed_off_total", Help: "Runs handed to another worker at shutdown.",
		}),
		lostOwnership: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "runs_lost_ownership_total", Help: "Runs abandoned because another worker wrote their events.",
		}),
		cancelsUnconfirmed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "cancels_unconfirmed_total", Help: "Runs ended run.cancelled with upstream_status unconfirmed: Foundry confirmed no final status within --cancel-confirm-timeout (foreground responses, which Foundry cannot cancel, not counted).",
		}),
		cancelsPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "foundryq", Name: "cancels_pending", Help: "Runs this worker owns whose response it is cancelling upstream now (status cancelling).",
		}),
		storeRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "store_refusals_total", Help: "Writes JetStream refused because its store (or the stream's max_bytes) is full, by what was written (event, state).",
		}, []string{"what"}),
		runsStalled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "runs_stalled_total", Help: "Runs ended because their upstream stalled, by code (upstream_stalled, upstream_queued, store_full).",
		}, []string{"code"}),
		runsPaused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "runs_paused_total", Help: "Times a run's response stopped on approval requests or function calls and the run waited for its caller.",
		}),
		inputAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "input_answers_total", Help: "Answers to waiting runs this worker answered, by result (accepted, already_answered, unknown_id, run_finished, invalid).",
		}, []string{"result"}),
		deadlinesEnforced: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "deadlines_enforced_total", Help: "Runs owned by another worker whose passed deadline this worker enforced (cancelled upstream and recorded), their owner having let it pass.",
		}),
		queueSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "foundryq", Name: "run_queue_seconds", Help: "Time from a run request being stored to a worker taking it (first delivery only), by fairness key and priority.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 16),
		}, []string{"key", "priority"}),
		firstTokenSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "foundryq", Name: "time_to_first_token_seconds", Help: "Time from sending a create to Foundry to the run's first text being received.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
		runSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "foundryq", Name: "run_duration_seconds", Help: "Time from a run request being stored to its terminal event being stored, by outcome (completed, failed, cancelled).",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
		}, []string{"outcome"}),
		upstreamSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "foundryq", Name: "upstream_request_seconds", Help: "Duration of Foundry calls until their answer (for create and resume: until the stream's headers), " +
				"by operation (create, resume, get, cancel) and status (ok, the HTTP status of an error, or error, timeout, canceled when none came).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"op", "status"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "tokens_total", Help: "Tokens of the runs this worker ended, as Foundry reported them, by kind (input, output, reasoning, cached).",
		}, []string{"kind"}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "tool_calls_total", Help: "Function calls the worker sent to tools served over NATS, by tool and result " +
				"(completed, unserved: asked of the caller, error, timeout, dead: the service stopped answering, cancelled: given up, unsent: NATS failed).",
		}, []string{"tool", "result"}),
		toolSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "foundryq", Name: "tool_call_seconds", Help: "Time from sending a function call to a tool served over NATS to its end, by tool (calls nobody serves are not counted).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 16),
		}, []string{"tool"}),
		keyRunsActive: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "foundryq", Name: "key_runs_active", Help: "Runs this worker owns now, by fairness key and priority (summed: foundryq_runs_active).",
		}, []string{"key", "priority"}),
		keyTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "foundryq", Name: "key_tokens_total", Help: "Tokens (total_tokens) of the runs this worker ended, by fairness key and priority: rate() * 60 gives the tokens per minute spent.",
		}, []string{"key", "priority"}),
		keys:   keyLabels{own: make(map[string]struct{})},
		limits: newLimitMetrics(),
	}
	for _, t := range terminalTypes {
		m.runsFinished.WithLabelValues(string(t))
	}
	for _, r := range cancelReasons {
		m.runsCancelled.WithLabelValues(r)
	}
	for _, r := range cancelResults {
		m.cancelRequests.WithLabelValues(r)
	}
	for _, op := range upstreamOps {
		m.upstreamErrors.WithLabelValues(op)
		for _, st := range upstreamStatus {
			m.upstreamSeconds.WithLabelValues(op, st)
		}
	}
	for _, k := range tokenKinds {
		m.tokens.WithLabelValues(k)
	}
	for _, h := range startedHows {
		m.runsStarted.WithLabelValues(h)
	}
	for _, o := range runOutcomes {
		m.runSeconds.WithLabelValues(o)
	}
	for _, w := range []string{"event", "state"} {
		m.storeRefusals.WithLabelValues(w)
	}
	for _, c := range []string{events.CodeUpstreamStalled, events.CodeUpstreamQueued, events.CodeStoreFull} {
		m.runsStalled.WithLabelValues(c)
	}
	for _, p := range priorities {
		m.keyRunsActive.WithLabelValues(events.DefaultFairnessKey, string(p))
		m.keyTokens.WithLabelValues(events.DefaultFairnessKey, string(p))
	}
	if reg != nil {
		reg.MustRegister(m.runsActive, m.runsStarted, m.runsFinished, m.runsCancelled, m.eventsPublished,
			m.deltasCoalesced, m.publishSeconds, m.publishRetries, m.upstreamErrors, m.cancelRequests,
			m.cancelReplySeconds, m.completedAfterCancl, m.deadLetters, m.handoffs, m.lostOwnership,
			m.cancelsUnconfirmed, m.cancelsPending, m.storeRefusals, m.runsStalled, m.deadlinesEnforced, m.runsPaused, m.inputAnswers, m.queueSeconds, m.firstTokenSeconds, m.runSeconds, m.upstreamSeconds, m.tokens,
			m.toolCalls, m.toolSeconds, m.keyRunsActive, m.keyTokens)
		reg.MustRegister(m.limits.collectors()...)
		if stuck != nil {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Namespace: "foundryq", Name: "runs_stuck", Help: "Runs this worker owns that have stored no event for StuckAfter (--stuck-after); computed at each scrape.",
			}, stuck))
		}
	}
	return m
}

// runEnded counts a run whose terminal event ev was stored: its duration
// since the request was stored (submitted; zero when unknown) and the
// tokens Foundry reported.
func (m *metrics) runEnded(ev events.RunEvent, submitted time.Time) {
	m.runsFinished.WithLabelValues(string(ev.Type)).Inc()
	if !submitted.IsZero() {
		m.runSeconds.WithLabelValues(strings.TrimPrefix(string(ev.Type), "run.")).Observe(max(ev.Time.Sub(submitted).Seconds(), 0))
	}
	if u := ev.Usage; u != nil {
		m.tokens.WithLabelValues("input").Add(float64(u.InputTokens))
		m.tokens.WithLabelValues("output").Add(float64(u.OutputTokens))
		m.tokens.WithLabelValues("reasoning").Add(float64(u.ReasoningTokens))
		m.tokens.WithLabelValues("cached").Add(float64(u.CachedTokens))
	}
}

// otherKeys is the label value the per-key metrics give every fairness key
// past the bound of keyLabel.
const otherKeys = "_other"

// keyLabels are the fairness keys, besides those the configuration names,
// that have a label value of their own in this worker's per-key metrics.
type keyLabels struct {
	mu  sync.Mutex
	own map[string]struct{}
}

// admit reports whether key has a label value of its own, giving it one
// if fewer than most keys have one.
func (k *keyLabels) admit(key string, most int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.own[key]; ok {
		return true
	}
	if len(k.own) >= most {
		return false
	}
	k.own[key] = struct{}{}
	return true
}

// keyLabel is fairness key key's label value in the per-key metrics. Keys
// are the callers' strings (a tenant, a customer id), as many as they
// like, and each value is a series of every per-key metric: the keys the
// configuration names (Weights, Caps) and the default key keep their own,
// the first MetricKeys others this worker sees get theirs for as long as
// it runs, and every later key shares otherKeys.
func (w *Worker) keyLabel(key string) string {
	_, weighted := w.cfg.Weights[key]
	_, capped := w.cfg.Caps[key]
	if key == events.DefaultFairnessKey || weighted || capped || w.m.keys.admit(key, w.cfg.MetricKeys) {
		return key
	}
	return otherKeys
}

// laneLabels are the key and priority label values of lane f.
func (w *Worker) laneLabels(f events.Fairness) []string {
	return []string{w.keyLabel(f.Key), string(f.Priority)}
}

// countKeyTokens counts the tokens of the run this attempt ended by its
// fairness key and priority.
func (r *run) countKeyTokens() { r.w.countKeyTokens(r.endedTokens()) }

// countKeyTokens counts used tokens of run st, which this worker ended, by
// its fairness key and priority (a record from a worker before them has
// none: not counted).
func (w *Worker) countKeyTokens(st events.RunState, used int64) {
	if used > 0 && st.FairnessKey != "" {
		w.m.keyTokens.WithLabelValues(w.laneLabels(events.Fairness{Key: st.FairnessKey, Priority: st.Priority})...).Add(float64(used))
	}
}

// toolCallEnded counts a function call sent to a tool served over NATS.
func (m *metrics) toolCallEnded(res toolResult) {
	m.toolCalls.WithLabelValues(res.item.Name, string(res.end)).Inc()
	if res.end != toolUnserved {
		m.toolSeconds.WithLabelValues(res.item.Name).Observe(res.took.Seconds())
	}
}

// upstreamStatusOf is the status label of a Foundry call's result: "ok",
// the HTTP status code of an error answer, or "timeout", "canceled" or
// "error" when no answer came.
func upstreamStatusOf(err error) string {
	var apiErr *foundry.APIError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &apiErr) && apiErr.StatusCode > 0:
		return strconv.Itoa(apiErr.StatusCode)
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	default:
		return "error"
	}
}
