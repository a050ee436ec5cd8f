package store

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// PoolOption configures OpenPool.
type PoolOption func(*poolSetup)

// poolSetup is what a PoolOption changes: the pool's configuration, and
// tracers of queries beside the OpenTelemetry one.
type poolSetup struct {
	cfg     *pgxpool.Config
	tracers []pgx.QueryTracer
}

// WithCutOnCancel makes an ended context close its connection at once
// (pgx's own default) rather than send a cancel request and wait for its
// answer: for a pool whose connections only wait, such as the event hub's
// LISTEN, where no query is there to cancel and the wait would last the
// whole fallback (2 s) at every stop.
func WithCutOnCancel() PoolOption {
	return func(o *poolSetup) {
		o.cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
		}
	}
}

// WithStatementTimeout makes the server cancel any statement that runs
// longer than d (Postgres statement_timeout on every connection of the
// pool), a backstop under the request's own deadline: a query never
// outlives the longest request, even if the cancel request sent at the
// deadline is lost. d is rounded up to whole milliseconds; 0 leaves the
// server's setting.
func WithStatementTimeout(d time.Duration) PoolOption {
	return withMillis("statement_timeout", d)
}

// WithIdleInTransactionTimeout makes the server end the session of a
// transaction left idle longer than d between its statements (Postgres
// idle_in_transaction_session_timeout on every connection of the pool), a
// backstop under the rule that nothing waits while it holds a
// transaction: one whose owner stopped anyway gives back its connection
// slot and locks after d. d is rounded up to whole milliseconds; 0 leaves
// the server's setting.
func WithIdleInTransactionTimeout(d time.Duration) PoolOption {
	return withMillis("idle_in_transaction_session_timeout", d)
}

// withMillis sets the server parameter name, a time in milliseconds, to d
// on every connection, unless d is 0.
func withMillis(name string, d time.Duration) PoolOption {
	return func(o *poolSetup) {
		if d > 0 {
			ms := (d + time.Millisecond - 1) / time.Millisecond
			o.cfg.ConnConfig.RuntimeParams[name] = strconv.FormatInt(int64(ms), 10)
		}
	}
}

// cancelFallback is how long a query whose context ended may wait for the
// answer to its cancel request before its connection is cut: a cancel
// crosses the network twice.
const cancelFallback = 2 * time.Second

// cancelHandler returns the pgconn handler of an ended context: a cancel
// request sent at once, and the connection's deadline set fallback later
// in case no answer comes (the cancel was lost, or the server is gone).
func cancelHandler(fallback time.Duration) func(*pgconn.PgConn) ctxwatch.Handler {
	return func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: fallback}
	}
}

// How long a server that stopped answering can hold a connection
// (docs/operations.md#postgres-cluster), unless the URL says otherwise.
const (
	// connectTimeout bounds making a connection to each host of the URL
	// (connect_timeout): without it a host that drops packets stalls every
	// new connection for minutes before pgx tries the next.
	connectTimeout = 2 * time.Second
	// pingTimeout bounds the ping of a connection idle over a second
	// before it is lent; one that does not answer is dropped and another
	// lent.
	pingTimeout = 2 * time.Second
	// An idle connection whose server went silent is found by TCP
	// keep-alive after keepAliveIdle + keepAliveCount × keepAliveInterval
	// (25 s) rather than Linux's default two hours.
	keepAliveIdle     = 10 * time.Second
	keepAliveInterval = 5 * time.Second
	keepAliveCount    = 3
	// maxConnLifetime replaces every connection within half an hour (pgx:
	// an hour), plus up to a minute so they do not all go at once.
	maxConnLifetime       = 30 * time.Minute
	maxConnLifetimeJitter = time.Minute
)

// OpenPool returns a pool of at most maxConns connections to the database at
// url, with a span for every query traced to tp (db.system postgresql; the
// statement is recorded, its arguments never are). It connects lazily, so it
// succeeds while Postgres is down.
//
// A query whose context ends is cancelled with a Postgres cancel request
// rather than by closing its connection (pgx's default), so a timeout does
// not cost the pool a connection that must then be opened again
// (docs/operations.md#slow-database): under a slow database that is when new
// connections are dearest.
//
// Connections to a server that went silent are bounded: connect_timeout 2 s
// per host unless the URL gives one, a ping timeout, TCP keep-alive and a
// lifetime (the constants above).
func OpenPool(ctx context.Context, url string, maxConns int32, tp trace.TracerProvider, opts ...PoolOption) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.BuildContextWatcherHandler = cancelHandler(cancelFallback)
	boundDeadServers(cfg)
	setup := &poolSetup{cfg: cfg}
	for _, o := range opts {
		o(setup)
	}
	// With tracing off there is no tracer at all: otelpgx would still
	// run on every query against a no-op provider.
	if _, off := tp.(tracenoop.TracerProvider); !off {
		setup.tracers = append(setup.tracers, otelpgx.NewTracer(
			otelpgx.WithTracerProvider(tp),
			// otelpgx follows the newer conventions (db.system.name); the
			// older db.system key is what many backends still query.
			otelpgx.WithTracerAttributes(attribute.String("db.system", "postgresql")),
			// Query metrics come from sheba_db_pool_*, not from the tracer.
			otelpgx.WithMeterProvider(metricnoop.NewMeterProvider()),
		))
	}
	switch len(setup.tracers) {
	case 0:
	case 1:
		cfg.ConnConfig.Tracer = setup.tracers[0]
	default:
		cfg.ConnConfig.Tracer = multitracer.New(setup.tracers...)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	return pool, nil
}

// boundDeadServers applies the bounds of OpenPool's doc to cfg, leaving
// connect_timeout and pool_max_conn_lifetime as the URL gives them.
func boundDeadServers(cfg *pgxpool.Config) {
	cc := cfg.ConnConfig
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = connectTimeout
	}
	dialer := &net.Dialer{
		Timeout:         cc.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount},
	}
	cc.DialFunc = dialer.DialContext
	cfg.PingTimeout = pingTimeout
	if !strings.Contains(cfg.ConnString(), "pool_max_conn_lifetime") {
		cfg.MaxConnLifetime, cfg.MaxConnLifetimeJitter = maxConnLifetime, maxConnLifetimeJitter
	}
}
