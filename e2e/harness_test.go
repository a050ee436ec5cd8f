package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/e2e/resttest"
	"github.com/shebasvc/sheba/e2e/shebaproc"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/requestlog"
	"github.com/shebasvc/sheba/internal/app"
	"github.com/shebasvc/sheba/store/storetest"
)

// The API key every test client sends unless told otherwise.
const (
	testKey   = "test-key-0123456789abcdefghijklmnopqrstuv"
	testKeyID = "test"
)

func keyEntry(id, key string) config.APIKey {
	sum := sha256.Sum256([]byte(key))
	return config.APIKey{ID: id, SHA256: hex.EncodeToString(sum[:])}
}

// withKey sends key as x-api-key on every call that brings no credentials of
// its own.
func withKey(key string) grpc.DialOption {
	return grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		md, _ := metadata.FromOutgoingContext(ctx)
		if len(md.Get("x-api-key")) == 0 && len(md.Get("authorization")) == 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

// testEnv is sheba, assembled by internal/app as the command does, on real
// listeners over its own database, and clients for both transports.
type testEnv struct {
	baseURL  string
	grpcAddr string
	httpAddr string
	// operatorAddr is operator.addr's listener, "" when it is not set.
	operatorAddr string
	// pool is the test's own pool on the server's database, for setting
	// rows up and counting them.
	pool    *pgxpool.Pool
	conn    *grpc.ClientConn // sends testKey
	anon    *grpc.ClientConn // sends no key
	ping    shebav1.PingServiceClient
	account shebav1.AccountServiceClient
	sub     shebav1.SubscriptionServiceClient
	health  healthpb.HealthClient
	logs    *shebaproc.Buffer
	// server is the service under test, for what only it can tell (the
	// services on its gRPC server, its HTTP handler).
	server *app.App
	// stop cancels the context of Serve, as SIGTERM does in cmd/sheba, and
	// returns what Serve returned once it has. Later calls return the same.
	stop func() error
}

func newTestEnv(t testing.TB, mutate ...func(*config.Config)) *testEnv {
	t.Helper()
	return newTestEnvWith(t, nil, nil, mutate...)
}

// newTestEnvWith is newTestEnv with options of the assembly, and spans of
// the calls and their queries going to tp (if not nil).
func newTestEnvWith(t testing.TB, tp trace.TracerProvider, opts []app.Option, mutate ...func(*config.Config)) *testEnv {
	t.Helper()
	return startTestEnv(t, envSetup{tp: tp, opts: opts, mutate: mutate})
}

// envSetup says how startTestEnv builds a testEnv.
type envSetup struct {
	tp     trace.TracerProvider // nil: no tracing
	opts   []app.Option
	mutate []func(*config.Config)
	// poolURL, if set, rewrites the URL of the test database before the
	// server uses it (to send it through a proxy, say); the test's own
	// pool goes straight to the database.
	poolURL func(string) string
	// database, if set, is the URL of the database to serve (a cluster's,
	// say) instead of a fresh one of the test cluster; the test's own pool
	// connects to it too.
	database string
}

// withHandlerHook runs hook right before every handler, after the whole
// chain: an error it returns is the call's answer.
func withHandlerHook(hook func(ctx context.Context, method string) error) app.Option {
	return app.WithUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := hook(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	})
}

// startTestEnv starts a server over a fresh database as setup says. It is
// stopped, and Serve must have returned nil, when the test ends.
func startTestEnv(t testing.TB, setup envSetup) *testEnv {
	t.Helper()
	url := setup.database
	if url == "" {
		url = storetest.NewDatabase(t)
	}
	cfg := config.Default()
	cfg.Database.URL = url
	if setup.poolURL != nil {
		cfg.Database.URL = setup.poolURL(url)
	}
	// Many servers share the test cluster at once.
	cfg.Database.MaxConns = 8
	cfg.Shutdown.Timeout = 10 * time.Second
	cfg.Auth.Keys = []config.APIKey{keyEntry(testKeyID, testKey)}
	for _, m := range setup.mutate {
		m(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(pool.Close)

	logs := &shebaproc.Buffer{}
	// The handler serve builds, so that the request lines read here are
	// the ones it writes.
	log := slog.New(requestlog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts := []app.Option{app.WithHealthInterval(500 * time.Millisecond)}
	if setup.tp != nil {
		opts = append(opts, app.WithTracerProvider(setup.tp))
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := app.New(ctx, cfg, log, append(opts, setup.opts...)...)
	if err != nil {
		cancel()
		t.Fatalf("app.New: %v", err)
	}
	lis := app.Listeners{GRPC: listen(t), HTTP: listen(t)}
	if cfg.Operator.Addr != "" {
		lis.Operator = listen(t)
	}
	grpcLis, httpLis := lis.GRPC, lis.HTTP
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	stop := sync.OnceValue(func() error {
		cancel()
		return <-done
	})

	conn, err := grpc.NewClient(grpcLis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), withKey(testKey))
	if err != nil {
		t.Fatalf("grpc client: %v", err)
	}
	anon, err := grpc.NewClient(grpcLis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc client: %v", err)
	}
	t.Cleanup(func() {
		conn.Close()
		anon.Close()
		if err := stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	var operatorAddr string
	if lis.Operator != nil {
		operatorAddr = lis.Operator.Addr().String()
	}
	return &testEnv{
		operatorAddr: operatorAddr,
		baseURL:      "http://" + httpLis.Addr().String(),
		grpcAddr:     grpcLis.Addr().String(),
		httpAddr:     httpLis.Addr().String(),
		pool:         pool,
		conn:         conn,
		anon:         anon,
		ping:         shebav1.NewPingServiceClient(conn),
		account:      shebav1.NewAccountServiceClient(conn),
		sub:          shebav1.NewSubscriptionServiceClient(conn),
		health:       healthpb.NewHealthClient(conn),
		logs:         logs,
		server:       srv,
		stop:         stop,
	}
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return lis
}

// count runs a SELECT count(*) query against the server's database.
func (e *testEnv) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(t.Context(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// restResponse is what a REST client sees.
type restResponse = resttest.Response

// do sends a REST request with a JSON body (none if body is "") and testKey
// in x-api-key. header holds name, value pairs that are set on top; an empty
// value removes the header.
func (e *testEnv) do(t *testing.T, method, path, body string, header ...string) restResponse {
	t.Helper()
	return resttest.Client{BaseURL: e.baseURL, Header: http.Header{"X-Api-Key": {testKey}}}.Do(t, method, path, body, header...)
}

// wantCode checks an HTTP status code.
func wantCode(t *testing.T, r restResponse, want int) {
	t.Helper()
	resttest.WantCode(t, r, want)
}

// wantRESTError checks an error answer: HTTP code, Status code and, if
// field is not empty, a BadRequest violation of that field.
func wantRESTError(t *testing.T, r restResponse, httpCode int, code codes.Code, field string) *spb.Status {
	t.Helper()
	return resttest.WantError(t, r, httpCode, code, field)
}

// wantGRPCError checks a gRPC error's code and, if field is not empty, its
// BadRequest violation of that field.
func wantGRPCError(t *testing.T, err error, code codes.Code, field string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code {
		t.Fatalf("got %v (%v), want code %v", st.Code(), err, code)
	}
	if field != "" && !hasViolation(st, field) {
		t.Fatalf("no field violation for %q in %v", field, st.Details())
	}
}

func hasViolation(st *status.Status, field string) bool { return resttest.HasViolation(st, field) }
