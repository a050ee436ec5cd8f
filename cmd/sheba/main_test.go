package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shebasvc/sheba/codec/grpczstd"
	"github.com/shebasvc/sheba/gen/openapiv2"
	"github.com/shebasvc/sheba/store/storetest"
)

// TestMain lets a test run this binary as the sheba command: with
// SHEBA_TEST_AS_MAIN set, the test binary is sheba.
func TestMain(m *testing.M) {
	if os.Getenv("SHEBA_TEST_AS_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	// gRPC compressors are registered once per process, before any
	// server, as main does.
	grpczstd.Register()
	quietRedisLog()
	os.Exit(m.Run())
}

// mapEnv is a lookup backed by a map.
func mapEnv(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func runCmd(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), args, mapEnv(env), &stdout, &stderr)
	return stdout.String(), err
}

func TestOpenAPICommand(t *testing.T) {
	out, err := runCmd(t, nil, "openapi")
	if err != nil {
		t.Fatalf("sheba openapi: %v", err)
	}
	if out != openapiv2.Document {
		t.Errorf("sheba openapi does not print the generated document")
	}
}

func TestVersionCommand(t *testing.T) {
	out, err := runCmd(t, nil, "version")
	if err != nil {
		t.Fatalf("sheba version: %v", err)
	}
	if !regexp.MustCompile(`^sheba \S+ \(commit \S+, go1\.\S+\)\n$`).MatchString(out) {
		t.Errorf("sheba version: got %q", out)
	}
}

func TestAPIKeyNew(t *testing.T) {
	out, err := runCmd(t, nil, "apikey", "new", "--id", "billing-svc")
	if err != nil {
		t.Fatalf("sheba apikey new: %v", err)
	}
	m := regexp.MustCompile(`(?s)^API key [^\n]*\n(\S+)\n.*- \{ id: "billing-svc", sha256: "([0-9a-f]{64})" \}\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("unexpected output:\n%s", out)
	}
	sum := sha256.Sum256([]byte(m[1]))
	if hex.EncodeToString(sum[:]) != m[2] {
		t.Errorf("printed sha256 %s is not the SHA-256 of the printed key", m[2])
	}
	if len(m[1]) < 43 {
		t.Errorf("key %q is shorter than 32 random bytes in base64", m[1])
	}
	again, _ := runCmd(t, nil, "apikey", "new", "--id", "billing-svc")
	if again == out {
		t.Error("two runs printed the same key")
	}
}

// TestUsageErrors checks that bad command lines and configs are usage
// errors (exit 2) with one line naming what is wrong.
func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	badFile := dir + "/bad.yaml"
	if err := os.WriteFile(badFile, []byte("limits:\n  max_inflight: 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, test := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no command", nil, nil, "no command"},
		{"unknown command", nil, []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"bad flag", nil, []string{"serve", "--nope"}, "flag provided but not defined: -nope"},
		{"missing config file", nil, []string{"serve", "--config", dir + "/missing.yaml"}, "missing.yaml"},
		{"bad value in file", map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/db"}, []string{"serve", "--config", badFile}, "limits.max_inflight"},
		{"bad value in env", map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/db", "SHEBA_LIMITS_MAX_INFLIGHT": "lots"}, []string{"serve"}, "SHEBA_LIMITS_MAX_INFLIGHT"},
		{"paging secret not hex", map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/db", "SHEBA_PAGING_SECRET": "not-hex"}, []string{"serve"}, "paging.secret (SHEBA_PAGING_SECRET)"},
		{"no database", nil, []string{"migrate", "status"}, "database.url"},
		{"bad redis url", map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/db", "SHEBA_REDIS_URL": "http://:hunter2@cache"}, []string{"serve"}, "redis.url (SHEBA_REDIS_URL)"},
		{"min above max", map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/db", "SHEBA_LIMITS_ADAPTIVE": "true", "SHEBA_LIMITS_MAX_INFLIGHT": "4"}, []string{"serve"}, "limits.min_inflight"},
		{"bad migrate direction", nil, []string{"migrate", "sideways"}, "up, down or status"},
		{"apikey without id", nil, []string{"apikey", "new"}, "--id"},
		{"apikey bad id", nil, []string{"apikey", "new", "--id", "Bad Id"}, "--id"},
	} {
		t.Run(test.name, func(t *testing.T) {
			_, err := runCmd(t, test.env, test.args...)
			var uerr *usageError
			if !errors.As(err, &uerr) {
				t.Fatalf("got %v, want a usage error", err)
			}
			first, _, _ := strings.Cut(err.Error(), "\n")
			if !strings.Contains(first, test.want) {
				t.Errorf("got %q, want it to name %q", first, test.want)
			}
		})
	}
}

// TestServeMigrateAndSIGTERM runs the real binary: serve --migrate on a
// fresh database answers REST and gRPC ports, then exits 0 on SIGTERM.
func TestServeMigrateAndSIGTERM(t *testing.T) {
	url := storetest.NewDatabase(t)
	p := startSheba(t, url)
	httpAddr := p.httpAddr
	resp, err := http.Get("http://" + httpAddr + "/v1/ping")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/ping: %v %v", resp, err)
	}
	resp.Body.Close()

	p.stop(t)
	if _, err := net.DialTimeout("tcp", httpAddr, time.Second); err == nil {
		t.Error("HTTP port still accepts connections after exit")
	}

	// The migration left its tables: migrate status says applied.
	out, err := runCmd(t, map[string]string{"DATABASE_URL": url}, "migrate", "status")
	if err != nil {
		t.Fatalf("migrate status: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	applied := 0
	for sc.Scan() {
		if strings.HasSuffix(sc.Text(), "applied") {
			applied++
		}
	}
	if applied == 0 {
		t.Errorf("migrate status lists nothing applied:\n%s", out)
	}
}

// shebaProcess is this test binary running as "sheba serve --migrate".
type shebaProcess struct {
	cmd                *exec.Cmd
	httpAddr, grpcAddr string
	logs               *bytes.Buffer
}

// startSheba starts sheba on the database at url, with extra environment
// variables env, and waits until it is ready.
func startSheba(t *testing.T, url string, env ...string) *shebaProcess {
	t.Helper()
	p := &shebaProcess{httpAddr: freeAddr(t), grpcAddr: freeAddr(t), logs: &bytes.Buffer{}}
	p.cmd = exec.Command(os.Args[0], "serve", "--migrate")
	p.cmd.Env = append(os.Environ(),
		"SHEBA_TEST_AS_MAIN=1",
		"DATABASE_URL="+url,
		"SHEBA_HTTP_ADDR="+p.httpAddr,
		"SHEBA_GRPC_ADDR="+p.grpcAddr,
	)
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + p.httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
	}
	t.Fatalf("not ready within 20s; log:\n%s", p.logs.String())
	return nil
}

// stop sends SIGTERM and waits for a clean exit.
func (p *shebaProcess) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v; log:\n%s", err, p.logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30s after SIGTERM; log:\n%s", p.logs.String())
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return fmt.Sprint(lis.Addr())
}
