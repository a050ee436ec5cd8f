package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pinner prefixes commands with taskset so that a process and everything it
// starts run on one CPU. Without taskset (or with cpu < 0) it does nothing.
type pinner struct {
	taskset string // path of taskset, or "" when unavailable
}

// command returns the argv that runs argv on cpu.
func (p pinner) command(cpu int, argv ...string) []string {
	if p.taskset == "" || cpu < 0 {
		return argv
	}
	return append([]string{p.taskset, "-c", strconv.Itoa(cpu)}, argv...)
}

// freePort asks the kernel for a free TCP port on 127.0.0.1. Another
// process could take it before we use it; on this machine nothing else binds
// such ports in between.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// proc is a server process started by the driver. taskset execs its command,
// so pid is the server itself, whose /proc entry gives its peak RSS.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
}

// startProc starts argv with env added to the driver's environment, its
// stdout and stderr going to dir/name.log.
func startProc(name, dir string, env []string, argv ...string) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Its own process group, so a Ctrl-C on the terminal reaches only the
	// driver, which then stops its children in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitedErr says that p exited, with its last output; nil while p runs.
func (p *proc) exitedErr() error {
	if !p.exited() {
		return nil
	}
	return fmt.Errorf("%s exited during the run (%v); its last output:\n%s", p.name, p.waitErr, p.logTail(20))
}

// stop sends SIGTERM and, if the process has not exited after grace, SIGKILL.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// logTail returns the last n lines of the process's output.
func (p *proc) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitReady polls check until it succeeds, the process exits, ctx ends or
// timeout passes.
func (p *proc) waitReady(ctx context.Context, timeout time.Duration, check func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("%s exited (%v) before it was ready; its last output:\n%s", p.name, p.waitErr, p.logTail(20))
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		last = check(cctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready after %v: %v; its last output:\n%s", p.name, timeout, last, p.logTail(20))
}

// resetPeakRSS sets the process's high-water mark of resident memory to its
// current resident size (Linux 4.0+), so that VmHWM read after a run is the
// peak of that run. It fails quietly where the kernel does not allow it.
func resetPeakRSS(pid int) bool {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
}

// peakRSSKiB reads VmHWM from /proc/PID/status.
func peakRSSKiB(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseVmHWM(f)
}

func parseVmHWM(r io.Reader) (int64, error) { return parseStatusKiB(r, "VmHWM") }

// rssKiB reads VmRSS, the resident memory now, from /proc/PID/status.
func rssKiB(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseStatusKiB(f, "VmRSS")
}

// parseStatusKiB reads the kB figure of field from a /proc/PID/status.
func parseStatusKiB(r io.Reader, field string) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			fields := strings.Fields(rest)
			if len(fields) == 0 {
				break
			}
			return strconv.ParseInt(fields[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s line", field)
}

// cpuTimes holds busy and total jiffies per CPU from /proc/stat.
type cpuTimes map[int][2]uint64

func readCPUTimes() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil
	}
	return parseCPUTimes(b)
}

func parseCPUTimes(b []byte) cpuTimes {
	out := cpuTimes{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		fields := strings.Fields(string(line))
		if len(fields) < 5 || !strings.HasPrefix(fields[0], "cpu") || fields[0] == "cpu" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(fields[0], "cpu"))
		if err != nil {
			continue
		}
		var total, idle uint64
		for i, f := range fields[1:] {
			v, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				continue
			}
			// guest and guest_nice are already counted in user and nice.
			if i >= 8 {
				break
			}
			total += v
			if i == 3 || i == 4 { // idle, iowait
				idle += v
			}
		}
		out[n] = [2]uint64{total - idle, total}
	}
	return out
}

// busy returns the share of time cpu was busy between a and b, or -1.
func busy(a, b cpuTimes, cpu int) float64 {
	x, ok1 := a[cpu]
	y, ok2 := b[cpu]
	if !ok1 || !ok2 || y[1] <= x[1] {
		return -1
	}
	return float64(y[0]-x[0]) / float64(y[1]-x[1])
}

// userHZ is the unit of the times in /proc/PID/stat: fixed at 100 for
// user space on Linux, whatever the kernel's own tick.
const userHZ = 100

// procStat returns a process's parent pid, its own CPU ticks (utime +
// stime) and those of its waited-for children (cutime + cstime).
func procStat(pid int) (ppid int, self, children uint64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	return parseProcStat(b)
}

func parseProcStat(b []byte) (ppid int, self, children uint64, err error) {
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, errors.New("bad /proc/PID/stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime..cstime fields 14..17.
	if len(f) < 15 {
		return 0, 0, 0, errors.New("short /proc/PID/stat")
	}
	ppid, _ = strconv.Atoi(f[1])
	var t [4]uint64
	for k := range t {
		t[k], _ = strconv.ParseUint(f[11+k], 10, 64)
	}
	return ppid, t[0] + t[1], t[2] + t[3], nil
}

// treeCPUTicks is the CPU time used so far by process root and its
// children, the living ones and those it has reaped: for the postmaster,
// every backend of the cluster, including those that exited during a run.
func treeCPUTicks(root int) uint64 {
	if root <= 0 {
		return 0
	}
	_, self, reaped, err := procStat(root)
	if err != nil {
		return 0
	}
	total := self + reaped
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		if ppid, self, _, err := procStat(pid); err == nil && ppid == root {
			total += self
		}
	}
	return total
}
