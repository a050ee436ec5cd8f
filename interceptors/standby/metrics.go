package standby

import "github.com/prometheus/client_golang/prometheus"

// The targets and reasons of sheba_db_reads_total.
const (
	// TargetStandby: the call ran on the standby.
	TargetStandby = "standby"
	// TargetPrimary: the call ran on the primary.
	TargetPrimary = "primary"

	// ReasonOK: the standby was within the lag bound and answered.
	ReasonOK = "ok"
	// ReasonLag: the standby was further behind than the bound.
	ReasonLag = "lag"
	// ReasonStandbyDown: no standby connection came, or the standby
	// failed the call.
	ReasonStandbyDown = "standby_down"
	// ReasonNotFoundFallback: the standby answered NotFound, and the
	// primary was asked.
	ReasonNotFoundFallback = "not_found_fallback"
	// ReasonRecentWrite: the caller wrote within the lag bound.
	ReasonRecentWrite = "recent_write"
)

// outcome is a target and a reason: where a read ran and why.
type outcome struct{ target, reason string }

// outcomes are the series of sheba_db_reads_total: a read runs on the
// standby for one reason only.
var outcomes = []outcome{
	{TargetStandby, ReasonOK},
	{TargetPrimary, ReasonLag},
	{TargetPrimary, ReasonStandbyDown},
	{TargetPrimary, ReasonNotFoundFallback},
	{TargetPrimary, ReasonRecentWrite},
}

// Metrics is the counter sheba_db_reads_total{target,reason}. Register it
// with prometheus.Registerer's Register. It is safe for concurrent use.
type Metrics struct {
	reads *prometheus.CounterVec
	// by holds the counter of each outcome, looked up once.
	by map[outcome]prometheus.Counter
}

// NewMetrics makes the counter, each of its series at 0.
func NewMetrics() *Metrics {
	m := &Metrics{
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sheba_db_reads_total",
			Help: "Read-only calls by where they finally ran (target: standby, primary) and why (reason: ok, lag, standby_down, not_found_fallback, recent_write).",
		}, []string{"target", "reason"}),
		by: make(map[outcome]prometheus.Counter, len(outcomes)),
	}
	for _, o := range outcomes {
		m.by[o] = m.reads.WithLabelValues(o.target, o.reason)
	}
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) { m.reads.Describe(ch) }

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) { m.reads.Collect(ch) }

func (m *Metrics) count(o outcome) {
	if m != nil {
		m.by[o].Inc()
	}
}
