package pgcluster_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shebasvc/sheba/store/storetest/pgcluster"
)

// readOnlyTransaction is SQLSTATE read_only_sql_transaction.
const readOnlyTransaction = "25006"

func TestStartWithoutBinaries(t *testing.T) {
	t.Setenv("PG_BINDIR", t.TempDir())
	ft := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		pgcluster.Start(ft)
	}()
	<-done
	if !strings.Contains(ft.msg, "PG_BINDIR=") || !strings.Contains(ft.msg, "initdb") {
		t.Errorf("Start without binaries failed with %q, want it to say PG_BINDIR lacks initdb", ft.msg)
	}
}

// fatalRecorder is a testing.TB whose Fatal records the message and ends
// the goroutine, as the real one does, without failing the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatal(args ...any) {
	f.msg = strings.TrimSpace(fmt.Sprintln(args...))
	runtime.Goexit()
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestAsync(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t)
	c.Primary.Exec(t, "CREATE TABLE harness_rows (id int PRIMARY KEY)")
	c.Primary.Exec(t, "INSERT INTO harness_rows VALUES (1)")
	c.WaitReplayed(t)
	if got := count(t, c.Standby, 1); got != 1 {
		t.Errorf("standby has %d rows with id 1 after WaitReplayed, want 1", got)
	}

	// A write while the standby is down does not wait for it, and reaches it
	// once it is back.
	c.Standby.Stop(t, pgcluster.Immediate)
	c.Primary.Exec(t, "INSERT INTO harness_rows VALUES (2)")
	c.Standby.Start(t)
	c.WaitReplayed(t)
	if got := count(t, c.Standby, 2); got != 1 {
		t.Errorf("restarted standby has %d rows with id 2 after WaitReplayed, want 1", got)
	}
}

func TestSync(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t, pgcluster.Sync())
	c.Primary.Exec(t, "CREATE TABLE harness_rows (id int PRIMARY KEY)")

	t.Run("paused replay", func(t *testing.T) {
		c.Standby.PauseReplay(t)
		// With Sync the insert returns once the standby has the row in its
		// WAL: only the paused replay keeps it from being seen.
		c.Primary.Exec(t, "INSERT INTO harness_rows VALUES (10)")
		if got := count(t, c.Standby, 10); got != 0 {
			t.Errorf("standby with replay paused has %d rows with id 10, want 0", got)
		}
		c.Standby.ResumeReplay(t)
		c.WaitReplayed(t)
		if got := count(t, c.Standby, 10); got != 1 {
			t.Errorf("standby has %d rows with id 10 after ResumeReplay, want 1", got)
		}
	})

	t.Run("read-only", func(t *testing.T) {
		c.Primary.SetReadOnly(t, true)
		assertReadOnly(t, c.Primary.TryExec(t, "INSERT INTO harness_rows VALUES (20)"))
		c.Primary.SetReadOnly(t, false)
		if err := c.Primary.TryExec(t, "INSERT INTO harness_rows VALUES (20)"); err != nil {
			t.Errorf("insert after SetReadOnly(false): %v", err)
		}
	})

	t.Run("read-only with the standby down", func(t *testing.T) {
		// Every commit would wait for the standby. A read-only primary
		// refuses a write before it commits, and ends a transaction begun
		// before, so neither waits: each fails within its bound.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, c.Primary.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO harness_rows VALUES (30)"); err != nil {
			t.Fatal(err)
		}

		c.Standby.Stop(t, pgcluster.Immediate)
		c.Primary.SetReadOnly(t, true)
		assertReadOnly(t, c.Primary.TryExec(t, "INSERT INTO harness_rows VALUES (31)"))
		if err := tx.Commit(ctx); err == nil || ctx.Err() != nil {
			t.Errorf("commit of a transaction begun before SetReadOnly: got %v (context: %v), want it ended at once", err, ctx.Err())
		}
		if got := count(t, c.Primary, 30); got != 0 {
			t.Errorf("read-only primary has %d rows with id 30, want 0", got)
		}
		c.Primary.SetReadOnly(t, false)
		c.Standby.Start(t)
	})

	t.Run("promote", func(t *testing.T) {
		c.Primary.Exec(t, "INSERT INTO harness_rows VALUES (40)")
		// A standby set up like a synchronous primary: once promoted, its
		// commits would wait for a standby named "other" that is not there.
		c.Standby.Exec(t, "ALTER SYSTEM SET synchronous_standby_names = 'other'")
		c.Standby.Exec(t, "SELECT pg_reload_conf()")
		c.Primary.Stop(t, pgcluster.Fast)
		c.Standby.Promote(t)

		// The cluster's URL finds the promoted standby, and a commit there
		// does not wait for the standby it no longer has.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, c.URL())
		if err != nil {
			t.Fatalf("connect to %s: %v", c.URL(), err)
		}
		defer conn.Close(context.Background())
		var port int
		if err := conn.QueryRow(ctx, "INSERT INTO harness_rows VALUES (41) RETURNING inet_server_port()").Scan(&port); err != nil {
			t.Fatalf("insert on the promoted standby: %v", err)
		}
		if port != c.Standby.Port() {
			t.Errorf("the cluster's URL wrote on port %d, want the promoted standby's %d", port, c.Standby.Port())
		}
		if got := count(t, c.Standby, 40); got != 1 {
			t.Errorf("promoted standby has %d rows with id 40 (committed on the primary before it stopped), want 1", got)
		}
	})
}

// count returns how many rows of harness_rows on s have id.
func count(t *testing.T, s *pgcluster.Server, id int) int {
	t.Helper()
	var n int
	s.QueryRow(t, "SELECT count(*) FROM harness_rows WHERE id = $1", id).Scan(&n)
	return n
}

func assertReadOnly(t *testing.T, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != readOnlyTransaction {
		t.Errorf("insert on a read-only server: got %v, want SQLSTATE %s", err, readOnlyTransaction)
	}
}
