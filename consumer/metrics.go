package consumer

import (
	"github.com/prometheus/client_golang/prometheus"
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
}

func newMetrics(reg prometheus.Registerer) *metrics {
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
	}
	if reg != nil {
		reg.MustRegister(m.runsActive, m.runsStarted, m.runsFinished, m.runsCancelled, m.eventsPublished,
			m.deltasCoalesced, m.publishSeconds, m.publishRetries, m.upstreamErrors, m.cancelRequests,
			m.cancelReplySeconds, m.completedAfterCancl, m.deadLetters, m.handoffs, m.lostOwnership)
	}
	return m
}
