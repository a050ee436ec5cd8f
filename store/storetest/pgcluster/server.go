package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shebasvc/sheba/internal/testport"
)

// StopMode is how Stop shuts a server down.
type StopMode string

const (
	// Fast ends the sessions, writes a shutdown checkpoint and, on a
	// primary, sends the standby all the WAL first: a clean switchover.
	Fast StopMode = "fast"
	// Immediate kills the server as a crash would; it recovers from its WAL
	// when started again.
	Immediate StopMode = "immediate"
)

// Server is one Postgres server of a Cluster.
type Server struct {
	name    string // "primary" or "standby", for messages
	run     *runner
	data    string // data folder
	log     string // server log
	port    int
	running bool
}

// Port is the 127.0.0.1 port the server listens on; it keeps it across Stop
// and Start.
func (s *Server) Port() int { return s.port }

// URL is the URL of database sheba on this server alone.
func (s *Server) URL() string { return s.urlOf(dbName) }

func (s *Server) urlOf(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// Stop shuts the server down (see StopMode) and waits until it has. Stopping
// a stopped server does nothing.
func (s *Server) Stop(tb testing.TB, mode StopMode) {
	tb.Helper()
	if !s.running {
		return
	}
	if out, err := s.pgCtl("stop", "--mode="+string(mode)); err != nil {
		s.fatalf(tb, "stop (%s): %v\n%s", mode, err, out)
	}
	s.running = false
}

// Start starts a stopped server again, on the same port and as what it was
// (a standby that was not promoted comes back streaming), and waits until it
// accepts connections. Starting a running server does nothing.
func (s *Server) Start(tb testing.TB) {
	tb.Helper()
	if s.running {
		return
	}
	if out, err := s.start(); err != nil {
		s.fatalf(tb, "start: %v\n%s", err, out)
	}
}

// Promote makes a standby a primary and waits until it accepts writes,
// commits included: it empties synchronous_standby_names on it, else its
// commits could wait for a standby it does not have.
func (s *Server) Promote(tb testing.TB) {
	tb.Helper()
	if out, err := s.pgCtl("promote"); err != nil {
		s.fatalf(tb, "promote: %v\n%s", err, out)
	}
	// SET to empty rather than RESET: it also overrides a value in
	// postgresql.conf.
	s.Exec(tb, "ALTER SYSTEM SET synchronous_standby_names = ''")
	s.Exec(tb, "SELECT pg_reload_conf()")
	s.waitFor(tb, "accepting writes", func(ctx context.Context, conn *pgx.Conn) error {
		var inRecovery bool
		var names string
		err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery(), current_setting('synchronous_standby_names')").Scan(&inRecovery, &names)
		switch {
		case err != nil:
			return err
		case inRecovery:
			return errors.New("still in recovery")
		case names != "":
			return fmt.Errorf("synchronous_standby_names is %q", names)
		}
		// A write that leaves nothing behind. It must write WAL, else its
		// commit would not wait for a synchronous standby: a transaction id
		// alone (pg_current_xact_id()) does not.
		err = pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadWrite}, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "CREATE TEMP TABLE pgcluster_probe () ON COMMIT DROP")
			return err
		})
		if err == nil && ctx.Err() != nil {
			// The commit was cut short, yet pgx may not have seen it.
			err = ctx.Err()
		}
		return err
	})
}

// SetReadOnly turns default_transaction_read_only on or off with ALTER
// SYSTEM, and waits until every session sees it at its next statement. On,
// every write statement fails at once with SQLSTATE 25006
// (read_only_sql_transaction): what a demoted primary that stays up looks
// like to a pooled connection.
//
// Turning it on also ends, as a demotion would, the sessions caught in the
// middle of a transaction or a statement (their clients see SQLSTATE 57P01);
// idle ones stay, as a pool's do. A transaction begun before would otherwise
// still write, and with Sync() and the standby gone its commit would wait for
// it forever. So a read-only primary holds no commit waiting: from then on
// nothing is written.
func (s *Server) SetReadOnly(tb testing.TB, on bool) {
	tb.Helper()
	want := "off"
	if on {
		want = "on"
	}
	s.Exec(tb, "ALTER SYSTEM SET default_transaction_read_only = "+want)
	s.Exec(tb, "SELECT pg_reload_conf()")
	// A new session seeing the setting means the postmaster has reloaded and
	// signalled every session, which then reloads before its next statement.
	s.waitValue(tb, "SHOW default_transaction_read_only", want)
	if on {
		// The second argument waits (up to 5 s) until each has exited.
		s.Exec(tb, `SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity
			WHERE backend_type = 'client backend' AND state <> 'idle' AND pid <> pg_backend_pid()`)
	}
}

// PauseReplay pauses a standby's replay of the WAL it receives (it goes on
// receiving and flushing it, so synchronous commits do not wait) and waits
// until replay has paused.
func (s *Server) PauseReplay(tb testing.TB) {
	tb.Helper()
	s.Exec(tb, "SELECT pg_wal_replay_pause()")
	s.waitValue(tb, "SELECT pg_get_wal_replay_pause_state()", "paused")
}

// ResumeReplay resumes a standby's replay paused by PauseReplay.
func (s *Server) ResumeReplay(tb testing.TB) {
	tb.Helper()
	s.Exec(tb, "SELECT pg_wal_replay_resume()")
	s.waitValue(tb, "SELECT pg_get_wal_replay_pause_state()", "not paused")
}

// waitValue waits until query, a query of one text value, returns want on
// a new connection.
func (s *Server) waitValue(tb testing.TB, query, want string) {
	tb.Helper()
	s.waitFor(tb, query+" = "+want, func(ctx context.Context, conn *pgx.Conn) error {
		var got string
		err := conn.QueryRow(ctx, query).Scan(&got)
		if err == nil && got != want {
			err = fmt.Errorf("it is %s", got)
		}
		return err
	})
}

// Exec runs sql with args in database sheba on a connection of its own and
// fails the test if it fails or takes over 30 s.
func (s *Server) Exec(tb testing.TB, sql string, args ...any) {
	tb.Helper()
	if err := s.TryExec(tb, sql, args...); err != nil {
		s.fatalf(tb, "%s: %v", sql, err)
	}
}

// TryExec is Exec returning the error, for statements expected to fail
// (errors.As it to a *pgconn.PgError for the SQLSTATE).
func (s *Server) TryExec(tb testing.TB, sql string, args ...any) error {
	tb.Helper()
	return s.execOn(tb, dbName, sql, args...)
}

// execDB is Exec in database db.
func (s *Server) execDB(tb testing.TB, db, sql string) {
	tb.Helper()
	if err := s.execOn(tb, db, sql); err != nil {
		s.fatalf(tb, "%s: %v", sql, err)
	}
}

func (s *Server) execOn(tb testing.TB, db, sql string, args ...any) error {
	return s.withConn(tb, db, waitTimeout, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, sql, args...)
		return err
	})
}

// QueryRow prepares a query of one row in database sheba, run by the
// returned Row's Scan.
func (s *Server) QueryRow(tb testing.TB, sql string, args ...any) *Row {
	return &Row{tb: tb, s: s, sql: sql, args: args}
}

// Row is a query of one row on a server.
type Row struct {
	tb   testing.TB
	s    *Server
	sql  string
	args []any
}

// Scan runs the query on a connection of its own and scans its one row
// into dest, as pgx.Row's Scan does. It fails the test on any error,
// pgx.ErrNoRows included, or after 30 s.
func (r *Row) Scan(dest ...any) {
	r.tb.Helper()
	err := r.s.withConn(r.tb, dbName, waitTimeout, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, r.sql, r.args...).Scan(dest...)
	})
	if err != nil {
		r.s.fatalf(r.tb, "%s: %v", r.sql, err)
	}
}

// withConn calls f with a new connection to database db, closed after it,
// and a context that ends after timeout.
func (s *Server) withConn(tb testing.TB, db string, timeout time.Duration, f func(context.Context, *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(tb.Context(), timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.urlOf(db))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return f(ctx, conn)
}

// waitFor calls check on a new connection until it returns nil, and fails
// the test with check's last error and the end of the log after 30 s. Each
// call has 2 s, so that one stuck query (a commit waiting for a standby)
// does not use up the wait.
func (s *Server) waitFor(tb testing.TB, what string, check func(context.Context, *pgx.Conn) error) {
	tb.Helper()
	var err error
	for deadline := time.Now().Add(waitTimeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err = s.withConn(tb, dbName, 2*time.Second, check); err == nil {
			return
		}
		if tb.Context().Err() != nil {
			break
		}
	}
	s.fatalf(tb, "not %s within %v: %v", what, waitTimeout, err)
}

// initdb creates the primary's data folder: trust on 127.0.0.1 for
// sessions and replication, no Unix socket, and what streaming needs.
func (s *Server) initdb(tb testing.TB) {
	tb.Helper()
	out, err := s.run.run("initdb", "--pgdata="+s.data, "--username=postgres", "--auth=trust",
		"--encoding=UTF8", "--no-locale", "--no-instructions", "--no-sync")
	if err != nil {
		tb.Fatalf("pgcluster: initdb: %v\n%s", err, out)
	}
	// Only these lines: nothing but 127.0.0.1, no passwords. "all" does not
	// cover replication connections, hence their line.
	hba := "host all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n"
	if err := os.WriteFile(filepath.Join(s.data, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		tb.Fatalf("pgcluster: %v", err)
	}
	// The standby copies this file. Durability buys nothing for a cluster
	// deleted at the end, but synchronous_commit stays on: Sync() needs it.
	// hot_standby_feedback only matters on the standby; a short
	// wal_retrieve_retry_interval has a restarted standby reconnect quickly.
	s.appendConf(tb,
		"listen_addresses = '127.0.0.1'",
		"unix_socket_directories = ''",
		"max_connections = 50",
		"shared_buffers = '32MB'",
		"fsync = off",
		"wal_level = replica",
		"max_wal_senders = 4",
		"max_replication_slots = 4",
		"hot_standby = on",
		"hot_standby_feedback = on",
		"wal_receiver_status_interval = '1s'",
		"wal_retrieve_retry_interval = '200ms'",
	)
}

// appendConf adds lines to postgresql.conf; later lines win.
func (s *Server) appendConf(tb testing.TB, lines ...string) {
	tb.Helper()
	f, err := os.OpenFile(filepath.Join(s.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString(strings.Join(lines, "\n") + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		tb.Fatalf("pgcluster: %v", err)
	}
}

// baseBackup copies the running primary s into standby's data folder and
// makes it a standby that streams from s through a replication slot, under
// the application_name synchronous_standby_names names.
func (s *Server) baseBackup(tb testing.TB, standby *Server) {
	tb.Helper()
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", s.port, standbyName)
	out, err := s.run.run("pg_basebackup", "--pgdata="+standby.data, "--dbname="+conninfo,
		"--write-recovery-conf", "--wal-method=stream", "--create-slot", "--slot="+standbyName,
		"--checkpoint=fast", "--no-sync")
	if err != nil {
		s.fatalf(tb, "pg_basebackup: %v\n%s", err, out)
	}
	// -R writes primary_conninfo from the connection's settings; make sure
	// the one synchronous_standby_names matches is among them.
	auto, err := os.ReadFile(filepath.Join(standby.data, "postgresql.auto.conf"))
	if err != nil {
		tb.Fatalf("pgcluster: %v", err)
	}
	if !strings.Contains(string(auto), "application_name="+standbyName) {
		tb.Fatalf("pgcluster: pg_basebackup -R left application_name out of primary_conninfo:\n%s", auto)
	}
}

// startOnFreePort starts a server that has no port yet, choosing another
// port when the one chosen was taken in the meantime.
func (s *Server) startOnFreePort(tb testing.TB) {
	tb.Helper()
	var out []byte
	var err error
	for range 5 {
		s.port = testport.Free(tb)
		if out, err = s.start(); err == nil {
			return
		}
		if !strings.Contains(s.logTail(), "could not bind") {
			break
		}
	}
	s.fatalf(tb, "start: %v\n%s", err, out)
}

// start starts the server on s.port and waits until it accepts connections.
func (s *Server) start() ([]byte, error) {
	out, err := s.pgCtl("start", "--log="+s.log, "--options=-p "+strconv.Itoa(s.port))
	if err == nil {
		s.running = true
	}
	return out, err
}

// pgCtl runs pg_ctl's command on the server, waiting at most waitTimeout.
func (s *Server) pgCtl(command string, args ...string) ([]byte, error) {
	args = append([]string{command, "--pgdata=" + s.data, "--wait", "--timeout=" + strconv.Itoa(int(waitTimeout.Seconds())), "--silent"}, args...)
	return s.run.run("pg_ctl", args...)
}

// fatalf fails the test with the message and the end of the server's log.
func (s *Server) fatalf(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf("pgcluster: %s: "+format, append([]any{s.name}, args...)...)
	if tail := s.logTail(); tail != "" {
		msg += "\nend of the " + s.name + "'s log:\n" + tail
	}
	tb.Fatal(msg)
}

// logTail returns the last lines of the server's log, or "" when it has
// none.
func (s *Server) logTail() string {
	b, err := os.ReadFile(s.log)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err.Error()
	}
	return lastLines(b, 20)
}
