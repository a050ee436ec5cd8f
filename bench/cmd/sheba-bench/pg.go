package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// postgres is the throwaway cluster of one bench run, made the way
// scripts/pg.sh makes its test cluster: initdb as the "postgres" user when
// we are root (initdb refuses root), trust auth, 127.0.0.1 only, a socket
// directory inside the run's folder, durability off.
type postgres struct {
	bindir  string
	dir     string // holds data/, sock/ and postgres.log
	port    int
	started bool
}

// findPGBindir follows scripts/pg.sh: $PG_BINDIR, else the newest
// /usr/lib/postgresql/*/bin, else pg_config --bindir, else PATH.
func findPGBindir() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
			if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.Mode()&0o111 == 0 {
				return false
			}
		}
		return true
	}
	const notFound = "postgres server binaries not found: install them (Debian: apt-get install postgresql) or set PG_BINDIR"
	if dir := os.Getenv("PG_BINDIR"); dir != "" {
		if !has(dir) {
			return "", errors.New(notFound)
		}
		return dir, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); has(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", errors.New(notFound)
}

// pgMajor is the version in /usr/lib/postgresql/VERSION/bin, for sorting.
func pgMajor(bindir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(bindir)), 64)
	return v
}

// asOwner returns a command that runs argv as the cluster's owner: the
// postgres user when we are root, else ourselves. It runs from / because
// the caller's folder may be closed to that user.
func asOwner(ctx context.Context, pin pinner, cpu int, argv ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		argv = append([]string{"runuser", "-u", "postgres", "--"}, argv...)
	}
	argv = pin.command(cpu, argv...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = "/"
	return cmd
}

// chownToOwner hands path to the postgres user when we are root.
func chownToOwner(path string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return errors.New(`running as root needs a "postgres" user to own the cluster (initdb refuses root): create it or run as another user`)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return filepath.Walk(path, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// startPostgres creates and starts a cluster under dir, its server pinned
// to cpu, and returns it running.
func startPostgres(ctx context.Context, bindir, dir string, pin pinner, cpu int) (*postgres, error) {
	pg := &postgres{bindir: bindir, dir: dir}
	for _, d := range []string{dir, filepath.Join(dir, "data"), filepath.Join(dir, "sock")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := chownToOwner(dir); err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	out, err := asOwner(ctx, pinner{}, -1, filepath.Join(bindir, "initdb"), "--pgdata="+data, "--username=postgres",
		"--auth=trust", "--encoding=UTF8", "--no-locale", "--no-instructions").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	hba := "local all all trust\nhost all all 127.0.0.1/32 trust\n"
	if err := os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return nil, err
	}
	// Durability buys nothing for a cluster that is deleted at the end; the
	// rest matches scripts/pg.sh's test cluster.
	conf := strings.Join([]string{
		"listen_addresses = '127.0.0.1'",
		"unix_socket_directories = '" + filepath.Join(dir, "sock") + "'",
		"max_connections = 300",
		"fsync = off",
		"synchronous_commit = off",
		"full_page_writes = off",
		"shared_buffers = '128MB'",
		"log_min_messages = 'warning'",
	}, "\n") + "\n"
	f, err := os.OpenFile(filepath.Join(data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	_, err = f.WriteString(conf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if err := chownToOwner(dir); err != nil {
		return nil, err
	}

	logPath := filepath.Join(dir, "postgres.log")
	for attempt := 1; attempt <= 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		// pg_ctl starts the postmaster under taskset's CPU set, and every
		// backend it forks inherits it.
		cmd := asOwner(ctx, pin, cpu, filepath.Join(bindir, "pg_ctl"), "start", "--pgdata="+data, "--log="+logPath,
			"--wait", "--timeout=60", "--silent", "-o", fmt.Sprintf("-p %d", port))
		if out, err := cmd.CombinedOutput(); err != nil {
			tail, _ := os.ReadFile(logPath)
			fmt.Fprintf(os.Stderr, "sheba-bench: postgres on port %d failed (attempt %d): %v %s\n%s\n", port, attempt, err, out, lastLines(string(tail), 10))
			continue
		}
		pg.port, pg.started = port, true
		return pg, nil
	}
	return nil, errors.New("could not start the throwaway Postgres")
}

// url is the URL of database db on the cluster.
func (pg *postgres) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", pg.port, db)
}

// postmasterPID reads the server's pid from postmaster.pid, or 0.
func (pg *postgres) postmasterPID() int {
	b, err := os.ReadFile(filepath.Join(pg.dir, "data", "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// stop stops the server at once: the data is thrown away.
func (pg *postgres) stop() {
	if !pg.started {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = asOwner(ctx, pinner{}, -1, filepath.Join(pg.bindir, "pg_ctl"), "stop", "--pgdata="+filepath.Join(pg.dir, "data"),
		"--mode=immediate", "--wait", "--silent").Run()
	pg.started = false
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
