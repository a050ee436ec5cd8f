package webhooks

import "github.com/prometheus/client_golang/prometheus"

// metrics are the sheba_webhook_* metrics of docs/observability.md.
type metrics struct {
	attempts       *prometheus.CounterVec
	held           *prometheus.CounterVec
	deliveries     *prometheus.CounterVec
	backlog        prometheus.Gauge
	inflight       prometheus.Gauge
	latency        prometheus.Histogram
	attemptSeconds prometheus.Histogram
	queueRestarts  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sheba_webhook_attempts_total",
			Help: "Webhook requests sent, by result: success, http_error, gone, timeout, network_error.",
		}, []string{"result"}),
		held: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sheba_webhook_held_total",
			Help: "Webhook attempts held back and put back in the queue, by reason: throttle, concurrency, parked.",
		}, []string{"reason"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sheba_webhook_deliveries_total",
			Help: "Webhook deliveries ended, by state: succeeded, failed.",
		}, []string{"state"}),
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sheba_webhook_backlog",
			Help: "Webhook deliveries pending, over all replicas.",
		}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sheba_webhook_inflight",
			Help: "Webhook requests in flight from this replica.",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sheba_webhook_delivery_latency_seconds",
			Help:    "Time from an event to its successful delivery.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}),
		attemptSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sheba_webhook_attempt_duration_seconds",
			Help:    "Duration of one webhook request.",
			Buckets: prometheus.DefBuckets,
		}),
		queueRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sheba_webhook_queue_restarts_total",
			Help: "Times this replica replaced the producer of its webhook queue, found stalled (a job due, none running).",
		}),
	}
	for _, l := range []string{"success", "http_error", "gone", "timeout", "network_error"} {
		m.attempts.WithLabelValues(l)
	}
	for _, l := range []string{"throttle", "concurrency", "parked"} {
		m.held.WithLabelValues(l)
	}
	for _, l := range []string{"succeeded", "failed"} {
		m.deliveries.WithLabelValues(l)
	}
	for _, c := range []prometheus.Collector{m.attempts, m.held, m.deliveries, m.backlog, m.inflight, m.latency, m.attemptSeconds, m.queueRestarts} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
