package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shebasvc/sheba/e2e/shebaproc"
	"github.com/shebasvc/sheba/gen/openapiv2"
	"github.com/shebasvc/sheba/gen/openapiv3"
	"github.com/shebasvc/sheba/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(storetest.Run(m)) }

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

// TestOpenAPICommand: sheba openapi prints the OpenAPI 2 document, as it
// did before version 3.1 came, unless --version 3 asks for that one.
func TestOpenAPICommand(t *testing.T) {
	for _, test := range []struct {
		args []string
		want string
	}{
		{nil, openapiv2.Document},
		{[]string{"--version", "2"}, openapiv2.Document},
		{[]string{"--version=3"}, openapiv3.Document},
		{[]string{"--version", "3"}, openapiv3.Document},
	} {
		out, err := runCmd(t, nil, append([]string{"openapi"}, test.args...)...)
		if err != nil {
			t.Fatalf("sheba openapi %v: %v", test.args, err)
		}
		if out != test.want {
			t.Errorf("sheba openapi %v does not print the generated document", test.args)
		}
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
		{"hook method that is none", map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/db", "SHEBA_HOOK_METHODS": `["/sheba.v1.PingService/NoSuchMethod"]`}, []string{"serve"}, "hook.methods[0] (SHEBA_HOOK_METHODS)"},
		{"hook header with the key", map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/db", "SHEBA_HOOK_HEADERS": `["grpc-metadata-authorization"]`}, []string{"serve"}, "hook.headers[0] (SHEBA_HOOK_HEADERS)"},
		{"tls certificate missing", map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/db", "SHEBA_TLS_CERT_FILE": dir + "/none.crt", "SHEBA_TLS_KEY_FILE": dir + "/none.key"}, []string{"serve"}, "tls.cert_file (SHEBA_TLS_CERT_FILE)"},
		{"tls certificate not PEM", map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/db", "SHEBA_TLS_CERT_FILE": badFile, "SHEBA_TLS_KEY_FILE": badFile}, []string{"config", "check"}, "tls.cert_file (SHEBA_TLS_CERT_FILE)"},
		{"client CA without a certificate", map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/db", "SHEBA_TLS_CLIENT_CA_FILE": badFile}, []string{"serve"}, "tls.client_ca_file (SHEBA_TLS_CLIENT_CA_FILE)"},
		{"bad migrate direction", nil, []string{"migrate", "sideways"}, "up, down or status"},
		{"force without down", map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/db"}, []string{"migrate", "up", "--force"}, "--force is for migrate down only"},
		{"apikey without id", nil, []string{"apikey", "new"}, "--id"},
		{"apikey bad id", nil, []string{"apikey", "new", "--id", "Bad Id"}, "--id"},
		{"openapi version that is none", nil, []string{"openapi", "--version", "4"}, "--version: want 2 or 3"},
		{"openapi version not a number", nil, []string{"openapi", "--version", "3.1"}, "--version: want 2 or 3"},
		{"openapi argument", nil, []string{"openapi", "3"}, `unexpected argument "3"`},
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

// TestServeMigrateAndSIGTERM runs the built command: serve --migrate on a
// fresh database answers on the REST port, then exits 0 on SIGTERM and
// closes its ports; the migrations it applied are listed as applied.
func TestServeMigrateAndSIGTERM(t *testing.T) {
	url := storetest.NewDatabase(t)
	p := shebaproc.New(t, "", "DATABASE_URL="+url)
	p.Args = []string{"serve", "--migrate"}
	p.Start(t)
	p.WaitReady(t, 20*time.Second)
	resp, err := http.Get("http://" + p.HTTPAddr + "/v1/ping")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/ping: %v %v", resp, err)
	}
	resp.Body.Close()

	if code := p.Stop(t); code != 0 {
		t.Fatalf("exit status %d after SIGTERM, want 0; log:\n%s", code, p.Logs())
	}
	if _, err := net.DialTimeout("tcp", p.HTTPAddr, time.Second); err == nil {
		t.Error("HTTP port still accepts connections after exit")
	}

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

// TestMigrateDownGuard checks that `migrate down` reverts a step whose
// tables are empty, refuses one that would drop rows with a usage error
// (exit 2) naming the tables and --force, changing nothing, and goes ahead
// with --force.
func TestMigrateDownGuard(t *testing.T) {
	url := storetest.NewDatabase(t)
	env := map[string]string{"DATABASE_URL": url}
	applied := func() int {
		out, err := runCmd(t, env, "migrate", "status")
		if err != nil {
			t.Fatalf("migrate status: %v", err)
		}
		return strings.Count(out, "applied")
	}
	// Every migration after the first drops columns, indexes or tables
	// that are empty (webhooks, idempotency keys).
	for range applied() - 1 {
		if _, err := runCmd(t, env, "migrate", "down"); err != nil {
			t.Fatalf("migrate down over empty tables: %v", err)
		}
	}
	if n := applied(); n != 1 {
		t.Fatalf("got %d migrations applied, want 1", n)
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(t.Context()))
	if _, err := conn.Exec(t.Context(), `INSERT INTO accounts (username, password_hash) VALUES ('kept', 'x'), ('also', 'y')`); err != nil {
		t.Fatal(err)
	}

	_, err = runCmd(t, env, "migrate", "down")
	var uerr *usageError
	if !errors.As(err, &uerr) {
		t.Fatalf("migrate down over rows: got %v, want a usage error", err)
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "accounts (2 rows)") || !strings.Contains(msg, "--force") {
		t.Errorf("migrate down over rows: got %q, want one line naming accounts and --force", msg)
	}
	if n := applied(); n != 1 {
		t.Errorf("after the refusal: got %d migrations applied, want 1", n)
	}
	if _, err := runCmd(t, env, "migrate", "down", "--force"); err != nil {
		t.Fatalf("migrate down --force: %v", err)
	}
	if n := applied(); n != 0 {
		t.Errorf("after migrate down --force: got %d migrations applied, want 0", n)
	}
}
