package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/google/go-cmp/cmp"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/store/storetest"
)

func TestMain(m *testing.M) {
	Prepare(nil)
	os.Exit(storetest.Run(m))
}

// benchApp is the assembly over cfg, its log at warn, closed when tb ends;
// it is not served.
func benchApp(tb testing.TB, cfg config.Config, opts ...Option) *App {
	tb.Helper()
	a, err := New(context.Background(), cfg, slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})), opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(a.close)
	return a
}

func keyEntry(id, key string) config.APIKey {
	sum := sha256.Sum256([]byte(key))
	return config.APIKey{ID: id, SHA256: hex.EncodeToString(sum[:])}
}

// withKey sends key as x-api-key on every call.
func withKey(key string) grpc.DialOption {
	return grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(metadata.AppendToOutgoingContext(ctx, "x-api-key", key), method, req, reply, cc, opts...)
	})
}

func listen(tb testing.TB) net.Listener {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	tb.Cleanup(func() { lis.Close() })
	return lis
}

// implementations is a grpc.ServiceRegistrar that keeps the
// implementation of each service, by service name, to call it directly.
type implementations map[string]any

func (m implementations) RegisterService(desc *grpc.ServiceDesc, impl any) {
	m[desc.ServiceName] = impl
}

// TestNewLogsWarnings checks that what config check warns of is logged at
// start too, one line each, at level WARN.
func TestNewLogsWarnings(t *testing.T) {
	cfg := config.Default()
	cfg.Database.URL = storetest.UnreachableURL(t)
	cfg.Shutdown.DrainDelay, cfg.Shutdown.Timeout = 20*time.Second, 25*time.Second
	cfg.Auth.Public = []string{shebav1.AccountService_Login_FullMethodName}
	var logs bytes.Buffer
	a, err := New(t.Context(), cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	a.close()
	var warned []string
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var rec struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec.Level == "WARN" {
			warned = append(warned, rec.Msg)
		}
	}
	if diff := cmp.Diff(cfg.Warnings(), warned); diff != "" {
		t.Errorf("warnings logged (-want +got):\n%s", diff)
	}
	if len(warned) != 3 || !strings.Contains(warned[0], "shutdown.timeout (25s)") ||
		!strings.Contains(warned[2], "auth.public makes public /sheba.v1.AccountService/Login") {
		t.Errorf("got warnings %q, want the shutdown bound's, the paging secret's and auth.public's", warned)
	}
}

// TestPoolBackstops checks what every connection of the business pool
// carries, derived from limits.timeout, under the deadline of each
// request: statement_timeout, and idle_in_transaction_session_timeout
// (docs/operations.md#slow-database).
func TestPoolBackstops(t *testing.T) {
	cfg := config.Default()
	cfg.Database.URL = storetest.NewDatabase(t)
	cfg.Limits.Timeout = 3 * time.Second
	a, err := New(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer a.close()
	// Two connections at once: each has them, not only the first.
	for range 2 {
		c, err := a.pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		for _, setting := range []string{"statement_timeout", "idle_in_transaction_session_timeout"} {
			var got string
			if err := c.QueryRow(t.Context(), `SHOW `+setting).Scan(&got); err != nil || got != "3s" {
				t.Errorf("%s: got %q, %v; want 3s", setting, got, err)
			}
		}
	}
}

// TestHTTPWriteTimeout: http.addr's write timeout is http.write_timeout,
// or limits.timeout + 10s when it is 0 (the default).
func TestHTTPWriteTimeout(t *testing.T) {
	for _, test := range []struct {
		name         string
		limit, write time.Duration
		want         time.Duration
	}{
		{"default", 5 * time.Second, 0, 15 * time.Second},
		{"longer requests", 40 * time.Second, 0, 50 * time.Second},
		{"set", 5 * time.Second, 2 * time.Second, 2 * time.Second},
	} {
		t.Run(test.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Database.URL = "postgres://127.0.0.1:1/none"
			cfg.Limits.Timeout, cfg.HTTP.WriteTimeout = test.limit, test.write
			a := benchApp(t, cfg)
			if got := a.http.WriteTimeout; got != test.want {
				t.Errorf("write timeout: got %v, want %v", got, test.want)
			}
		})
	}
}
