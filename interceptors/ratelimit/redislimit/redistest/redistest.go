// Package redistest runs a real, throwaway redis-server for tests.
//
// Each Start runs Debian's redis-server (make test installs it) on a free
// 127.0.0.1 port, in a temporary folder, without persistence; it is killed
// when the test ends. A test that cannot find redis-server fails with a
// message saying how to install it: a Redis test must never pass by not
// running. Tests stop and restart it to play an outage.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/shebasvc/sheba/internal/testport"
)

// Server is a running (or stopped) redis-server.
type Server struct {
	tb   testing.TB
	port int
	dir  string
	cmd  *exec.Cmd
	// exited is closed once cmd has exited (and was waited for).
	exited chan struct{}
}

// Start starts a redis-server for the test and waits until it answers.
func Start(tb testing.TB) *Server {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Fatal("redis-server not found: install it (Debian: apt-get install redis-server; make test does)")
	}
	s := &Server{tb: tb, port: testport.Free(tb), dir: tb.TempDir()}
	s.Restart()
	tb.Cleanup(s.Stop)
	return s
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is the redis:// URL of the server.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Stop kills the server at once (SIGKILL, as a crash would) and waits for
// it to exit. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	// SIGKILL works on a stopped process too.
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Pause stops the server's process (SIGSTOP): it keeps its connections
// but answers nothing, as a Redis stuck in a long command or a slow disk
// would, until Resume.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.tb.Helper()
	if s.cmd == nil {
		s.tb.Fatal("redis-server is not running")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("signal redis-server: %v", err)
	}
}

// Restart starts the server again on the same port (empty: nothing is
// persisted) and waits until it answers PING.
func (s *Server) Restart() {
	s.tb.Helper()
	if s.cmd != nil {
		return
	}
	cmd := exec.Command("redis-server",
		"--bind", "127.0.0.1", "--port", strconv.Itoa(s.port), "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("start redis-server: %v", err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	exited := s.exited
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	var lastErr error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			// Its port taken, most likely.
			s.cmd = nil
			s.tb.Fatalf("redis-server on %s exited at start (is the port taken?)", s.Addr())
		default:
		}
		if lastErr = ping(s.Addr()); lastErr == nil {
			return
		}
	}
	s.Stop()
	s.tb.Fatalf("redis-server on %s did not answer within 10s: %v", s.Addr(), lastErr)
}

// ping sends one PING in the Redis protocol and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}
