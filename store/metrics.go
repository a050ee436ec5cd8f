package store

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// poolCollector exposes pgxpool statistics as sheba_db_pool_* metrics.
// Written here rather than taken from a library because the sheba_db_pool_
// names are fixed (docs/observability.md#metrics), which the existing pgxpool collectors do not
// let us choose.
type poolCollector struct {
	stat  func() *pgxpool.Stat
	descs map[string]*prometheus.Desc
}

// PoolCollector returns a collector of the pool's statistics, read at each
// scrape.
func (s *Store) PoolCollector() prometheus.Collector {
	c := &poolCollector{stat: s.pool.Stat, descs: map[string]*prometheus.Desc{}}
	for name, help := range poolMetricHelp {
		c.descs[name] = prometheus.NewDesc("sheba_db_pool_"+name, help, nil, nil)
	}
	return c
}

var poolMetricHelp = map[string]string{
	"acquired_conns":                "Connections in use now.",
	"idle_conns":                    "Idle connections now.",
	"constructing_conns":            "Connections being opened now.",
	"total_conns":                   "Connections open now.",
	"max_conns":                     "Most connections the pool opens.",
	"acquires_total":                "Connections acquired from the pool.",
	"acquire_wait_seconds_total":    "Time spent waiting to acquire connections.",
	"empty_acquires_total":          "Acquires that had to wait for a connection.",
	"canceled_acquires_total":       "Acquires canceled by their context.",
	"new_conns_total":               "Connections opened.",
	"max_lifetime_destroyed_total":  "Connections closed for reaching their maximum lifetime.",
	"max_idle_time_destroyed_total": "Connections closed for idling too long.",
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stat()
	gauge := func(name string, v float64) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.GaugeValue, v)
	}
	counter := func(name string, v float64) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.CounterValue, v)
	}
	gauge("acquired_conns", float64(s.AcquiredConns()))
	gauge("idle_conns", float64(s.IdleConns()))
	gauge("constructing_conns", float64(s.ConstructingConns()))
	gauge("total_conns", float64(s.TotalConns()))
	gauge("max_conns", float64(s.MaxConns()))
	counter("acquires_total", float64(s.AcquireCount()))
	counter("acquire_wait_seconds_total", s.AcquireDuration().Seconds())
	counter("empty_acquires_total", float64(s.EmptyAcquireCount()))
	counter("canceled_acquires_total", float64(s.CanceledAcquireCount()))
	counter("new_conns_total", float64(s.NewConnsCount()))
	counter("max_lifetime_destroyed_total", float64(s.MaxLifetimeDestroyCount()))
	counter("max_idle_time_destroyed_total", float64(s.MaxIdleDestroyCount()))
}
