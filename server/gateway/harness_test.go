package gateway_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	pv "buf.build/go/protovalidate"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/jackc/pgx/v5/pgxpool"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/e2e/resttest"
	"github.com/shebasvc/sheba/e2e/shebaproc"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/apikey"
	"github.com/shebasvc/sheba/interceptors/protovalidate"
	"github.com/shebasvc/sheba/server"
	"github.com/shebasvc/sheba/server/gateway"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

// The gateway's rules are tested here over HTTP, against the gateway as
// internal/app builds it, but small: the real services on a database of the
// test's own, on a Channel whose chain is the API-key check alone, behind
// gateway.New and gateway.Handler, served on 127.0.0.1. The key check is
// the one link a rule of the gateway meets (the key before the body); by
// default every method is public, so the other rules are tested without a
// key, and withKey makes every method but Ping need testKey. No other link
// is needed: the services' errors carry their ErrorInfo already. What needs
// the rest of the chain or both transports is tested in e2e.

func TestMain(m *testing.M) {
	os.Exit(storetest.Run(m))
}

// unknownID is an account id no test creates.
const unknownID = "00000000-0000-4000-8000-000000000000"

// testKey is the key withKey makes every method but Ping need.
const testKey = "gateway-test-key-0123456789abcdef"

// withKey makes every method but the public ones need testKey, in the
// gateway's check and in the chain's; without public methods named, those
// of the default config (Ping alone) are public.
func withKey(t testing.TB, public ...string) func(*gateway.Options) {
	sum := sha256.Sum256([]byte(testKey))
	key, err := apikey.ParseKey("test", hex.EncodeToString(sum[:]))
	if err != nil {
		t.Fatal(err)
	}
	if len(public) == 0 {
		public = config.Default().Auth.Public
	}
	authn := apikey.New([]apikey.Key{key}, public)
	return func(o *gateway.Options) { o.Authenticator = authn }
}

// testGateway is a gateway being served, and what its test looks at.
type testGateway struct {
	url    string
	client *http.Client
	// handler is what the server serves, for calls without the network.
	handler http.Handler
	// pool is the services' database, for setting rows up and counting
	// them.
	pool *pgxpool.Pool
	// account and sub call the services over the gateway's Channel, as
	// the gateway does.
	account shebav1.AccountServiceClient
	sub     shebav1.SubscriptionServiceClient
	// logs is what the services logged.
	logs *shebaproc.Buffer
}

// newTestGateway serves the gateway of the services over a fresh database,
// with the options of the assembly's default config changed by adjust. It
// stops when the test ends.
func newTestGateway(t testing.TB, adjust ...func(*gateway.Options)) *testGateway {
	t.Helper()
	pool := storetest.NewPool(t)
	logs := &shebaproc.Buffer{}
	services, err := server.New(store.New(pool), server.Options{Log: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	cfg := config.Default()
	opts := gateway.Options{
		MaxBodyBytes:        cfg.HTTP.MaxBodyBytes,
		MaxConcurrentBodies: cfg.HTTP.MaxConcurrentBodies,
		CompressMinBytes:    cfg.Compression.MinBytes,
		Authenticator:       apikey.New(nil, server.Methods()),
	}
	for _, a := range adjust {
		a(&opts)
	}
	authn, ok := opts.Authenticator.(*apikey.Authenticator)
	if !ok {
		t.Fatalf("Authenticator %T: the test chain needs an *apikey.Authenticator", opts.Authenticator)
	}
	// Of the chain, auth and the validation of the requests' constraints.
	validator, err := pv.New()
	if err != nil {
		t.Fatal(err)
	}
	authenticate, validate := auth.UnaryServerInterceptor(authn.Authenticate), protovalidate.UnaryServerInterceptor(validator)
	channel := gateway.NewChannel(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return authenticate(ctx, req, info, func(ctx context.Context, req any) (any, error) {
			return validate(ctx, req, info, handler)
		})
	})
	services.Register(channel)
	rest, err := gateway.New(t.Context(), channel, opts)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	// The operator handlers are the gateway's to route, not to make:
	// readiness and metrics have tests of their own (server/health, e2e).
	handler := gateway.Handler(rest, gateway.Operator{
		Ready:   textHandler("application/json", `{"status":"ok"}`+"\n"),
		Metrics: textHandler("text/plain", "# metrics\n"),
	})
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return &testGateway{
		url:     srv.URL,
		client:  srv.Client(),
		handler: handler,
		pool:    pool,
		account: shebav1.NewAccountServiceClient(channel),
		sub:     shebav1.NewSubscriptionServiceClient(channel),
		logs:    logs,
	}
}

// textHandler answers every request with body, of type contentType.
func textHandler(contentType, body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		_, _ = io.WriteString(w, body)
	})
}

// count runs a SELECT count(*) query on the services' database.
func (g *testGateway) count(t *testing.T, query string) int {
	t.Helper()
	var n int
	if err := g.pool.QueryRow(t.Context(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// response is an answer as the client got it.
type response = resttest.Response

// do sends a request with body (none if "") of type application/json, and
// header, name and value pairs set on top; an empty value leaves the header
// out.
func (g *testGateway) do(t testing.TB, method, path, body string, header ...string) response {
	t.Helper()
	return g.rest().Do(t, method, path, body, header...)
}

// send sends req and reads the whole answer.
func (g *testGateway) send(t testing.TB, req *http.Request) response {
	t.Helper()
	return g.rest().Send(t, req)
}

func (g *testGateway) rest() resttest.Client {
	return resttest.Client{BaseURL: g.url, HTTP: g.client}
}

// wantCode checks the HTTP status code.
func wantCode(t *testing.T, r response, want int) {
	t.Helper()
	resttest.WantCode(t, r, want)
}

// jsonValue decodes a JSON document of any shape.
func jsonValue(t *testing.T, b []byte) any {
	t.Helper()
	return resttest.JSONValue(t, b)
}

// wantError checks an error answer, its HTTP code and the code of its
// google.rpc.Status, which it returns.
func wantError(t *testing.T, r response, httpCode int, code codes.Code) *spb.Status {
	t.Helper()
	return resttest.WantError(t, r, httpCode, code, "")
}
