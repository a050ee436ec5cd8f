package idempotency_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/idempotency"
	"github.com/shebasvc/sheba/interceptors/interceptortest"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

func TestMain(m *testing.M) {
	os.Exit(storetest.Run(m))
}

func TestParseKey(t *testing.T) {
	for _, test := range []struct {
		in, want string
		ok       bool
	}{
		{in: "abc", want: "abc", ok: true},
		{in: `"abc"`, want: "abc", ok: true},
		{in: `  "abc"	`, want: "abc", ok: true},
		{in: `"a\"b\\c"`, want: `a"b\c`, ok: true},
		{in: "8e0c1c52-0b9b-4d4b-a5c5-2f0e3a3b1c9d", want: "8e0c1c52-0b9b-4d4b-a5c5-2f0e3a3b1c9d", ok: true},
		{in: "!~{}", want: "!~{}", ok: true},
		{in: strings.Repeat("x", 255), want: strings.Repeat("x", 255), ok: true},
		{in: `"` + strings.Repeat("x", 255) + `"`, want: strings.Repeat("x", 255), ok: true},
		{in: ""},
		{in: `""`},
		{in: strings.Repeat("x", 256)},
		{in: "a b"},
		{in: `"a b"`},
		{in: `"abc`},
		{in: `"abc"x`},
		{in: `"abc";p=1`},
		{in: `"a\x"`},
		{in: "caf\u00e9"},
		{in: "a\x00b"},
	} {
		got, err := idempotency.ParseKey(test.in)
		if test.ok && (err != nil || got != test.want) {
			t.Errorf("ParseKey(%q): got %q, %v; want %q", test.in, got, err, test.want)
		}
		if !test.ok && err == nil {
			t.Errorf("ParseKey(%q): got %q, want an error", test.in, got)
		}
	}
}

// env is the interceptor over a real database, with a handler that creates
// an account the way the service does, through the store.
type env struct {
	pool        *pgxpool.Pool
	store       *store.Store
	interceptor grpc.UnaryServerInterceptor
	runs        atomic.Int64 // calls of the handler
}

const method = "/sheba.v1.AccountService/CreateAccount"

var info = &grpc.UnaryServerInfo{FullMethod: method}

func newEnv(t *testing.T, opts ...idempotency.Option) *env {
	t.Helper()
	pool := storetest.NewPool(t)
	s := store.New(pool)
	caller := func(ctx context.Context) string {
		v := metadata.ValueFromIncomingContext(ctx, "caller")
		if len(v) == 0 {
			return ""
		}
		return v[0]
	}
	return &env{pool: pool, store: s, interceptor: idempotency.UnaryServerInterceptor(s, caller, opts...)}
}

// handler creates the account of the request; a taken username is
// AlreadyExists, a username of "bad" InvalidArgument, as the service says.
func (e *env) handler(ctx context.Context, req any) (any, error) {
	e.runs.Add(1)
	r := req.(*shebav1.CreateAccountRequest)
	if r.GetUsername() == "bad" {
		return nil, status.Error(codes.InvalidArgument, "invalid username")
	}
	a, err := e.store.CreateAccount(ctx, r.GetUsername(), "hash")
	if errors.Is(err, store.ErrConflict) {
		return nil, status.Error(codes.AlreadyExists, "username already taken")
	}
	if err != nil {
		return nil, err
	}
	return &shebav1.CreateAccountResponse{Account: &shebav1.Account{Id: a.ID, Username: a.Username}}, nil
}

// call calls the interceptor as caller with key (none if "").
func (e *env) call(t *testing.T, caller, key string, req *shebav1.CreateAccountRequest) (*shebav1.CreateAccountResponse, error) {
	t.Helper()
	md := metadata.Pairs("caller", caller)
	if key != "" {
		md.Append(idempotency.MetadataKey, key)
	}
	ctx := metadata.NewIncomingContext(t.Context(), md)
	resp, err := e.interceptor(ctx, req, info, e.handler)
	if err != nil {
		return nil, err
	}
	return resp.(*shebav1.CreateAccountResponse), nil
}

func (e *env) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func reason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			return i.GetReason()
		}
	}
	return ""
}

func TestInterceptorDirect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	req := &shebav1.CreateAccountRequest{Username: "ada", Password: "secret-1"}

	first, err := e.call(t, "c1", "k", req)
	if err != nil {
		t.Fatalf("first call: %v", err)
	}
	again, err := e.call(t, "c1", "k", req)
	if err != nil || !proto.Equal(first, again) {
		t.Fatalf("retry: got %v, %v; want %v", again, err, first)
	}
	if got := e.runs.Load(); got != 1 {
		t.Errorf("handler runs after a call and its retry: got %d, want 1", got)
	}

	// Only the password differs: it is not part of the fingerprint.
	if _, err := e.call(t, "c1", "k", &shebav1.CreateAccountRequest{Username: "ada", Password: "other-pw"}); err != nil {
		t.Errorf("retry with another password: got %v, want the replay", err)
	}
	_, err = e.call(t, "c1", "k", &shebav1.CreateAccountRequest{Username: "bea", Password: "secret-1"})
	if status.Code(err) != codes.InvalidArgument || reason(err) != idempotency.ReasonReused {
		t.Errorf("another request: got %v, want InvalidArgument %s", err, idempotency.ReasonReused)
	}

	// Another caller's key is another key; no key runs the handler as is.
	if _, err := e.call(t, "c2", "k", &shebav1.CreateAccountRequest{Username: "bea"}); err != nil {
		t.Errorf("same key, other caller: %v", err)
	}
	if _, err := e.call(t, "c2", "", &shebav1.CreateAccountRequest{Username: "cy"}); err != nil {
		t.Errorf("no key: %v", err)
	}
	if _, err := e.call(t, "", "k2", &shebav1.CreateAccountRequest{Username: "dee"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a key without a caller: got %v, want InvalidArgument", err)
	}
	if got, want := e.count(t, "accounts"), 3; got != want {
		t.Errorf("accounts: got %d, want %d", got, want)
	}
	if got, want := e.count(t, "idempotency_keys"), 2; got != want {
		t.Errorf("records: got %d, want %d", got, want)
	}
}

func TestInterceptorErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.call(t, "c", "", &shebav1.CreateAccountRequest{Username: "taken"}); err != nil {
		t.Fatal(err)
	}
	// AlreadyExists is recorded: the retry replays it without running.
	req := &shebav1.CreateAccountRequest{Username: "taken"}
	_, err1 := e.call(t, "c", "dup", req)
	runs := e.runs.Load()
	_, err2 := e.call(t, "c", "dup", req)
	if status.Code(err1) != codes.AlreadyExists || !proto.Equal(status.Convert(err1).Proto(), status.Convert(err2).Proto()) {
		t.Errorf("recorded error: got %v then %v, want AlreadyExists twice", err1, err2)
	}
	if e.runs.Load() != runs {
		t.Error("the retry of a recorded error ran the handler")
	}

	// InvalidArgument is not: the same key then serves the corrected request.
	if _, err := e.call(t, "c", "fix", &shebav1.CreateAccountRequest{Username: "bad"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("invalid request: got %v", err)
	}
	if _, err := e.call(t, "c", "fix", &shebav1.CreateAccountRequest{Username: "good"}); err != nil {
		t.Errorf("corrected request with the same key: got %v, want it to run", err)
	}
	if got, want := e.count(t, "idempotency_keys"), 2; got != want {
		t.Errorf("records: got %d, want %d (dup and fix)", got, want)
	}
}

// TestCrashBeforeCommit breaks the transaction after the change and its
// record are written: neither must remain, and the retry runs anew.
func TestCrashBeforeCommit(t *testing.T) {
	t.Parallel()
	var crash atomic.Bool
	crash.Store(true)
	e := newEnv(t, idempotency.WithBeforeCommit(func(ctx context.Context) error {
		if crash.Load() {
			// Both are written, in the transaction, at this point.
			var n int
			tx, _ := store.TxFromContext(ctx)
			if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM accounts) + (SELECT count(*) FROM idempotency_keys)`).Scan(&n); err != nil || n != 2 {
				t.Errorf("inside the transaction: got %d rows, %v; want the account and the record", n, err)
			}
			return errors.New("crash")
		}
		return nil
	}))
	req := &shebav1.CreateAccountRequest{Username: "ada"}
	if _, err := e.call(t, "c", "k", req); status.Code(err) != codes.Internal {
		t.Fatalf("crashed call: got %v, want Internal", err)
	}
	if a, k := e.count(t, "accounts"), e.count(t, "idempotency_keys"); a != 0 || k != 0 {
		t.Fatalf("after the crash: %d accounts, %d records; want none", a, k)
	}
	crash.Store(false)
	if _, err := e.call(t, "c", "k", req); err != nil {
		t.Fatalf("retry after the crash: %v", err)
	}
	if got := e.runs.Load(); got != 2 {
		t.Errorf("handler runs: got %d, want 2", got)
	}
}

// TestInUse holds a key in a running call and checks that another call
// with it is told so at once.
func TestInUse(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs("caller", "c", idempotency.MetadataKey, "k"))
	req := &shebav1.CreateAccountRequest{Username: "ada"}
	go func() {
		_, err := e.interceptor(ctx, req, info, func(ctx context.Context, req any) (any, error) {
			close(entered)
			<-release
			return e.handler(ctx, req)
		})
		done <- err
	}()
	<-entered
	start := time.Now()
	_, err := e.interceptor(ctx, req, info, e.handler)
	if status.Code(err) != codes.Aborted || reason(err) != idempotency.ReasonInUse {
		t.Errorf("call while the key is in use: got %v, want Aborted %s", err, idempotency.ReasonInUse)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("in-use answer took %v: it must not wait for the running call", d)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("running call: %v", err)
	}
	if _, err := e.interceptor(ctx, req, info, e.handler); err != nil {
		t.Errorf("call after the first finished: got %v, want its replay", err)
	}
}

// TestServer runs the interceptor in a real grpc.Server: the replay carries
// idempotent-replayed metadata, the in-use error retry-after.
func TestServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.store
	interceptor := idempotency.UnaryServerInterceptor(s, func(context.Context) string { return "c" })
	var pings atomic.Int64
	client := interceptortest.Serve(t, interceptor, func(ctx context.Context) (*shebav1.PingResponse, error) {
		pings.Add(1)
		return &shebav1.PingResponse{Message: "pong"}, nil
	})
	ctx := metadata.AppendToOutgoingContext(t.Context(), idempotency.MetadataKey, `"p"`)
	var h1, h2 metadata.MD
	if _, err := client.Ping(ctx, &shebav1.PingRequest{}, grpc.Header(&h1)); err != nil {
		t.Fatal(err)
	}
	resp, err := client.Ping(ctx, &shebav1.PingRequest{}, grpc.Header(&h2))
	if err != nil || resp.GetMessage() != "pong" {
		t.Fatalf("replayed ping: got %v, %v", resp, err)
	}
	if got := h1.Get(idempotency.ReplayedKey); len(got) != 0 {
		t.Errorf("first call: %s %q, want none", idempotency.ReplayedKey, got)
	}
	if got := h2.Get(idempotency.ReplayedKey); len(got) != 1 || got[0] != "true" {
		t.Errorf("replay: %s %q, want true", idempotency.ReplayedKey, got)
	}
	if pings.Load() != 1 {
		t.Errorf("handler runs: got %d, want 1", pings.Load())
	}
	_, err = client.Ping(metadata.AppendToOutgoingContext(t.Context(), idempotency.MetadataKey, ""), &shebav1.PingRequest{})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("empty key: got %v, want InvalidArgument", err)
	}
}

// TestReap checks that Reap deletes expired records in batches until none
// are left, and stops with its context.
func TestReap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := idempotency.ReapBatch + 10
	if _, err := e.pool.Exec(t.Context(), `
		INSERT INTO idempotency_keys (caller, method, key, fingerprint, code, response, expire_time)
		SELECT 'c', '/m', g::text, '\x00', 0, '\x00', now() - interval '1 second' * g
		FROM generate_series(1, $1) AS g`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.RecordIdempotencyKey(t.Context(), store.IdempotencyKey{Caller: "c", Method: "/m", Key: "live"},
		store.IdempotencyRecord{Fingerprint: []byte{0}, Response: []byte{0}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		idempotency.Reap(ctx, e.store, time.Hour, slog.New(slog.DiscardHandler))
	}()
	deadline := time.Now().Add(10 * time.Second)
	for e.count(t, "idempotency_keys") != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if got := e.count(t, "idempotency_keys"); got != 1 {
		t.Errorf("records after the first reap: got %d, want the live one", got)
	}
}
