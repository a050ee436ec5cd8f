package store_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

// backendPIDs acquires n connections of pool at once and returns their
// server process ids, then gives them back.
func backendPIDs(t *testing.T, pool *pgxpool.Pool, n int) []uint32 {
	t.Helper()
	var pids []uint32
	var conns []*pgxpool.Conn
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		pids = append(pids, c.Conn().PgConn().PID())
	}
	slices.Sort(pids)
	return pids
}

// TestFailoverDropsTheServersConnections ends one connection's session on
// the server (pg_terminate_backend: SQLSTATE 57P01, what every session
// sees when its server stops) and checks that the query that finds it
// answers ErrUnavailable, and that from then on neither that pool nor
// another one on the same Failover lends a connection made before it:
// every connection lent after is new. One failure drops the old
// connections once: a second one, on a connection already stale, opens
// nothing more.
func TestFailoverDropsTheServersConnections(t *testing.T) {
	t.Parallel()
	url := storetest.NewDatabase(t)
	f := store.NewFailover(slog.New(slog.DiscardHandler))
	open := func() *pgxpool.Pool {
		pool, err := store.OpenPool(t.Context(), url, 3, tracenoop.NewTracerProvider(), store.WithFailover(f))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	api, river := open(), open()
	apiBefore, riverBefore := backendPIDs(t, api, 3), backendPIDs(t, river, 2)

	// One connection whose session the server ends, as a stopping server
	// ends every session.
	victim, err := api.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	admin := storetest.NewPool(t)
	if _, err := admin.Exec(t.Context(), `SELECT pg_terminate_backend($1)`, victim.Conn().PgConn().PID()); err != nil {
		t.Fatal(err)
	}
	s := store.New(api)
	ctx := context.Background()
	// The query runs on that connection itself: the pool might lend
	// another.
	_, err = victim.Exec(ctx, `SELECT 1`)
	victim.Release()
	if err == nil {
		t.Fatal("a query on a terminated session succeeded")
	}
	if !errors.Is(store.Translate(err), store.ErrUnavailable) {
		t.Errorf("a query on a terminated session: got %v, want ErrUnavailable", store.Translate(err))
	}

	apiAfter, riverAfter := backendPIDs(t, api, 3), backendPIDs(t, river, 2)
	for _, pid := range apiAfter {
		if slices.Contains(apiBefore, pid) {
			t.Errorf("the API pool lent a connection made before the server was lost (pid %d; before %v, after %v)", pid, apiBefore, apiAfter)
		}
	}
	for _, pid := range riverAfter {
		if slices.Contains(riverBefore, pid) {
			t.Errorf("the other pool lent a connection made before the server was lost (pid %d; before %v, after %v)", pid, riverBefore, riverAfter)
		}
	}
	// The store works on the new connections.
	if _, err := s.GetAccount(t.Context(), uuid.NewString()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetAccount after the switch: got %v, want ErrNotFound", err)
	}
	// The same server answers: no failover is counted.
	if got := testutil.ToFloat64(f.Collector()); got != 0 {
		t.Errorf("sheba_db_failovers_total: got %v, want 0 (same server)", got)
	}

	// A second terminated session, of a connection made after the
	// switch, drops the connections once more.
	opened := api.Stat().NewConnsCount()
	victim, err = api.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(t.Context(), `SELECT pg_terminate_backend($1)`, victim.Conn().PgConn().PID()); err != nil {
		t.Fatal(err)
	}
	_, _ = victim.Exec(ctx, `SELECT 1`)
	victim.Release()
	again := backendPIDs(t, api, 3)
	if n := api.Stat().NewConnsCount() - opened; n != 3 {
		t.Errorf("after a second lost session the pool opened %d connections, want 3 (every one made before it dropped; pids %v then %v)", n, apiAfter, again)
	}
}

// TestOpenPoolBoundsDeadServers checks the bounds OpenPool gives a pool
// (docs/operations.md#postgres-cluster): connect_timeout 2 s per host
// unless the URL gives one, a ping timeout, and a connection lifetime of
// 30 minutes unless the URL sets pool_max_conn_lifetime.
func TestOpenPoolBoundsDeadServers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url                   string
		wantConnect, wantLife time.Duration
	}{
		{"postgres://u@127.0.0.1:1,127.0.0.1:2/db?target_session_attrs=read-write", 2 * time.Second, 30 * time.Minute},
		{"postgres://u@127.0.0.1:1/db?connect_timeout=7&pool_max_conn_lifetime=5m", 7 * time.Second, 5 * time.Minute},
		{"host=127.0.0.1 port=1 dbname=db connect_timeout=3", 3 * time.Second, 30 * time.Minute},
	} {
		pool, err := store.OpenPool(t.Context(), tc.url, 1, tracenoop.NewTracerProvider())
		if err != nil {
			t.Fatal(err)
		}
		cfg := pool.Config()
		pool.Close()
		if got := cfg.ConnConfig.ConnectTimeout; got != tc.wantConnect {
			t.Errorf("%s: connect timeout %v, want %v", tc.url, got, tc.wantConnect)
		}
		if got := cfg.MaxConnLifetime; got != tc.wantLife {
			t.Errorf("%s: connection lifetime %v, want %v", tc.url, got, tc.wantLife)
		}
		if cfg.PingTimeout <= 0 {
			t.Errorf("%s: no ping timeout", tc.url)
		}
	}
}

// TestSilentFirstHost puts first in a multi-host URL a host that takes the
// connection and never answers (a server that froze, or a link that drops
// packets): with sheba's connect_timeout the pool gives up on it and
// reaches the next host, well within the call's 10 s; without one, every
// new connection would wait on it for the whole call.
func TestSilentFirstHost(t *testing.T) {
	t.Parallel()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() }) // held open, never answered
		}
	}()
	u, err := url.Parse(storetest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = silent.Addr().String() + "," + u.Host
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	u.RawQuery = q.Encode()
	pool, err := store.OpenPool(t.Context(), u.String(), 1, tracenoop.NewTracerProvider())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := store.New(pool).Ping(ctx); err != nil {
		t.Errorf("ping with a silent first host: %v, want the second host's answer", err)
	}
}
