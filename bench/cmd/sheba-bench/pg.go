package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// The driver does not start Postgres itself: `make bench` runs it under
// `scripts/pg.sh test --`, the launcher of `make test`, which starts a
// throwaway cluster (the postgres user when root, trust auth, 127.0.0.1,
// durability off), exports where it is, and stops and deletes it when the
// driver exits. These are the variables it exports.
const (
	envTestURL    = "SHEBA_TEST_DATABASE_URL" // superuser URL of the cluster
	envTestPGData = "SHEBA_TEST_PGDATA"       // its data folder
	envTestPGLog  = "SHEBA_TEST_PGLOG"        // its server log
	envPGBindir   = "PG_BINDIR"               // the binaries it runs on
	// envUnderPGSH marks the driver that re-executed itself under pg.sh, so
	// that a pg.sh that exports too little is an error rather than a loop.
	envUnderPGSH = "SHEBA_BENCH_UNDER_PG_SH"
)

// postgres is the throwaway cluster of one bench run.
type postgres struct {
	bindir  string
	data    string // data folder, holding postmaster.pid
	logPath string // the server's log
	admin   *url.URL
	port    int
}

// postgresFromEnv returns the cluster that scripts/pg.sh test exported, or
// nil when the driver does not run under it.
func postgresFromEnv() (*postgres, error) {
	data := os.Getenv(envTestPGData)
	if data == "" {
		if os.Getenv(envUnderPGSH) != "" {
			return nil, fmt.Errorf("scripts/pg.sh test did not export %s", envTestPGData)
		}
		return nil, nil
	}
	u, err := url.Parse(os.Getenv(envTestURL))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", envTestURL, err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return nil, fmt.Errorf("%s=%q has no port", envTestURL, u.Redacted())
	}
	pg := &postgres{bindir: os.Getenv(envPGBindir), data: data, logPath: os.Getenv(envTestPGLog), admin: u, port: port}
	for _, b := range []string{"psql", "postgres"} {
		if st, err := os.Stat(filepath.Join(pg.bindir, b)); err != nil || st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("%s=%q lacks %s", envPGBindir, pg.bindir, b)
		}
	}
	return pg, nil
}

// reexecUnderPGSH replaces the driver by `bash scripts/pg.sh test -- SELF
// ARGS...`, so that running it by hand (go run ./bench/cmd/sheba-bench) gets
// the same cluster as `make bench`.
func reexecUnderPGSH(repo, self string, args []string) error {
	bash, err := exec.LookPath("bash")
	if err != nil {
		return fmt.Errorf("bash, which runs scripts/pg.sh, not found: %w", err)
	}
	argv := append([]string{"bash", filepath.Join(repo, "scripts", "pg.sh"), "test", "--", self}, args...)
	return syscall.Exec(bash, argv, append(os.Environ(), envUnderPGSH+"=1"))
}

// url is the URL of database db on the cluster.
func (pg *postgres) url(db string) string {
	u := *pg.admin
	u.Path = "/" + db
	u.RawPath = ""
	return u.String()
}

// postmasterPID reads the server's pid from postmaster.pid, or 0.
func (pg *postgres) postmasterPID() int {
	b, err := os.ReadFile(filepath.Join(pg.data, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// pin moves the postmaster and the processes it has started to cpu, with
// taskset; the backends it forks later inherit the CPU. The postmaster first,
// so that no child escapes between the two steps.
func (pg *postgres) pin(ctx context.Context, p pinner, cpu int) error {
	if p.taskset == "" || cpu < 0 {
		return nil
	}
	root := pg.postmasterPID()
	if root == 0 {
		return fmt.Errorf("no postmaster.pid in %s", pg.data)
	}
	set := func(pid int) error {
		out, err := exec.CommandContext(ctx, p.taskset, "-a", "-p", "-c", strconv.Itoa(cpu), strconv.Itoa(pid)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("taskset -p %d: %v %s", pid, err, out)
		}
		return nil
	}
	if err := set(root); err != nil {
		return fmt.Errorf("pin Postgres to CPU %d: %w", cpu, err)
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		if ppid, _, _, err := procStat(pid); err == nil && ppid == root {
			// A backend may exit in between: nothing to pin then.
			if err := set(pid); err != nil && procAlive(pid) {
				return fmt.Errorf("pin Postgres to CPU %d: %w", cpu, err)
			}
		}
	}
	return nil
}

func procAlive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

// copyLog copies the server's log into dir, for -keep: the cluster itself is
// deleted by pg.sh when the driver exits.
func (pg *postgres) copyLog(dir string) error {
	if pg.logPath == "" {
		return errors.New("scripts/pg.sh exported no " + envTestPGLog)
	}
	b, err := os.ReadFile(pg.logPath)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "postgres.log"), b, 0o644)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
