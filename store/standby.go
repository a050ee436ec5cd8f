package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// Standby is a pool of connections to standbys (database.read_url: a
// standby, or a pooler in front of several), each connection knowing the
// replay lag of the server it reaches. The read-only methods may run their
// queries on one of its connections (StandbyConn.Context);
// docs/operations.md#reading-from-standbys says when. It is safe for
// concurrent use.
type Standby struct {
	pool *pgxpool.Pool
	// lastLag is the lag last measured on any connection, in seconds
	// (math.Float64bits; +Inf when it could not be known, NaN before the
	// first measurement).
	lastLag atomic.Uint64
	// downUntil is when the standby is tried again after a failure (on
	// the clock of now).
	downUntil atomic.Int64
	// now is the time on the Standby's clock: since it opened, monotonic.
	now func() time.Duration
}

// The standby's timings.
const (
	// lagCheckInterval is how old a connection's lag may be when the
	// connection is used; an older one is measured again first. Behind a
	// pooler each connection may reach another standby, so the lag is a
	// connection's, not the pool's.
	lagCheckInterval = time.Second
	// standbyWait bounds the wait for a connection (opened if need be, its
	// lag checked): past it the call is better served by the primary.
	standbyWait = time.Second
	// standbyRetry is how long a standby that failed is not asked again:
	// meanwhile calls go to the primary at once rather than each waiting
	// for a connection that does not come.
	standbyRetry = time.Second
)

// UnknownLag is the lag of a standby that is behind (or does not stream)
// and has replayed no transaction since it started: its lag cannot be
// known, and it is not to be read from.
const UnknownLag = time.Duration(math.MaxInt64)

// ErrStandbyDown is the error of Acquire while a standby that failed is
// left alone (for a second after the failure).
var ErrStandbyDown = fmt.Errorf("%w: standby failed recently", ErrUnavailable)

// OpenStandby opens a pool of at most maxConns connections to the standby
// at url, as OpenPool does (lazily, traced to tp, with opts), whose
// connections measure their server's replay lag when they are made and,
// when used, if their last measure is older than a second. Close it with
// Close.
func OpenStandby(ctx context.Context, url string, maxConns int32, tp trace.TracerProvider, opts ...PoolOption) (*Standby, error) {
	epoch := time.Now()
	s := &Standby{now: func() time.Duration { return time.Since(epoch) }}
	s.lastLag.Store(math.Float64bits(math.NaN()))
	pool, err := OpenPool(ctx, url, maxConns, tp, append(opts, s.checkLag)...)
	if err != nil {
		return nil, err
	}
	s.pool = pool
	return s, nil
}

// Pool is the standby's pool, for its statistics.
func (s *Standby) Pool() *pgxpool.Pool { return s.pool }

// Close closes the pool, waiting for the connections in use.
func (s *Standby) Close() { s.pool.Close() }

// checkLag measures the lag of every connection when it is made, and again
// before it is used if its measure is older than lagCheckInterval. The
// measure is a query, so it also proves the connection alive: the pool's
// own ping of a connection idle for over a second (pgxpool's default),
// which would come first, is left out.
func (s *Standby) checkLag(o *poolSetup) {
	c := o.cfg
	afterConnect, prepare := c.AfterConnect, c.PrepareConn
	c.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if afterConnect != nil {
			if err := afterConnect(ctx, conn); err != nil {
				return err
			}
		}
		return s.measure(ctx, conn)
	}
	c.PrepareConn = func(ctx context.Context, conn *pgx.Conn) (bool, error) {
		if prepare != nil {
			if ok, err := prepare(ctx, conn); !ok || err != nil {
				return ok, err
			}
		}
		if l, ok := lagOf(conn); ok && s.now()-l.checked < lagCheckInterval {
			return true, nil
		}
		if err := s.measure(ctx, conn); err != nil {
			if conn.IsClosed() && ctx.Err() == nil {
				// It broke (its server restarted, say): the pool tries
				// another, or opens a new one.
				return false, nil
			}
			return false, err
		}
		return true, nil
	}
	c.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
}

// lagSQL is the replay lag of the server, in seconds (docs/operations.md
// #reading-from-standbys): 0 for a server that is not a standby; 0 for one
// that has replayed all it has received while it streams from the primary,
// so that an idle primary does not look like lag; else the age of the last
// transaction it replayed (NULL when it replayed none since it started).
//
// pg_stat_wal_receiver shows its status only to pg_read_all_stats; to
// other roles it shows the receiver's pid alone, which is there while a
// receiver runs (streaming, or starting to).
const lagSQL = `
SELECT CASE
	WHEN NOT pg_is_in_recovery() THEN 0
	WHEN pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn()
		AND EXISTS (SELECT FROM pg_stat_wal_receiver WHERE coalesce(status = 'streaming', pid IS NOT NULL)) THEN 0
	ELSE greatest(0, extract(epoch FROM now() - pg_last_xact_replay_timestamp()))
END::float8`

// connLag is what a connection knows of its server's lag.
type connLag struct {
	lag time.Duration
	// checked is when lag was measured, on the Standby's clock.
	checked time.Duration
}

const lagDataKey = "sheba.standby.lag"

// lagOf returns what conn knows of its server's lag, if it measured it.
func lagOf(conn *pgx.Conn) (connLag, bool) {
	l, ok := conn.PgConn().CustomData()[lagDataKey].(connLag)
	return l, ok
}

// measure queries the lag of conn's server and keeps it with conn.
func (s *Standby) measure(ctx context.Context, conn *pgx.Conn) error {
	var secs *float64
	if err := conn.QueryRow(ctx, lagSQL).Scan(&secs); err != nil {
		return fmt.Errorf("measure standby lag: %w", err)
	}
	l := connLag{lag: UnknownLag, checked: s.now()}
	gauge := math.Inf(1)
	if secs != nil {
		gauge = *secs
		l.lag = time.Duration(*secs * float64(time.Second))
	}
	conn.PgConn().CustomData()[lagDataKey] = l
	s.lastLag.Store(math.Float64bits(gauge))
	return nil
}

// Acquire returns a connection to a standby, its lag measured at most a
// second ago, for one call; release it with Release. It fails with an
// error wrapping ErrUnavailable when no connection comes within a second
// (the standby is down, or every connection busy), and then for a second
// with ErrStandbyDown without trying; or with ctx's error.
func (s *Standby) Acquire(ctx context.Context) (*StandbyConn, error) {
	if s.now() < time.Duration(s.downUntil.Load()) {
		return nil, ErrStandbyDown
	}
	wait, cancel := context.WithTimeout(ctx, standbyWait)
	defer cancel()
	conn, err := s.pool.Acquire(wait)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.down()
		err = translate(err)
		if !errors.Is(err, ErrUnavailable) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return nil, fmt.Errorf("acquire standby connection: %w", err)
	}
	// Every connection measured its lag when it was made.
	l, _ := lagOf(conn.Conn())
	return &StandbyConn{s: s, conn: conn, lag: l.lag}, nil
}

// down leaves the standby alone for standbyRetry.
func (s *Standby) down() {
	s.downUntil.Store(int64(s.now() + standbyRetry))
}

// Collector returns the gauge sheba_db_standby_lag_seconds: the lag last
// measured, read at each scrape.
func (s *Standby) Collector() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sheba_db_standby_lag_seconds",
		Help: "Replay lag of the standby (database.read_url) last measured on one of its connections: 0 while it streams and has replayed all it received from the primary; +Inf when unknown; NaN before the first measure.",
	}, func() float64 { return math.Float64frombits(s.lastLag.Load()) })
}

// StandbyConn is a connection to a standby, held by one call.
type StandbyConn struct {
	s    *Standby
	conn *pgxpool.Conn
	lag  time.Duration
}

// Lag is the replay lag of c's server, measured at most a second ago
// (UnknownLag when it cannot be known).
func (c *StandbyConn) Lag() time.Duration { return c.lag }

type standbyKey struct{}

// Context returns ctx in which the Store's methods run their queries on
// c, one at a time, until c is released; InTx and WithLazyTx still run on
// the primary, and so does every method called within them.
func (c *StandbyConn) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, standbyKey{}, c)
}

// standbyFromContext returns the standby connection of ctx, if any.
func standbyFromContext(ctx context.Context) (*StandbyConn, bool) {
	c, ok := ctx.Value(standbyKey{}).(*StandbyConn)
	return c, ok
}

// Release gives c back to its pool. It reports whether c broke while it
// was held (its server went away): then the standby is left alone for a
// second, as when Acquire fails.
func (c *StandbyConn) Release() (broken bool) {
	broken = c.conn.Conn().IsClosed()
	c.conn.Release()
	if broken {
		c.s.down()
	}
	return broken
}
