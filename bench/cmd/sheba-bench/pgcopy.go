package main

// Copies of the bench's cluster, for the rows that need a standby
// (get-subscription-standby) or a primary to stop (failover): Postgres
// servers the driver starts itself from a base backup of a running one, as
// store/storetest/pgcluster does for the tests. pgcluster works through a
// testing.TB and creates empty clusters; the driver is a program, and its
// copies hold the seeded, migrated database of scripts/pg.sh's cluster.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgWait bounds every wait on a copy: a start, a stop, a promotion, the
// standby streaming.
const pgWait = 60 * time.Second

// runPG runs a Postgres program from bindir: as the postgres user when the
// driver is root (initdb, pg_ctl and the server refuse root), from / (the
// driver's working directory may be closed to that user).
func runPG(ctx context.Context, bindir, program string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*pgWait)
	defer cancel()
	path := filepath.Join(bindir, program)
	cmd := exec.CommandContext(ctx, path, args...)
	if os.Geteuid() == 0 {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %v\n%s", program, strings.Join(args, " "), err, lastLines(string(out), 10))
	}
	return out, nil
}

// copiesDir is the folder of the run's copies, made on first use: as root
// under /tmp and owned by the postgres user, which the run's own folder is
// closed to.
func (b *bench) copiesDir() (string, error) {
	if b.pgCopies != "" {
		return b.pgCopies, nil
	}
	parent := b.dir
	if os.Geteuid() == 0 {
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, "sheba-bench-pg.")
	if err != nil {
		return "", err
	}
	if os.Geteuid() == 0 {
		owner, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return "", errors.New(`running as root needs a "postgres" user to own the copies of the cluster`)
		}
		uid, _ := strconv.Atoi(owner.Uid)
		gid, _ := strconv.Atoi(owner.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	b.pgCopies = dir
	return dir, nil
}

// allowReplication lets the bench's cluster serve base backups and
// standbys over 127.0.0.1: scripts/pg.sh's pg_hba.conf allows sessions only
// ("all" does not cover replication). The copies inherit the line.
func (b *bench) allowReplication(ctx context.Context) error {
	if b.replicationAllowed {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(b.pg.data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString("host replication all 127.0.0.1/32 trust\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = execSQL(ctx, b.pg.url("postgres"), "SELECT pg_reload_conf()")
	}
	if err != nil {
		return fmt.Errorf("allow replication on the bench's cluster: %w", err)
	}
	b.replicationAllowed = true
	return nil
}

// baseBackup copies the running server src into a new folder name of the
// run's copies with pg_basebackup, and returns the copy, not started. With
// standby, it is a standby that streams from src under application_name
// name (what synchronous_standby_names names); else, once started, a
// primary of its own holding src's data. It keeps src's settings, but no
// Unix socket.
func (b *bench) baseBackup(ctx context.Context, src *postgres, name string, standby bool) (*postgres, error) {
	if err := b.allowReplication(ctx); err != nil {
		return nil, err
	}
	dir, err := b.copiesDir()
	if err != nil {
		return nil, err
	}
	cp := &postgres{bindir: src.bindir, data: filepath.Join(dir, name), logPath: filepath.Join(dir, name+".log")}
	args := []string{"--pgdata=" + cp.data, "--dbname=" + fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", src.port, name),
		"--wal-method=stream", "--checkpoint=fast", "--no-sync"}
	if standby {
		args = append(args, "--write-recovery-conf")
	}
	if _, err := runPG(ctx, src.bindir, "pg_basebackup", args...); err != nil {
		return nil, err
	}
	b.copies = append(b.copies, cp)
	return cp, cp.appendConf("unix_socket_directories = ''")
}

// appendConf adds lines to a stopped copy's postgresql.conf; later lines
// win.
func (pg *postgres) appendConf(lines ...string) error {
	// Appended as root, the file keeps its owner.
	f, err := os.OpenFile(filepath.Join(pg.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(strings.Join(lines, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// startCopy starts a copy on a free port of 127.0.0.1 (another, when the
// one chosen was taken in the meantime), waits until it accepts
// connections and pins it to the server CPU.
func (b *bench) startCopy(ctx context.Context, cp *postgres) error {
	var err error
	for range 5 {
		if cp.port, err = freePort(); err != nil {
			return err
		}
		if _, err = cp.pgCtl(ctx, "start", "--log="+cp.logPath, "--options=-p "+strconv.Itoa(cp.port)); err == nil {
			break
		}
		if log, _ := os.ReadFile(cp.logPath); !strings.Contains(string(log), "could not bind") {
			return err
		}
	}
	if err != nil {
		return err
	}
	cp.admin, _ = url.Parse(fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", cp.port))
	return cp.pin(ctx, b.pin, b.opts.serverCPU)
}

// stopCopies stops every copy at once (immediate: they are thrown away)
// and deletes their folder.
func (b *bench) stopCopies() {
	for _, cp := range b.copies {
		cp.stop(context.Background(), "immediate") //nolint:errcheck // a copy that never started has nothing to stop
		if b.opts.keep {
			// -keep keeps the run's folder, not the copies'.
			if log, err := os.ReadFile(cp.logPath); err == nil {
				_ = os.WriteFile(filepath.Join(b.dir, filepath.Base(cp.logPath)), log, 0o644)
			}
		}
	}
	b.copies = nil
	if b.pgCopies != "" {
		os.RemoveAll(b.pgCopies)
		b.pgCopies = ""
	}
}

// pgCtl runs pg_ctl's command on the copy, waiting at most pgWait.
func (pg *postgres) pgCtl(ctx context.Context, command string, args ...string) ([]byte, error) {
	args = append([]string{command, "--pgdata=" + pg.data, "--wait", "--timeout=" + strconv.Itoa(int(pgWait.Seconds())), "--silent"}, args...)
	return runPG(ctx, pg.bindir, "pg_ctl", args...)
}

// stop shuts the server down with mode (fast: a clean switchover, the
// standby sent all the WAL first; immediate: as a crash) and waits until it
// has. A server that is not running is left alone.
func (pg *postgres) stop(ctx context.Context, mode string) error {
	if pg.postmasterPID() == 0 {
		return nil
	}
	_, err := pg.pgCtl(ctx, "stop", "--mode="+mode)
	return err
}

// promote makes a standby a primary and waits until it has left recovery.
func (pg *postgres) promote(ctx context.Context) error {
	_, err := pg.pgCtl(ctx, "promote")
	return err
}

// waitStandby waits until the primary pg sees its standby name streaming,
// and with sync as its synchronous standby.
func (pg *postgres) waitStandby(ctx context.Context, name string, sync bool) error {
	var last error
	for deadline := time.Now().Add(pgWait); time.Now().Before(deadline); {
		var state, syncState string
		err := queryRow(ctx, pg.url("postgres"), []any{&state, &syncState},
			"SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1", name)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			err = errors.New("not in pg_stat_replication")
		case err == nil && (state != "streaming" || (sync && syncState != "sync")):
			err = fmt.Errorf("state %s, sync_state %s", state, syncState)
		case err == nil:
			return nil
		}
		last = err
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("standby %s not streaming within %v: %v", name, pgWait, last)
}

// execSQL runs statements on a connection of its own to url.
func execSQL(ctx context.Context, url string, stmts ...string) error {
	return withConn(ctx, url, func(ctx context.Context, conn *pgx.Conn) error {
		for _, s := range stmts {
			if _, err := conn.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	})
}

// queryRow runs a query of one row on a connection of its own to url and
// scans it into dest.
func queryRow(ctx context.Context, url string, dest []any, sql string, args ...any) error {
	return withConn(ctx, url, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, sql, args...).Scan(dest...)
	})
}

// withConn calls f with a new connection to url, closed after it, and a
// context that ends after pgWait.
func withConn(ctx context.Context, url string, f func(context.Context, *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, pgWait)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return f(ctx, conn)
}
