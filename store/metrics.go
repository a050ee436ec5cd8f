package store

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// poolCollector exposes pgxpool statistics as sheba_db_pool_* metrics, one
// series per pool with a pool label. Written here rather than taken from a
// library because the sheba_db_pool_ names are fixed
// (docs/observability.md#metrics), which the existing pgxpool collectors do
// not let us choose.
type poolCollector struct {
	pools map[string]*pgxpool.Pool
	descs map[string]*prometheus.Desc
}

// Pool names of the pool label (docs/observability.md#metrics).
const (
	PoolPrimary = "primary" // the API's pool on database.url
	PoolStandby = "standby" // the read-only methods' pool on database.read_url
	PoolRiver   = "river"   // the webhook queue's pool
)

// PoolCollector returns a collector of the statistics of pools, by the
// name of their pool label, read at each scrape.
func PoolCollector(pools map[string]*pgxpool.Pool) prometheus.Collector {
	c := &poolCollector{pools: pools, descs: map[string]*prometheus.Desc{}}
	for name, help := range poolMetricHelp {
		c.descs[name] = prometheus.NewDesc("sheba_db_pool_"+name, help, []string{"pool"}, nil)
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
	for name, pool := range c.pools {
		c.collect(ch, name, pool.Stat())
	}
}

// collect sends the statistics s of the pool called pool.
func (c *poolCollector) collect(ch chan<- prometheus.Metric, pool string, s *pgxpool.Stat) {
	gauge := func(name string, v float64) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.GaugeValue, v, pool)
	}
	counter := func(name string, v float64) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.CounterValue, v, pool)
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
