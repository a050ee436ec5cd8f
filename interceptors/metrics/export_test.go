package metrics

import "time"

// HandlingBuckets are the buckets of grpc_server_handling_seconds.
var HandlingBuckets = handlingBuckets

// ExemplarEvery is how often, at most, a series takes a new exemplar.
const ExemplarEvery = exemplarEvery

// SetClock makes now the clock of m's handling times and exemplars.
func SetClock(m *Metrics, now func() time.Time) {
	m.now = now
	m.epoch = now()
}
