package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shebasvc/sheba/e2e/shebaproc"
)

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	writeConfigFile(t, good, "shutdown: { drain_delay: 5s, timeout: 20s }\n")
	writeConfigFile(t, bad, "shutdown: { drain_delay: 30s, timeout: 20s }\n")
	db := map[string]string{"DATABASE_URL": "postgres://sheba@db.example:5432/sheba"}
	withEnv := func(extra map[string]string) map[string]string {
		env := map[string]string{}
		for k, v := range db {
			env[k] = v
		}
		for k, v := range extra {
			env[k] = v
		}
		return env
	}
	for _, test := range []struct {
		name    string
		env     map[string]string
		args    []string
		wantOut string // on success
		wantErr string // in the usage error's first line
	}{
		{"file", db, []string{"config", "check", "--config", good}, "config ok (" + good + " and environment)\n", ""},
		{"file from SHEBA_CONFIG", withEnv(map[string]string{"SHEBA_CONFIG": good}), []string{"config", "check"}, "config ok (" + good + " and environment)\n", ""},
		{"no file", db, []string{"config", "check"}, "config ok (defaults and environment, no file)\n", ""},
		{"the repo's dev config", db, []string{"config", "check", "--config", "../../config/dev.yaml"}, "config ok (../../config/dev.yaml and environment)\n", ""},
		{"the repo's example config", db, []string{"config", "check", "--config", "../../config/example.yaml"}, "config ok (../../config/example.yaml and environment)\n", ""},
		{"invalid value in file", db, []string{"config", "check", "--config", bad}, "", "shutdown.timeout"},
		{"invalid value in env", withEnv(map[string]string{"SHEBA_SHUTDOWN_TIMEOUT": "soon"}), []string{"config", "check", "--config", good}, "", "shutdown.timeout (SHEBA_SHUTDOWN_TIMEOUT)"},
		{"no database url", nil, []string{"config", "check", "--config", good}, "", "database.url"},
		{"missing file", db, []string{"config", "check", "--config", filepath.Join(dir, "nope.yaml")}, "", "nope.yaml"},
		{"no subcommand", db, []string{"config"}, "", "config check"},
		{"other subcommand", db, []string{"config", "show"}, "", "config check"},
		{"extra argument", db, []string{"config", "check", "extra"}, "", `unexpected argument "extra"`},
	} {
		t.Run(test.name, func(t *testing.T) {
			out, err := runCmd(t, test.env, test.args...)
			if test.wantErr == "" {
				if err != nil {
					t.Fatalf("got error %v, want none", err)
				}
				if out != test.wantOut {
					t.Errorf("got output %q, want %q", out, test.wantOut)
				}
				return
			}
			var uerr *usageError
			if !errors.As(err, &uerr) {
				t.Fatalf("got %v, want a usage error", err)
			}
			if first, _, _ := strings.Cut(err.Error(), "\n"); !strings.Contains(first, test.wantErr) {
				t.Errorf("got %q, want it to name %q", first, test.wantErr)
			}
		})
	}
}

// TestConfigCheckExitStatus runs the binary as a deployment script would: a
// bad config exits 2 with one line on stderr, a good one exits 0 silently,
// and one that is allowed but likely a mistake exits 0 with one warning
// line naming the keys.
func TestConfigCheckExitStatus(t *testing.T) {
	bin := shebaproc.Binary(t)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	writeConfigFile(t, bad, "limits:\n  max_inflight: 0\n")
	unknownPublic := filepath.Join(t.TempDir(), "public.yaml")
	writeConfigFile(t, unknownPublic, "auth:\n  public: [\"/sheba.v1.PingService/Ping\", \"/grpc.health.v1.Health/Check\"]\n")
	unknownHook := filepath.Join(t.TempDir(), "hook.yaml")
	writeConfigFile(t, unknownHook, "hook:\n  url: http://127.0.0.1:1/check\n  methods: [\"/sheba.v1.AccountService/Logout\"]\n")
	const secret = "SHEBA_PAGING_SECRET=00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	for _, test := range []struct {
		name       string
		args       []string
		env        []string
		wantStatus int
		wantStderr string
	}{
		{"valid", []string{"config", "check"}, []string{secret}, 0, ""},
		{"invalid", []string{"config", "check", "--config", bad}, []string{secret}, 2, "limits.max_inflight"},
		{"shutdown shorter than drain and deadline", []string{"config", "check"},
			[]string{secret, "SHEBA_SHUTDOWN_DRAIN_DELAY=20s", "SHEBA_SHUTDOWN_TIMEOUT=25s"}, 0,
			"warning: shutdown.timeout (25s) is not longer than shutdown.drain_delay (20s) + limits.timeout (5s)"},
		{"no paging secret", []string{"config", "check"}, nil, 0, "warning: paging.secret is not set"},
		{"bodies of 64 MiB", []string{"config", "check"}, []string{secret, "SHEBA_HTTP_MAX_BODY_BYTES=67108864"}, 0, ""},
		{"bodies over 64 MiB", []string{"config", "check"}, []string{secret, "SHEBA_HTTP_MAX_BODY_BYTES=67108865"}, 2,
			"http.max_body_bytes (SHEBA_HTTP_MAX_BODY_BYTES): must be at most 67108864 (64 MiB), got 67108865"},
		{"bodies near MaxInt64", []string{"serve"}, []string{secret, "SHEBA_HTTP_MAX_BODY_BYTES=9223372036854775807"}, 2,
			"http.max_body_bytes (SHEBA_HTTP_MAX_BODY_BYTES): must be at most 67108864 (64 MiB)"},
		{"public method that is none", []string{"config", "check", "--config", unknownPublic}, []string{secret}, 2,
			`auth.public[1]: "/grpc.health.v1.Health/Check" is not a method of sheba`},
		{"public method that is none, serve", []string{"serve"}, []string{secret, `SHEBA_AUTH_PUBLIC=["/sheba.v1.PingService/NoSuchMethod"]`}, 2,
			`auth.public[0] (SHEBA_AUTH_PUBLIC): "/sheba.v1.PingService/NoSuchMethod" is not a method of sheba`},
		{"hook method that is none", []string{"config", "check", "--config", unknownHook}, []string{secret}, 2,
			`hook.methods[0]: "/sheba.v1.AccountService/Logout" is not a method of sheba`},
		{"public policy changed", []string{"config", "check"}, []string{secret, `SHEBA_AUTH_PUBLIC=["/sheba.v1.AccountService/Login"]`}, 0,
			"warning: auth.public makes public /sheba.v1.AccountService/Login, which need a key by the API's policy; and makes /sheba.v1.PingService/Ping"},
	} {
		t.Run(test.name, func(t *testing.T) {
			cmd := exec.Command(bin, test.args...)
			cmd.Env = append([]string{"DATABASE_URL=postgres://sheba@db.example/sheba"}, test.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			status := 0
			var exitErr *exec.ExitError
			if errors.As(err, &exitErr) {
				status = exitErr.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if status != test.wantStatus {
				t.Errorf("got exit status %d, want %d (stderr %q)", status, test.wantStatus, stderr.String())
			}
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if test.wantStderr == "" {
				if stderr.Len() != 0 {
					t.Errorf("got stderr %q, want none", stderr.String())
				}
				return
			}
			if len(lines) != 1 || !strings.Contains(lines[0], test.wantStderr) {
				t.Errorf("got stderr %q, want one line naming %q", stderr.String(), test.wantStderr)
			}
		})
	}
}

func writeConfigFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
