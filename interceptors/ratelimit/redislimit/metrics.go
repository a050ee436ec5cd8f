package redislimit

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Collector exposes the Backend's state as sheba_ratelimit_backend_up, the
// client's pool statistics as sheba_redis_pool_*, read at each scrape, and
// the fallback's decisions as sheba_ratelimit_fallback_decisions_total.
// Written here because go-redis's Prometheus collector (redisprometheus)
// is not published as a module version the build can fetch, and the names
// follow sheba_db_pool_* (docs/observability.md#metrics).
func (b *Backend) Collector() prometheus.Collector {
	return &collector{b: b}
}

type collector struct{ b *Backend }

var (
	upDesc = prometheus.NewDesc("sheba_ratelimit_backend_up",
		"1 while rate limits are decided in Redis, 0 while each replica falls back to its own buckets.", nil, nil)
	poolDescs = []struct {
		desc  *prometheus.Desc
		typ   prometheus.ValueType
		value func(*redis.PoolStats) float64
	}{
		{prometheus.NewDesc("sheba_redis_pool_total_conns", "Redis connections open now.", nil, nil),
			prometheus.GaugeValue, func(s *redis.PoolStats) float64 { return float64(s.TotalConns) }},
		{prometheus.NewDesc("sheba_redis_pool_idle_conns", "Idle Redis connections now.", nil, nil),
			prometheus.GaugeValue, func(s *redis.PoolStats) float64 { return float64(s.IdleConns) }},
		{prometheus.NewDesc("sheba_redis_pool_hits_total", "Times a free Redis connection was found in the pool.", nil, nil),
			prometheus.CounterValue, func(s *redis.PoolStats) float64 { return float64(s.Hits) }},
		{prometheus.NewDesc("sheba_redis_pool_misses_total", "Times no free Redis connection was in the pool.", nil, nil),
			prometheus.CounterValue, func(s *redis.PoolStats) float64 { return float64(s.Misses) }},
		{prometheus.NewDesc("sheba_redis_pool_timeouts_total", "Times waiting for a Redis connection timed out.", nil, nil),
			prometheus.CounterValue, func(s *redis.PoolStats) float64 { return float64(s.Timeouts) }},
		{prometheus.NewDesc("sheba_redis_pool_stale_conns_total", "Stale Redis connections removed from the pool.", nil, nil),
			prometheus.CounterValue, func(s *redis.PoolStats) float64 { return float64(s.StaleConns) }},
	}
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- upDesc
	for _, d := range poolDescs {
		ch <- d.desc
	}
	c.b.fallbackDecisions.Describe(ch)
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	up := 0.0
	if c.b.Up() {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, up)
	stats := c.b.client.PoolStats()
	for _, d := range poolDescs {
		ch <- prometheus.MustNewConstMetric(d.desc, d.typ, d.value(stats))
	}
	c.b.fallbackDecisions.Collect(ch)
}
