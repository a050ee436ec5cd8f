// Package pgcluster runs a real Postgres primary and a real streaming
// standby for failover tests.
//
// Start creates a primary in a temporary folder, starts it on a free
// 127.0.0.1 port, creates database sheba with sheba's migrations, copies it
// with pg_basebackup into a standby that streams from it through a
// replication slot (so the primary keeps every WAL file the standby still
// needs) and returns once the standby streams. The servers are stopped
// (immediate) and deleted when the test ends.
//
// The binaries are the ones `scripts/pg.sh test` runs and exports:
// $PG_BINDIR, else the newest /usr/lib/postgresql/*/bin. A test that finds
// none fails saying so: a failover test must never pass by not running. As
// root every server command runs as the "postgres" user (initdb refuses
// root) and the cluster lives under /tmp, which that user can enter. Both
// servers trust every connection on 127.0.0.1; the superuser is "postgres".
//
// What the servers do that a test should know:
//
//   - With Sync(), a commit on the primary returns once the standby has
//     flushed it (synchronous_commit on, synchronous_standby_names naming
//     the standby); paused replay does not hold it. While the standby is
//     stopped, every commit that wrote something waits, with no timeout of
//     Postgres's own, until it is back. A context ending such a wait does not
//     undo the commit: pgx returns the context's error, yet the row is on
//     the primary ("already committed locally", says the server's log).
//   - SetReadOnly(true) makes every write fail at once with SQLSTATE 25006
//     and ends the sessions caught in a transaction, so a read-only primary
//     never holds a commit waiting for a standby that is gone.
//   - Promote resets synchronous_standby_names on the promoted server, so
//     its commits do not wait for a standby it does not have.
//   - Roles do not follow failovers: Primary stays the server Start made
//     primary and Standby the other; Cluster.URL names both, with
//     target_session_attrs=read-write, so it reaches whichever accepts
//     writes. Nothing makes the old primary a standby of the new one.
//
// A Cluster's methods may be called from the test's goroutines at once,
// except Stop, Start and Promote of the same server.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shebasvc/sheba/store"
)

// waitTimeout bounds every wait: a server starting or stopping, the standby
// catching up, a promotion.
const waitTimeout = 30 * time.Second

// standbyName is the standby's application_name, which
// synchronous_standby_names names, and its replication slot's name.
const standbyName = "standby"

// dbName is the database Start creates and migrates.
const dbName = "sheba"

// Option changes how Start sets the cluster up.
type Option func(*options)

type options struct {
	sync bool
}

// Sync makes the primary commit synchronously to the standby: a commit
// returns once the standby has flushed it to its WAL.
func Sync() Option {
	return func(o *options) { o.sync = true }
}

// Cluster is a primary and a standby that streams from it.
type Cluster struct {
	// Primary is the server Start made primary, even after a failover.
	Primary *Server
	// Standby is the server Start made standby, even after its Promote.
	Standby *Server
}

// Start creates, starts and migrates a primary and a streaming standby, and
// removes both when the test ends. It fails the test when there are no
// Postgres binaries or a server does not come up within 30 s.
func Start(tb testing.TB, opts ...Option) *Cluster {
	tb.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	r := newRunner(tb)
	dir := r.tempDir(tb)
	c := &Cluster{
		Primary: &Server{name: "primary", run: r, data: filepath.Join(dir, "primary"), log: filepath.Join(dir, "primary.log")},
		Standby: &Server{name: standbyName, run: r, data: filepath.Join(dir, "standby"), log: filepath.Join(dir, "standby.log")},
	}
	tb.Cleanup(func() { c.remove(tb, dir) })

	p := c.Primary
	p.initdb(tb)
	p.startOnFreePort(tb)
	p.execDB(tb, "postgres", "CREATE DATABASE "+dbName)
	ctx, cancel := context.WithTimeout(tb.Context(), waitTimeout)
	defer cancel()
	if err := store.MigrateUp(ctx, p.URL()); err != nil {
		tb.Fatalf("pgcluster: migrate the primary: %v", err)
	}

	p.baseBackup(tb, c.Standby)
	if o.sync {
		// Only now: the base backup copies postgresql.auto.conf, and the
		// standby, once promoted, would wait for a synchronous standby of
		// its own. Before the standby starts: pg_stat_replication's "sync"
		// is computed by the session that reads it, while commits follow
		// the checkpointer's copy of the setting, which must not lag behind
		// the "sync" Start waits for.
		p.Exec(tb, "ALTER SYSTEM SET synchronous_standby_names = "+quote(standbyName))
		p.Exec(tb, "SELECT pg_reload_conf()")
	}
	c.Standby.startOnFreePort(tb)
	c.waitStreaming(tb, o.sync)
	return c
}

// URL is the multi-host URL of database sheba on both servers, in pgx's
// syntax, with target_session_attrs=read-write: a connection reaches the
// server that accepts writes.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write",
		c.Primary.port, c.Standby.port, dbName)
}

// WaitReplayed waits until the standby has replayed everything the primary
// had written when it was called. It fails the test after 30 s, which is
// what it does while replay is paused.
func (c *Cluster) WaitReplayed(tb testing.TB) {
	tb.Helper()
	var lsn string
	c.Primary.QueryRow(tb, "SELECT pg_current_wal_lsn()::text").Scan(&lsn)
	c.Standby.waitFor(tb, "replayed "+lsn, func(ctx context.Context, conn *pgx.Conn) error {
		var replayed string
		var done bool
		err := conn.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn()::text, pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn).
			Scan(&replayed, &done)
		if err == nil && !done {
			err = fmt.Errorf("replayed up to %s", replayed)
		}
		return err
	})
}

// waitStreaming waits until the primary sees the standby streaming, and
// with sync as its synchronous standby.
func (c *Cluster) waitStreaming(tb testing.TB, sync bool) {
	tb.Helper()
	want := "streaming"
	if sync {
		want += "/sync"
	}
	c.Primary.waitFor(tb, "the standby "+want, func(ctx context.Context, conn *pgx.Conn) error {
		var state, syncState string
		err := conn.QueryRow(ctx, "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1", standbyName).
			Scan(&state, &syncState)
		if errors.Is(err, pgx.ErrNoRows) {
			return errors.New("not in pg_stat_replication")
		}
		if err == nil && (state != "streaming" || (sync && syncState != "sync")) {
			err = fmt.Errorf("state %s, sync_state %s", state, syncState)
		}
		return err
	})
}

// remove stops both servers at once and deletes their folder. When the
// test failed, it logs the end of each server's log first.
func (c *Cluster) remove(tb testing.TB, dir string) {
	for _, s := range []*Server{c.Primary, c.Standby} {
		if tb.Failed() {
			if tail := s.logTail(); tail != "" {
				tb.Logf("pgcluster: end of the %s's log:\n%s", s.name, tail)
			}
		}
		// The pid file, not s.running: a start that failed half-way may
		// have left a server up.
		if _, err := os.Stat(filepath.Join(s.data, "postmaster.pid")); err == nil {
			// Immediate: the data is thrown away, so skip the shutdown checkpoint.
			if out, err := s.pgCtl("stop", "--mode=immediate"); err != nil {
				tb.Errorf("pgcluster: stop the %s: %v\n%s", s.name, err, out)
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		tb.Errorf("pgcluster: remove %s: %v", dir, err)
	}
}

// runner runs the Postgres programs: from bindir, as the postgres user when
// we are root.
type runner struct {
	bindir string
	owner  *user.User // nil when we are not root
}

// required are the programs a cluster needs.
var required = []string{"initdb", "pg_ctl", "postgres", "pg_basebackup"}

// newRunner finds the binaries the way scripts/pg.sh does and, as root,
// the postgres user. It fails the test when either is missing.
func newRunner(tb testing.TB) *runner {
	tb.Helper()
	bindir, err := findBindir()
	if err != nil {
		tb.Fatalf("pgcluster: %v", err)
	}
	r := &runner{bindir: bindir}
	if os.Geteuid() == 0 {
		if r.owner, err = user.Lookup("postgres"); err != nil {
			tb.Fatal(`pgcluster: running as root needs a "postgres" user to own the cluster (initdb refuses root): create it or run as another user`)
		}
	}
	return r
}

// findBindir returns $PG_BINDIR, else the newest /usr/lib/postgresql/*/bin,
// that holds every required program.
func findBindir() (string, error) {
	if dir := os.Getenv("PG_BINDIR"); dir != "" {
		// An explicit choice that does not work is an error, not a reason to guess.
		if missing := missingPrograms(dir); missing != "" {
			return "", fmt.Errorf("PG_BINDIR=%s lacks %s: point it at the Postgres server binaries or unset it", dir, missing)
		}
		return dir, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// Newest major version first: 9.6 is older than 15.
	slices.SortFunc(dirs, func(a, b string) int {
		return compareVersions(filepath.Base(filepath.Dir(b)), filepath.Base(filepath.Dir(a)))
	})
	for _, dir := range dirs {
		if missingPrograms(dir) == "" {
			return dir, nil
		}
	}
	return "", errors.New("Postgres server binaries not found: run the tests under 'bash scripts/pg.sh test --' (make test does; it installs them), install them (Debian: apt-get install postgresql) or set PG_BINDIR to the folder of initdb, pg_ctl, postgres and pg_basebackup")
}

// missingPrograms names the required programs dir lacks, or is empty.
func missingPrograms(dir string) string {
	var missing []string
	for _, p := range required {
		if st, err := os.Stat(filepath.Join(dir, p)); err != nil || st.Mode()&0o111 == 0 {
			missing = append(missing, p)
		}
	}
	return strings.Join(missing, ", ")
}

// compareVersions compares dotted version numbers ("9.6", "15").
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

// tempDir creates the cluster's folder, owned by the user the servers run
// as. As root that is under /tmp: $TMPDIR, like root's home, may be closed
// to the postgres user.
func (r *runner) tempDir(tb testing.TB) string {
	tb.Helper()
	parent := os.TempDir()
	if r.owner != nil {
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, "sheba-pgcluster.")
	if err != nil {
		tb.Fatalf("pgcluster: %v", err)
	}
	if err := r.chown(dir); err != nil {
		os.RemoveAll(dir)
		tb.Fatalf("pgcluster: %v", err)
	}
	return dir
}

// chown gives path to the postgres user when we are root.
func (r *runner) chown(path string) error {
	if r.owner == nil {
		return nil
	}
	uid, _ := strconv.Atoi(r.owner.Uid)
	gid, _ := strconv.Atoi(r.owner.Gid)
	return os.Chown(path, uid, gid)
}

// run runs program from bindir with args and returns its output.
func (r *runner) run(program string, args ...string) ([]byte, error) {
	// Beyond waitTimeout, which pg_ctl's own --timeout enforces: a program
	// stuck for another reason must not hang the test binary.
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	path := filepath.Join(r.bindir, program)
	var cmd *exec.Cmd
	if r.owner != nil {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	// The test's working directory may be closed to the postgres user.
	cmd.Dir = "/"
	return cmd.CombinedOutput()
}

// quote returns s as an SQL string literal, for the statements (ALTER
// SYSTEM) that take no parameters.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// lastLines returns the last n lines of b.
func lastLines(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
