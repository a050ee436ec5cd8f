//go:build unix

package hook

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// echoEnv, set, makes the test binary the hook server of
// BenchmarkHTTPClientCheck: it serves continue on TCP (HTTP/1.1 and h2c)
// and on the unix socket it names, prints its TCP address and serves until
// its stdin closes.
const echoEnv = "SHEBA_HOOK_BENCH_ECHO"

func TestMain(m *testing.M) {
	if sock := os.Getenv(echoEnv); sock != "" {
		serveEcho(sock)
		return
	}
	os.Exit(m.Run())
}

func serveEcho(sock string) {
	srv := &http.Server{Handler: answerJSON(httpTestContinue), Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	unix, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	go srv.Serve(tcp)
	go srv.Serve(unix)
	fmt.Println(tcp.Addr())
	// Until the benchmark ends (or dies): stdin closes.
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}

// BenchmarkHTTPClientCheck is one check of the http protocol, against a
// hook that answers continue at once in a process of its own (this test
// binary, echoEnv), over each transport, 16 at once per CPU as under
// load. Besides ns/op it reports cpu-ns/op, the CPU this process spent
// per check: the client's side alone, sheba's own side of a hook call.
// make bench runs sheba on one CPU: -cpu 1 is its case.
func BenchmarkHTTPClientCheck(b *testing.B) {
	sock := filepath.Join(b.TempDir(), "hook.sock")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), echoEnv+"="+sock)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr := strings.TrimSpace(line)
	if err != nil || strings.HasPrefix(addr, "error") {
		b.Fatalf("hook server: %q, %v", line, err)
	}

	for _, bc := range []struct{ name, url string }{
		{"http", "http://" + addr + "/check"},
		{"unix", "unix://" + sock},
		{"h2c", "h2c://" + addr + "/check"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := newHTTPTestClient(b, bc.url, HTTPOptions{})
			call := httpTestCall()
			ctx := context.Background()
			// The first call dials.
			if _, err := c.Check(ctx, call); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			// Checks in flight at once, as under load: the wait of one
			// is spent on others rather than on the scheduler's idling.
			b.SetParallelism(16)
			start := cpuTime(b)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Check(ctx, call); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the CPU, user and system, this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
