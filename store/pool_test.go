package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

// queryCanceled reports whether err is Postgres's query_canceled (57014),
// which the store reads as context.DeadlineExceeded (TestTranslate).
func queryCanceled(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "57014"
}

// TestCancelKeepsConnection checks that a query whose deadline passes is
// cancelled on the server (query_canceled), while its
// connection stays in the pool: five timed-out queries on a pool of one
// open one connection in all (pgx's default handler closes the connection
// each time, which made it six).
func TestCancelKeepsConnection(t *testing.T) {
	t.Parallel()
	pool, err := store.OpenPool(t.Context(), storetest.NewDatabase(t), 1, tracenoop.NewTracerProvider())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(t.Context(), `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		_, err := pool.Exec(ctx, `SELECT pg_sleep(10)`)
		cancel()
		if !queryCanceled(err) {
			t.Fatalf("query %d past its deadline: got %v, want query_canceled", i, err)
		}
	}
	if _, err := pool.Exec(t.Context(), `SELECT 1`); err != nil {
		t.Fatalf("query after the timeouts: %v", err)
	}
	if got := pool.Stat().NewConnsCount(); got != 1 {
		t.Errorf("got %d connections opened, want 1", got)
	}
}

// wantSetting checks the value of the server parameter name on a
// connection of pool.
func wantSetting(t *testing.T, pool *pgxpool.Pool, name, want string) {
	t.Helper()
	var got string
	if err := pool.QueryRow(t.Context(), `SHOW `+name).Scan(&got); err != nil || got != want {
		t.Errorf("%s: got %q, %v, want %s", name, got, err, want)
	}
}

// TestStatementTimeout checks that the server itself ends a statement
// that runs past the pool's statement timeout, whatever the context, and
// that it is query_canceled.
func TestStatementTimeout(t *testing.T) {
	t.Parallel()
	pool, err := store.OpenPool(t.Context(), storetest.NewDatabase(t), 1, tracenoop.NewTracerProvider(), store.WithStatementTimeout(150*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	wantSetting(t, pool, "statement_timeout", "150ms")
	start := time.Now()
	_, err = pool.Exec(t.Context(), `SELECT pg_sleep(10)`)
	if !queryCanceled(err) {
		t.Fatalf("statement past statement_timeout: got %v, want query_canceled", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("statement ran %v, want it ended by the 150ms statement_timeout", took)
	}
}

// TestCancelAll checks that CancelAll ends a statement whose context never
// ends, so that the pool's Close, which waits for it, returns; and that the
// canceler forgets the connections of a closed pool.
func TestCancelAll(t *testing.T) {
	t.Parallel()
	var c store.Canceler
	pool, err := store.OpenPool(t.Context(), storetest.NewDatabase(t), 2, tracenoop.NewTracerProvider(), store.WithCanceler(&c))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	stuck := make(chan error, 1)
	go func() {
		_, err := pool.Exec(context.WithoutCancel(t.Context()), `SELECT pg_sleep(60)`)
		stuck <- err
	}()
	// Until Postgres runs it (a cancel that comes first is ignored), as
	// the pool's other connection sees.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var running bool
		err := pool.QueryRow(t.Context(), `
			SELECT count(*) > 0 FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'active' AND query = 'SELECT pg_sleep(60)'`).Scan(&running)
		if err != nil {
			t.Fatal(err)
		}
		if running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the statement did not start within 10s")
		}
	}
	closed := make(chan struct{})
	go func() {
		pool.Close()
		close(closed)
	}()

	start := time.Now()
	if n := c.CancelAll(t.Context()); n == 0 {
		t.Errorf("CancelAll sent %d cancel requests, want at least 1", n)
	}
	select {
	case err := <-stuck:
		if !queryCanceled(err) {
			t.Errorf("statement after CancelAll: got %v, want query_canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the statement still runs 10s after CancelAll")
	}
	select {
	case <-closed:
		t.Logf("pool closed %v after CancelAll", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waits 10s after CancelAll")
	}
	if n := c.CancelAll(t.Context()); n != 0 {
		t.Errorf("CancelAll after Close sent %d cancel requests, want 0", n)
	}
}

// TestIdleInTransactionTimeout checks that the server ends the session of
// a transaction left idle past the pool's idle-in-transaction timeout, and
// that the pool goes on with a new connection.
func TestIdleInTransactionTimeout(t *testing.T) {
	t.Parallel()
	url := storetest.NewDatabase(t)
	pool, err := store.OpenPool(t.Context(), url, 2, tracenoop.NewTracerProvider(), store.WithIdleInTransactionTimeout(150*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	wantSetting(t, pool, "idle_in_transaction_session_timeout", "150ms")
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context())
	var pid int
	if err := tx.QueryRow(t.Context(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// The session ends by itself; another connection watches it go.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var alive bool
		if err := pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&alive); err != nil {
			t.Fatal(err)
		}
		if !alive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the idle transaction's session still runs after 10s, want it ended after 150ms")
		}
	}
	if _, err := tx.Exec(t.Context(), `SELECT 1`); err == nil {
		t.Error("statement in the ended transaction: got no error")
	}
	if _, err := pool.Exec(t.Context(), `SELECT 1`); err != nil {
		t.Errorf("query after the session ended: %v", err)
	}
}
