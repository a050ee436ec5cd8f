// Package shebaproc runs the sheba binary for tests: the one process
// harness of every test that starts sheba as a user would (the command
// line's tests, the system tests that send signals, the manifest checker,
// the rolling restart).
//
// Binary builds ./cmd/sheba with go build; New gives a process its own
// ports on 127.0.0.1; Start, Stop and Start again run it on the same ports,
// as a restarted replica would. Every process still running when its test
// ends is killed. Everything here is safe for concurrent use.
package shebaproc

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// root is the folder of sheba's go.mod, found from this file's place in
// it, so that tests of another module (the manifest checker's) can build
// sheba too.
func root() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("shebaproc: cannot tell where the sheba module is")
	}
	return filepath.Join(filepath.Dir(file), "..", ".."), nil
}

// Build builds the sheba command into dir and returns the binary's path.
// Flags are passed to go build (-race, say). A test binary that starts
// sheba in many tests builds it once, in TestMain; Binary is for one test.
func Build(dir string, flags ...string) (string, error) {
	src, err := root()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "sheba")
	args := append([]string{"build", "-o", bin}, flags...)
	cmd := exec.Command("go", append(args, "./cmd/sheba")...)
	cmd.Dir = src
	// The build flags of the tests' own packages, so the build cache they
	// filled serves here too and only the link is left.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sheba: %v\n%s", err, out)
	}
	return bin, nil
}

// Binary builds the sheba command into a folder of the test, as Build
// does, and returns its path.
func Binary(tb testing.TB, flags ...string) string {
	tb.Helper()
	bin, err := Build(tb.TempDir(), flags...)
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}

// Process is one sheba process, started again on the same ports after each
// stop. Its fields are set by New and only read afterwards.
type Process struct {
	// Bin is the binary; Args its arguments (default "serve").
	Bin  string
	Args []string
	// Env is added to this process's environment, before the addresses.
	Env []string
	// HTTPAddr and GRPCAddr are set as SHEBA_HTTP_ADDR and SHEBA_GRPC_ADDR.
	HTTPAddr, GRPCAddr string

	logs Buffer // every run's stdout and stderr

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// New returns a process of bin (Binary's, when empty) with env and ports
// of its own; Start starts it.
func New(tb testing.TB, bin string, env ...string) *Process {
	tb.Helper()
	if bin == "" {
		bin = Binary(tb)
	}
	p := &Process{Bin: bin, Args: []string{"serve"}, Env: env, HTTPAddr: FreeAddr(tb), GRPCAddr: FreeAddr(tb)}
	tb.Cleanup(p.kill)
	return p
}

// Start starts the process. It does not wait until it is ready.
func (p *Process) Start(tb testing.TB) {
	tb.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		tb.Fatal("shebaproc: Start of a process that runs")
	}
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Env = append(cmd.Env, "SHEBA_HTTP_ADDR="+p.HTTPAddr, "SHEBA_GRPC_ADDR="+p.GRPCAddr)
	cmd.Stdout, cmd.Stderr = &p.logs, &p.logs
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", p.Bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.cmd, p.done = cmd, done
}

// WaitReady waits until GET /readyz answers 200, at most timeout.
func (p *Process) WaitReady(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	client := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if p.exited() {
			tb.Fatalf("sheba exited before it was ready; log:\n%s", p.Logs())
		}
		resp, err := client.Get("http://" + p.HTTPAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
	tb.Fatalf("not ready within %v; log:\n%s", timeout, p.Logs())
}

// Signal sends sig to the running process.
func (p *Process) Signal(tb testing.TB, sig os.Signal) {
	tb.Helper()
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		tb.Fatal("shebaproc: Signal to a process that does not run")
	}
	if err := cmd.Process.Signal(sig); err != nil {
		tb.Fatalf("signal %v: %v", sig, err)
	}
}

// Wait waits at most timeout for the process to exit and returns its exit
// status; after Wait, Start may run it again.
func (p *Process) Wait(tb testing.TB, timeout time.Duration) int {
	tb.Helper()
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		tb.Fatal("shebaproc: Wait for a process that does not run")
	}
	select {
	case <-done:
	case <-time.After(timeout):
		tb.Fatalf("sheba still runs %v later; log:\n%s", timeout, p.Logs())
	}
	p.mu.Lock()
	p.cmd = nil
	p.mu.Unlock()
	return cmd.ProcessState.ExitCode()
}

// Stop sends SIGTERM and returns the exit status, waiting at most a
// minute.
func (p *Process) Stop(tb testing.TB) int {
	tb.Helper()
	p.Signal(tb, syscall.SIGTERM)
	return p.Wait(tb, time.Minute)
}

// Pid is the process id of the running process, 0 if none runs.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Logs returns what every run of the process wrote so far.
func (p *Process) Logs() string { return p.logs.String() }

func (p *Process) exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return true
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill ends a process its test left running.
func (p *Process) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-done
	}
}

// taken holds the ports FreeAddr handed out in this test binary, so that
// two processes never get the same one.
var taken = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreeAddr returns a 127.0.0.1 address on which nothing listens, on a port
// below Linux's default ephemeral range (32768-60999): a process started
// again takes its ports back, and an outgoing connection must not have
// taken one as its local port meanwhile, as it may any port of that range.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	taken.Lock()
	defer taken.Unlock()
	for range 1000 {
		port := 20000 + rand.IntN(12000)
		if taken.ports[port] {
			continue
		}
		lis, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		lis.Close()
		taken.ports[port] = true
		return lis.Addr().String()
	}
	tb.Fatal("shebaproc: no free port in 20000-31999")
	return ""
}

// Buffer is a log sink safe for concurrent writes: what a process, a
// server or a test logger wrote, read while they write.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written since the last Reset.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Reset empties the buffer.
func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}
