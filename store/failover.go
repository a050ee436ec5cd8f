package store

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Postgres error codes that say a connection's server can no longer take
// the writes sheba sends it (docs/operations.md#postgres-cluster).
const (
	// read_only_sql_transaction: the server was demoted, or made
	// read-only, and stays up.
	codeReadOnly = "25006"
	// admin_shutdown, crash_shutdown, cannot_connect_now: the server is
	// stopping, crashed, or is starting or in recovery.
	codeAdminShutdown    = "57P01"
	codeCrashShutdown    = "57P02"
	codeCannotConnectNow = "57P03"
	// Class 08, connection exception.
	classConnection = "08"
)

// serverGone reports whether err, from a query on a connection, says that
// the connection's server is not the primary any more: it is read-only,
// shutting down, or gone. A query that ran out of time or was cancelled
// says nothing of the server.
func serverGone(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return switchCode(pgErr.Code)
	}
	return connectionLost(err)
}

// switchCode reports whether a Postgres error code says the server is not
// the primary any more (serverGone).
func switchCode(code string) bool {
	switch code {
	case codeReadOnly, codeAdminShutdown, codeCrashShutdown, codeCannotConnectNow:
		return true
	}
	return len(code) == 5 && code[:2] == classConnection
}

// Failover follows the primary of a Postgres cluster in every pool opened
// with WithFailover (the API's, the health check's, the webhook queue's).
//
// Every connection is stamped with the generation current when it was
// made. When a query finds its server read-only, shutting down or gone
// (SQLSTATE 25006, 57P01-57P03, class 08, or a broken connection), and the
// connection's generation is the current one, the generation moves on:
// from then on every pool drops the connections of older generations
// instead of lending them (those in use when they come back), without a
// ping, so that the next query opens a connection, which on a URL with
// target_session_attrs=read-write reaches the server that accepts writes.
// The first failure of a switch does that; the others find their
// connection already stale. This is narrower than pgxpool's Reset, which
// would have to know every pool, and closes the connections made after the
// switch too.
//
// It also counts the switches it sees: a new connection that reaches
// another server, or another timeline of the same server, than the
// connection made before it (sheba_db_failovers_total).
type Failover struct {
	log *slog.Logger
	gen atomic.Uint64
	// conns holds the generation of each open connection.
	conns sync.Map // *pgx.Conn -> uint64

	mu     sync.Mutex
	server string // the server the last new connection reached
	// failovers counts the changes of server.
	failovers prometheus.Counter
}

// NewFailover returns a Failover that logs to log.
func NewFailover(log *slog.Logger) *Failover {
	return &Failover{
		log: log,
		failovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sheba_db_failovers_total",
			Help: "Times a new database connection reached another server, or another timeline, than the one before: switchovers and failovers sheba followed.",
		}),
	}
}

// Collector returns sheba_db_failovers_total.
func (f *Failover) Collector() prometheus.Collector { return f.failovers }

// Stale reports whether conn was made before its server was found gone:
// a connection held outside a pool (a listener) checks it to reconnect.
func (f *Failover) Stale(conn *pgx.Conn) bool {
	g, ok := f.conns.Load(conn)
	return ok && g.(uint64) < f.gen.Load()
}

// lost is told that a query on conn failed with err.
func (f *Failover) lost(conn *pgx.Conn, err error) {
	if !serverGone(err) {
		return
	}
	g, ok := f.conns.Load(conn)
	if !ok {
		return
	}
	if f.gen.CompareAndSwap(g.(uint64), g.(uint64)+1) {
		f.log.Warn("database server lost; reconnecting every pool", "error", err)
	}
}

// serverQuery names the server a connection reached: its address and, on
// a primary, its timeline (a promoted standby starts a new one), read
// from the name of the WAL file being written; pg_control_checkpoint's
// timeline changes only at the next checkpoint.
const serverQuery = `SELECT coalesce(host(inet_server_addr()), 'local') || ':' || coalesce(inet_server_port(), 0) ||
	CASE WHEN pg_is_in_recovery() THEN '' ELSE '/' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END`

// serverQueryTimeout bounds serverQuery at connect time.
const serverQueryTimeout = 2 * time.Second

// connected stamps a new connection and counts a change of server.
func (f *Failover) connected(ctx context.Context, conn *pgx.Conn) error {
	f.conns.Store(conn, f.gen.Load())
	ctx, cancel := context.WithTimeout(ctx, serverQueryTimeout)
	defer cancel()
	var server string
	if err := conn.QueryRow(ctx, serverQuery).Scan(&server); err != nil {
		// The connection is not proven good or bad by this; the queries
		// it is made for will tell.
		f.log.Debug("database server not named", "error", err)
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.server != "" && f.server != server {
		f.failovers.Inc()
		f.log.Warn("database server changed", "from", f.server, "to", server)
	}
	f.server = server
	return nil
}

// WithFailover makes the pool follow the primary with f (Failover): its
// connections are stamped when made, a query that finds its server gone
// makes every older connection stale, and stale connections are dropped
// instead of lent or taken back.
func WithFailover(f *Failover) PoolOption {
	return func(o *poolSetup) {
		cfg := o.cfg
		afterConnect, beforeClose := cfg.AfterConnect, cfg.BeforeClose
		prepare, afterRelease, shouldPing := cfg.PrepareConn, cfg.AfterRelease, cfg.ShouldPing
		cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			if afterConnect != nil {
				if err := afterConnect(ctx, conn); err != nil {
					return err
				}
			}
			return f.connected(ctx, conn)
		}
		cfg.BeforeClose = func(conn *pgx.Conn) {
			f.conns.Delete(conn)
			if beforeClose != nil {
				beforeClose(conn)
			}
		}
		// A stale connection is destroyed unpinged: its server may be
		// gone, and a ping would wait for it.
		cfg.ShouldPing = func(ctx context.Context, p pgxpool.ShouldPingParams) bool {
			if f.Stale(p.Conn) {
				return false
			}
			if shouldPing != nil {
				return shouldPing(ctx, p)
			}
			return p.IdleDuration > time.Second // pgxpool's default
		}
		cfg.PrepareConn = func(ctx context.Context, conn *pgx.Conn) (bool, error) {
			if f.Stale(conn) {
				return false, nil // destroyed; the pool lends another
			}
			if prepare != nil {
				return prepare(ctx, conn)
			}
			return true, nil
		}
		cfg.AfterRelease = func(conn *pgx.Conn) bool {
			if f.Stale(conn) {
				return false
			}
			return afterRelease == nil || afterRelease(conn)
		}
		o.tracers = append(o.tracers, failoverTracer{f})
	}
}

// failoverTracer tells its Failover of every failed query, batch and copy.
type failoverTracer struct{ f *Failover }

func (t failoverTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (t failoverTracer) TraceQueryEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	if data.Err != nil {
		t.f.lost(conn, data.Err)
	}
}

func (t failoverTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (t failoverTracer) TraceBatchQuery(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	if data.Err != nil {
		t.f.lost(conn, data.Err)
	}
}

func (t failoverTracer) TraceBatchEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchEndData) {
	if data.Err != nil {
		t.f.lost(conn, data.Err)
	}
}

func (t failoverTracer) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	return ctx
}

func (t failoverTracer) TraceCopyFromEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceCopyFromEndData) {
	if data.Err != nil {
		t.f.lost(conn, data.Err)
	}
}
