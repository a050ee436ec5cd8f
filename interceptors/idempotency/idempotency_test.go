package idempotency_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pv "buf.build/go/protovalidate"
	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/idempotency"
	"github.com/shebasvc/sheba/interceptors/interceptortest"
	"github.com/shebasvc/sheba/interceptors/protovalidate"
	"github.com/shebasvc/sheba/server"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

func TestMain(m *testing.M) {
	os.Exit(storetest.Run(m))
}

// keyTests are values of the key metadata: the key each names, or an error.
var keyTests = []struct {
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
	{in: " "},
	{in: `""`},
	{in: strings.Repeat("x", 256)},
	{in: `"` + strings.Repeat("x", 256) + `"`},
	{in: "a b"},
	{in: `"a b"`},
	{in: `"abc`},
	{in: `"abc"x`},
	{in: `"abc";p=1`},
	{in: `"a\x"`},
	{in: "caf\u00e9"},
	{in: "a\x00b"},
}

func TestParseKey(t *testing.T) {
	for _, test := range keyTests {
		got, err := idempotency.ParseKey(test.in)
		if test.ok && (err != nil || got != test.want) {
			t.Errorf("ParseKey(%q): got %q, %v; want %q", test.in, got, err, test.want)
		}
		if !test.ok && err == nil {
			t.Errorf("ParseKey(%q): got %q, want an error", test.in, got)
		}
	}
}

// env is the interceptor over a real database, called directly with a
// handler that creates an account the way the service does, through the
// store, or serving the real services (serve). The caller is the "caller"
// metadata.
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
// AlreadyExists, as the service says.
func (e *env) handler(ctx context.Context, req any) (any, error) {
	e.runs.Add(1)
	r := req.(*shebav1.CreateAccountRequest)
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
	var keys []string
	if key != "" {
		keys = []string{key}
	}
	return e.callKeys(t, caller, keys, req)
}

// callKeys calls the interceptor as caller with each of keys as a value of
// the key metadata.
func (e *env) callKeys(t *testing.T, caller string, keys []string, req *shebav1.CreateAccountRequest) (*shebav1.CreateAccountResponse, error) {
	t.Helper()
	md := metadata.Pairs("caller", caller)
	md.Append(idempotency.MetadataKey, keys...)
	ctx := metadata.NewIncomingContext(t.Context(), md)
	resp, err := e.interceptor(ctx, req, info, e.handler)
	if err != nil {
		return nil, err
	}
	return resp.(*shebav1.CreateAccountResponse), nil
}

// serve serves the real services (package server) on 127.0.0.1 behind e's
// interceptor, the rest of the chain left out (internal/app has it), and
// returns a client of the SubscriptionService. The interceptors inner run
// after e's, in its transaction, right before the handler; e.runs counts
// the handler's runs.
func (e *env) serve(t *testing.T, inner ...grpc.UnaryServerInterceptor) shebav1.SubscriptionServiceClient {
	t.Helper()
	services, err := server.New(e.store, server.Options{})
	if err != nil {
		t.Fatalf("services: %v", err)
	}
	counted := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		e.runs.Add(1)
		return handler(ctx, req)
	}
	chain := grpc.ChainUnaryInterceptor(append([]grpc.UnaryServerInterceptor{e.interceptor, counted}, inner...)...)
	return shebav1.NewSubscriptionServiceClient(interceptortest.ServeServices(t, []grpc.ServerOption{chain}, services.Register))
}

// as returns ctx sending caller as the caller of serve's interceptor, and
// key as the idempotency key unless it is "".
func as(ctx context.Context, caller, key string) context.Context {
	ctx = metadata.AppendToOutgoingContext(ctx, "caller", caller)
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, idempotency.MetadataKey, key)
	}
	return ctx
}

// account inserts an account and returns its id.
func (e *env) account(t *testing.T, username string) string {
	t.Helper()
	a, err := e.store.CreateAccount(t.Context(), username, "no-login")
	if err != nil {
		t.Fatalf("create account %s: %v", username, err)
	}
	return a.ID
}

// replayed reports whether the response metadata h marks a replay.
func replayed(h metadata.MD) bool {
	v := h.Get(idempotency.ReplayedKey)
	return len(v) == 1 && v[0] == "true"
}

// count returns the number of rows of from, a table and perhaps a WHERE
// clause with args.
func (e *env) count(t *testing.T, from string, args ...any) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+from, args...).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", from, err)
	}
	return n
}

// violations returns the fields of the BadRequest of err.
func violations(err error) []string {
	var fields []string
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				fields = append(fields, v.GetField())
			}
		}
	}
	return fields
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

	// Every field counts, the password too (through its HMAC).
	for _, other := range []*shebav1.CreateAccountRequest{
		{Username: "ada", Password: "other-pw"},
		{Username: "ada"},
		{Username: "bea", Password: "secret-1"},
	} {
		_, err = e.call(t, "c1", "k", other)
		if status.Code(err) != codes.InvalidArgument || reason(err) != idempotency.ReasonReused {
			t.Errorf("another request (%v): got %v, want InvalidArgument %s", other, err, idempotency.ReasonReused)
		}
	}
	if _, err := e.call(t, "c1", "k", req); err != nil {
		t.Errorf("retry with the same password after the refused ones: got %v, want the replay", err)
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

// TestFingerprintKey checks that the password enters the fingerprint
// through an HMAC under the key of WithFingerprintKey: replicas with the
// same key replay each other's records, one with another key refuses the
// same request as reused, and the record holds no unkeyed SHA-256 of the
// request, with or without its password.
func TestFingerprintKey(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	s := store.New(pool)
	caller := func(context.Context) string { return "c" }
	replica := func(key string) grpc.UnaryServerInterceptor {
		return idempotency.UnaryServerInterceptor(s, caller, idempotency.WithFingerprintKey([]byte(key)))
	}
	var runs atomic.Int64
	handler := func(context.Context, any) (any, error) {
		runs.Add(1)
		return &shebav1.CreateAccountResponse{Account: &shebav1.Account{Id: "1", Username: "ada"}}, nil
	}
	req := &shebav1.CreateAccountRequest{Username: "ada", Password: "secret-1"}
	ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs(idempotency.MetadataKey, "k"))
	for _, step := range []struct {
		name        string
		interceptor grpc.UnaryServerInterceptor
		reused      bool
	}{
		{"first replica", replica("key one"), false},
		{"second replica, same key", replica("key one"), false},
		{"replica with another key", replica("key two"), true},
	} {
		_, err := step.interceptor(ctx, req, info, handler)
		reused := status.Code(err) == codes.InvalidArgument && reason(err) == idempotency.ReasonReused
		if step.reused && !reused || !step.reused && err != nil {
			t.Errorf("%s: got %v, want reused %v", step.name, err, step.reused)
		}
	}
	if got := runs.Load(); got != 1 {
		t.Errorf("handler runs: got %d, want 1", got)
	}

	var stored []byte
	if err := pool.QueryRow(t.Context(), `SELECT fingerprint FROM idempotency_keys`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*shebav1.CreateAccountRequest{req, {Username: "ada"}} {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(b); bytes.Equal(stored, sum[:]) {
			t.Errorf("the record holds the SHA-256 of %v", m)
		}
	}
}

// TestFingerprintMetadata checks that the metadata named by
// WithFingerprintMetadata is part of the request: a retry with the same
// values replays, one with other values or none is a reused key; and that
// a call without it has the fingerprint of its message alone, which an
// interceptor without the option replays.
func TestFingerprintMetadata(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	s := store.New(pool)
	caller := func(context.Context) string { return "c" }
	const ifMatch = "if-match"
	with := idempotency.UnaryServerInterceptor(s, caller, idempotency.WithFingerprintKey([]byte("k")), idempotency.WithFingerprintMetadata(ifMatch))
	without := idempotency.UnaryServerInterceptor(s, caller, idempotency.WithFingerprintKey([]byte("k")))
	var runs atomic.Int64
	handler := func(context.Context, any) (any, error) {
		runs.Add(1)
		return &shebav1.CreateAccountResponse{Account: &shebav1.Account{Id: "1", Username: "ada"}}, nil
	}
	req := &shebav1.CreateAccountRequest{Username: "ada", Password: "secret-1"}
	call := func(interceptor grpc.UnaryServerInterceptor, key string, values ...string) error {
		md := metadata.Pairs(idempotency.MetadataKey, key)
		md.Append(ifMatch, values...)
		_, err := interceptor(metadata.NewIncomingContext(t.Context(), md), req, info, handler)
		return err
	}
	reused := func(err error) bool {
		return status.Code(err) == codes.InvalidArgument && reason(err) == idempotency.ReasonReused
	}
	if err := call(with, "k1", `"a"`); err != nil {
		t.Fatalf("first call: %v", err)
	}
	if err := call(with, "k1", `"a"`); err != nil {
		t.Errorf("retry with the same values: got %v, want the replay", err)
	}
	for _, values := range [][]string{{`"b"`}, {`"a"`, `"b"`}, {`"a", "b"`}, nil} {
		if err := call(with, "k1", values...); !reused(err) {
			t.Errorf("retry with %q: got %v, want %s", values, err, idempotency.ReasonReused)
		}
	}
	// The interceptor without the option reads the message alone.
	if err := call(without, "k1", `"a"`); !reused(err) {
		t.Errorf("retry through an interceptor without the option: got %v, want %s", err, idempotency.ReasonReused)
	}

	if err := call(with, "k2"); err != nil {
		t.Fatalf("call without the metadata: %v", err)
	}
	if err := call(without, "k2"); err != nil {
		t.Errorf("its retry through an interceptor without the option: got %v, want the replay", err)
	}
	if got := runs.Load(); got != 2 {
		t.Errorf("handler runs: got %d, want 2", got)
	}
}

// TestKeys sends each value of keyTests as the key, and a key given twice:
// a malformed key is refused before anything runs, a well-formed one is
// recorded under the key it names, so the quoted and the bare form are the
// same key.
func TestKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	type keyCase struct {
		name   string
		values []string // of the key metadata
		want   string
		ok     bool
	}
	cases := []keyCase{{name: "given twice", values: []string{"a", "b"}}}
	for _, test := range keyTests {
		// An empty value too is a key, a malformed one, and not no key.
		cases = append(cases, keyCase{fmt.Sprintf("%.20q", test.in), []string{test.in}, test.want, test.ok})
	}
	for i, test := range cases {
		t.Run(test.name, func(t *testing.T) {
			// A caller of its own: the keys of two cases may be the same.
			caller := fmt.Sprint("c", i)
			runs := e.runs.Load()
			_, err := e.callKeys(t, caller, test.values, &shebav1.CreateAccountRequest{Username: fmt.Sprint("user", i)})
			if !test.ok {
				if status.Code(err) != codes.InvalidArgument || !slices.Equal(violations(err), []string{idempotency.MetadataKey}) {
					t.Errorf("got %v with violations of %q, want InvalidArgument of %q", err, violations(err), idempotency.MetadataKey)
				}
				if e.runs.Load() != runs {
					t.Error("the handler ran")
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v, want the call to run", err)
			}
			if n := e.count(t, "idempotency_keys WHERE caller = $1 AND key = $2", caller, test.want); n != 1 {
				t.Errorf("records of key %q: got %d, want 1", test.want, n)
			}
		})
	}
}

// TestReplay serves the real services: a create and a cancel retried with
// their keys answer the first outcome again, marked, without running.
func TestReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	client := e.serve(t)
	id := e.account(t, "ida")
	req := &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"}

	// The quoted form of the draft and the bare token are the same key.
	var h1, h2 metadata.MD
	first, err := client.CreateSubscription(as(t.Context(), "c", `"sub-1"`), req, grpc.Header(&h1))
	if err != nil {
		t.Fatalf("first create: %v", err)
	}
	if replayed(h1) {
		t.Errorf("first create: got %s %q, want none", idempotency.ReplayedKey, h1.Get(idempotency.ReplayedKey))
	}
	again, err := client.CreateSubscription(as(t.Context(), "c", "sub-1"), req, grpc.Header(&h2))
	if err != nil {
		t.Fatalf("retried create: %v", err)
	}
	if !replayed(h2) {
		t.Errorf("retried create: got %s %q, want true", idempotency.ReplayedKey, h2.Get(idempotency.ReplayedKey))
	}
	if diff := cmp.Diff(first, again, protocmp.Transform()); diff != "" {
		t.Errorf("replayed create (-want +got):\n%s", diff)
	}
	if got := e.runs.Load(); got != 1 {
		t.Errorf("handler runs after a create and its retry: got %d, want 1", got)
	}

	// Another request with the key is refused, and not taken for a replay.
	var h3 metadata.MD
	_, err = client.CreateSubscription(as(t.Context(), "c", "sub-1"), &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "basic"}, grpc.Header(&h3))
	if status.Code(err) != codes.InvalidArgument || reason(err) != idempotency.ReasonReused {
		t.Errorf("another request with the key: got %v, want InvalidArgument %s", err, idempotency.ReasonReused)
	}
	if replayed(h3) {
		t.Errorf("reused key: got %s %q, want none", idempotency.ReplayedKey, h3.Get(idempotency.ReplayedKey))
	}
	if n := e.count(t, "subscriptions WHERE account_id = $1", id); n != 1 {
		t.Errorf("subscriptions: got %d, want 1", n)
	}

	// A cancel retried with its key answers the canceled subscription again,
	// where a plain second cancel is NotFound.
	cancelReq := &shebav1.CancelSubscriptionRequest{AccountId: id}
	canceled, err := client.CancelSubscription(as(t.Context(), "c", "cancel-1"), cancelReq)
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	var h4 metadata.MD
	canceledAgain, err := client.CancelSubscription(as(t.Context(), "c", "cancel-1"), cancelReq, grpc.Header(&h4))
	if err != nil || !replayed(h4) {
		t.Fatalf("retried cancel: got %v, replayed %v; want a replay", err, replayed(h4))
	}
	if diff := cmp.Diff(canceled, canceledAgain, protocmp.Transform()); diff != "" {
		t.Errorf("replayed cancel (-want +got):\n%s", diff)
	}
	if _, err := client.CancelSubscription(as(t.Context(), "c", ""), cancelReq); status.Code(err) != codes.NotFound {
		t.Errorf("plain second cancel: got %v, want NotFound", err)
	}
	// The plain call left no record.
	if n := e.count(t, "idempotency_keys"); n != 2 {
		t.Errorf("records: got %d, want 2", n)
	}
}

// TestScope checks that a key belongs to its caller and its method: the
// same key elsewhere is another key.
func TestScope(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	client := e.serve(t)
	a := e.account(t, "amy")
	b := e.account(t, "bob")
	var answers []proto.Message
	for _, step := range []struct {
		name, caller, account string
		plan                  string // of the create; "" cancels
		replayed              bool
	}{
		{"first caller", "a", a, "pro", false},
		// Another request than the first caller's: not a reused key.
		{"other caller", "b", b, "basic", false},
		{"other caller's retry", "b", b, "basic", true},
		{"first caller, other method", "a", a, "", false},
	} {
		ctx := as(t.Context(), step.caller, "shared")
		var (
			h    metadata.MD
			resp proto.Message
			err  error
		)
		if step.plan != "" {
			resp, err = client.CreateSubscription(ctx, &shebav1.CreateSubscriptionRequest{AccountId: step.account, Plan: step.plan}, grpc.Header(&h))
		} else {
			resp, err = client.CancelSubscription(ctx, &shebav1.CancelSubscriptionRequest{AccountId: step.account}, grpc.Header(&h))
		}
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if replayed(h) != step.replayed {
			t.Errorf("%s: got replayed %v, want %v", step.name, replayed(h), step.replayed)
		}
		answers = append(answers, resp)
	}
	// The other caller's retry replays its own answer.
	if diff := cmp.Diff(answers[1], answers[2], protocmp.Transform()); diff != "" {
		t.Errorf("other caller's replay (-want +got):\n%s", diff)
	}
	if got, want := e.runs.Load(), int64(3); got != want {
		t.Errorf("handler runs: got %d, want %d", got, want)
	}
	if n := e.count(t, "subscriptions"); n != 2 {
		t.Errorf("subscriptions: got %d, want 2", n)
	}
}

// TestErrorOutcomes checks which errors of the real handlers are recorded:
// an answer about the data is, and replayed even once the data changed; a
// validation error is not, so the corrected request runs with the key. In
// the chain the validation link runs before this one; here it runs after,
// as the InvalidArgument of a rule that only a handler checks (a page
// token) would.
func TestErrorOutcomes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	validator, err := pv.New()
	if err != nil {
		t.Fatal(err)
	}
	client := e.serve(t, protovalidate.UnaryServerInterceptor(validator))
	id := e.account(t, "hal")
	if _, err := client.CreateSubscription(as(t.Context(), "c", ""), &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"}); err != nil {
		t.Fatal(err)
	}

	req := &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "max"}
	var h1, h2 metadata.MD
	_, err1 := client.CreateSubscription(as(t.Context(), "c", "conflict"), req, grpc.Header(&h1))
	if status.Code(err1) != codes.AlreadyExists || replayed(h1) {
		t.Fatalf("create while one is active: got %v, replayed %v; want AlreadyExists, not replayed", err1, replayed(h1))
	}
	if _, err := client.CancelSubscription(as(t.Context(), "c", ""), &shebav1.CancelSubscriptionRequest{AccountId: id}); err != nil {
		t.Fatal(err)
	}
	// The retry would now succeed if it ran: it replays the error, details
	// and all.
	runs := e.runs.Load()
	_, err2 := client.CreateSubscription(as(t.Context(), "c", "conflict"), req, grpc.Header(&h2))
	if diff := cmp.Diff(status.Convert(err1).Proto(), status.Convert(err2).Proto(), protocmp.Transform()); diff != "" {
		t.Errorf("replayed error (-want +got):\n%s", diff)
	}
	if !replayed(h2) {
		t.Errorf("replayed error: got %s %q, want true", idempotency.ReplayedKey, h2.Get(idempotency.ReplayedKey))
	}
	if e.runs.Load() != runs {
		t.Error("the retry of a recorded error ran the handler")
	}
	if n := e.count(t, "subscriptions WHERE account_id = $1 AND status = 'active'", id); n != 0 {
		t.Errorf("active subscriptions: got %d, want 0", n)
	}

	_, err = client.CreateSubscription(as(t.Context(), "c", "fix-me"), &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "Not A Plan"})
	if status.Code(err) != codes.InvalidArgument || !slices.Equal(violations(err), []string{"plan"}) {
		t.Fatalf("invalid plan: got %v with violations of %q, want InvalidArgument of plan", err, violations(err))
	}
	if n := e.count(t, "idempotency_keys WHERE key = 'fix-me'"); n != 0 {
		t.Errorf("records of a validation error: got %d, want 0", n)
	}
	var h3 metadata.MD
	if _, err := client.CreateSubscription(as(t.Context(), "c", "fix-me"), &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"}, grpc.Header(&h3)); err != nil || replayed(h3) {
		t.Errorf("corrected request with the same key: got %v, replayed %v; want it to run", err, replayed(h3))
	}
	if n := e.count(t, "idempotency_keys"); n != 2 {
		t.Errorf("records: got %d, want 2 (conflict and fix-me)", n)
	}
}

// TestExpiry checks that a record is kept for the TTL and then ignored and
// replaced: the retry runs anew.
func TestExpiry(t *testing.T) {
	t.Parallel()
	const ttl = time.Hour
	e := newEnv(t, idempotency.WithTTL(ttl))
	client := e.serve(t)
	id := e.account(t, "eve")
	req := &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"}
	ctx := as(t.Context(), "c", "short")
	if _, err := client.CreateSubscription(ctx, req); err != nil {
		t.Fatal(err)
	}
	var h metadata.MD
	if _, err := client.CreateSubscription(ctx, req, grpc.Header(&h)); err != nil || !replayed(h) {
		t.Fatalf("retry within the TTL: got %v, replayed %v; want a replay", err, replayed(h))
	}
	// Both times come from the one transaction that wrote the record.
	kept := "idempotency_keys WHERE expire_time - create_time = $1 * interval '1 microsecond' AND code = $2"
	if n := e.count(t, kept, ttl.Microseconds(), int32(codes.OK)); n != 1 {
		t.Errorf("records of OK kept %v: got %d, want 1", ttl, n)
	}

	// The TTL passes, rather than waiting for it.
	if _, err := e.pool.Exec(t.Context(), `UPDATE idempotency_keys SET expire_time = now()`); err != nil {
		t.Fatal(err)
	}
	// The retry runs anew and meets the subscription the first one made.
	h = nil
	if _, err := client.CreateSubscription(ctx, req, grpc.Header(&h)); status.Code(err) != codes.AlreadyExists || replayed(h) {
		t.Errorf("retry after the TTL: got %v, replayed %v; want AlreadyExists, not replayed", err, replayed(h))
	}
	if n := e.count(t, kept, ttl.Microseconds(), int32(codes.AlreadyExists)); n != 1 {
		t.Errorf("records of AlreadyExists kept %v (the expired one replaced): got %d, want 1", ttl, n)
	}
	if n := e.count(t, "idempotency_keys"); n != 1 {
		t.Errorf("records: got %d, want 1", n)
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

// TestInUse holds a key in a running call, in its transaction, and checks
// that another call with it is told so at once.
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
			if err := holdKey(ctx, e.store, entered, release); err != nil {
				return nil, err
			}
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

// holdKey makes a store call with ctx, the handler's, which begins the
// call's transaction and claims its key, and holds the transaction until
// release is closed or ctx ends, after closing entered (if not nil).
func holdKey(ctx context.Context, s *store.Store, entered, release chan struct{}) error {
	return s.InTx(ctx, func(ctx context.Context) error {
		if entered != nil {
			close(entered)
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
}

// TestConcurrent sends n identical creates with one key at once to the real
// services: one makes the change; the others are told the key is in use,
// with retry-after, while it runs, and replay it after.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	const n = 20
	inUse := make(chan struct{})
	var once sync.Once
	e := newEnv(t)
	// The one call that claims the key holds its transaction until another
	// was told the key is in use, so both answers occur however the calls
	// are scheduled; the others' claims fail. The call's deadline only
	// ends a test that would otherwise hang.
	hold := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := holdKey(ctx, e.store, nil, inUse); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
	client := e.serve(t, hold)
	id := e.account(t, "cora")
	req := &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"}

	type answer struct {
		subID      string
		err        error
		retryAfter []string
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var h metadata.MD
			resp, err := client.CreateSubscription(as(t.Context(), "c", "same"), req, grpc.Header(&h))
			answers[i] = answer{resp.GetSubscription().GetId(), err, h.Get("retry-after")}
			if status.Code(err) == codes.Aborted {
				once.Do(func() { close(inUse) })
			}
		})
	}
	wg.Wait()

	var ok, conflicts int
	subIDs := map[string]bool{}
	for i, a := range answers {
		switch {
		case a.err == nil:
			ok++
			subIDs[a.subID] = true
		case status.Code(a.err) == codes.Aborted:
			conflicts++
			if reason(a.err) != idempotency.ReasonInUse || !slices.Equal(a.retryAfter, []string{"1"}) {
				t.Errorf("call %d: got %v with retry-after %q, want %s and 1", i, a.err, a.retryAfter, idempotency.ReasonInUse)
			}
		default:
			t.Errorf("call %d: got %v, want OK or Aborted %s", i, a.err, idempotency.ReasonInUse)
		}
	}
	if ok < 1 || conflicts < 1 || len(subIDs) != 1 {
		t.Errorf("got %d successes with subscriptions %v and %d in-use answers; want one subscription, and both kinds", ok, subIDs, conflicts)
	}
	// Not the handler's runs: a call whose snapshot predates the first's
	// commit by a moment runs the handler too, and its change is rolled
	// back (store.LockIdempotencyKey). The rows tell.
	if got := e.count(t, "subscriptions"); got != 1 {
		t.Errorf("subscriptions: got %d, want 1", got)
	}
	if got := e.count(t, "idempotency_keys"); got != 1 {
		t.Errorf("records: got %d, want 1", got)
	}
	t.Logf("%d answered OK, %d Aborted %s", ok, conflicts, idempotency.ReasonInUse)
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
