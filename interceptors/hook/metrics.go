package hook

import "github.com/prometheus/client_golang/prometheus"

// The results of sheba_hook_requests_total.
const (
	// ResultContinue: the hook let the call go on.
	ResultContinue = "continue"
	// ResultBreak: the hook answered the call itself.
	ResultBreak = "break"
	// ResultError: the hook call failed; the failure mode answered.
	ResultError = "error"
	// ResultCached: a cached decision answered, without a hook call.
	ResultCached = "cached"
	// ResultSkipped: the breaker was open, so the hook was not called; the
	// failure mode answered.
	ResultSkipped = "skipped"
)

var results = []string{ResultContinue, ResultBreak, ResultError, ResultCached, ResultSkipped}

// durationBuckets resolve a hook on the same host (tens of µs) up to its
// timeout's order (100ms by default) and beyond.
var durationBuckets = []float64{
	0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
}

// Metrics are the hook's collectors: sheba_hook_requests_total{result} and
// sheba_hook_duration_seconds. Register them with prometheus.Registerer's
// Register. They are safe for concurrent use.
type Metrics struct {
	requests *prometheus.CounterVec
	duration prometheus.Histogram
	// byResult holds the counter of each result, looked up once.
	byResult map[string]prometheus.Counter
}

// NewMetrics makes the hook's collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sheba_hook_requests_total",
			Help: "Business calls the external hook decided, by result: continue, break, error (the hook call failed), cached (a cached decision), skipped (the breaker was open).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sheba_hook_duration_seconds",
			Help:    "Time of each call to the external hook, failed ones included.",
			Buckets: durationBuckets,
		}),
		byResult: make(map[string]prometheus.Counter, len(results)),
	}
	for _, r := range results {
		m.byResult[r] = m.requests.WithLabelValues(r)
	}
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.requests.Describe(ch)
	m.duration.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.requests.Collect(ch)
	m.duration.Collect(ch)
}

func (m *Metrics) count(result string) {
	if m != nil {
		m.byResult[result].Inc()
	}
}

func (m *Metrics) observe(seconds float64) {
	if m != nil {
		m.duration.Observe(seconds)
	}
}
