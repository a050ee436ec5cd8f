package e2e

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/internal/app"
)

// The end-to-end tests of idempotency keys (docs/api.md#idempotency-keys):
// what needs both transports or the whole chain. The interceptor's own
// rules (replay, reuse, scope, recorded errors, concurrent calls, expiry,
// key syntax) are tested in interceptors/idempotency.

// reasonOf returns the reason of the sheba ErrorInfo of st, or "".
func reasonOf(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == "sheba" {
			return info.GetReason()
		}
	}
	return ""
}

// withIdemKey returns ctx sending key as idempotency-key metadata.
func withIdemKey(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
}

// subscribePath is the REST path of CreateSubscription.
func subscribePath(accountID string) string {
	return "/v1/accounts/" + accountID + "/subscription"
}

// wantReplayed checks the Idempotent-Replayed header of r.
func wantReplayed(t *testing.T, what string, r restResponse, want bool) {
	t.Helper()
	got := r.Header.Get("Idempotent-Replayed")
	if (got == "true") != want || (!want && got != "") {
		t.Errorf("%s: Idempotent-Replayed %q, want replayed %v", what, got, want)
	}
}

// wantGRPCReplay checks that a gRPC answer, its header and its message
// got, is marked replayed and says what the REST answer body first said.
func wantGRPCReplay(t *testing.T, what string, header metadata.MD, first []byte, got proto.Message) {
	t.Helper()
	if v := header.Get("idempotent-replayed"); len(v) != 1 || v[0] != "true" {
		t.Errorf("%s: idempotent-replayed %q, want true", what, v)
	}
	want := got.ProtoReflect().New().Interface()
	if err := protojson.Unmarshal(first, want); err != nil {
		t.Fatalf("REST body %s: %v", first, err)
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

// TestIdempotencyTransports checks that a replay over REST answers what
// the first answer said, byte for byte, and over gRPC the same message,
// each marked replayed; that a reused key is 422 on REST; and that the
// record is kept for idempotency.ttl.
func TestIdempotencyTransports(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Hour
	e := newTestEnv(t, func(c *config.Config) { c.Idempotency.TTL = ttl })
	id := e.insertAccount(t, "ida")

	first := e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", `"sub-1"`)
	wantCode(t, first, http.StatusOK)
	wantReplayed(t, "first create", first, false)
	again := e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", `"sub-1"`)
	wantCode(t, again, http.StatusOK)
	wantReplayed(t, "REST retry", again, true)
	if !bytes.Equal(first.Body, again.Body) {
		t.Errorf("replayed body:\n got %s\nwant %s", again.Body, first.Body)
	}

	// The same request over gRPC has the same fingerprint: the key replays
	// across transports.
	var header metadata.MD
	resp, err := e.sub.CreateSubscription(withIdemKey(t.Context(), `"sub-1"`),
		&shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"}, grpc.Header(&header))
	if err != nil {
		t.Fatalf("gRPC retry: %v", err)
	}
	wantGRPCReplay(t, "gRPC replay of a REST create", header, first.Body, resp.GetSubscription())

	r := e.do(t, "POST", subscribePath(id), `{"plan":"basic"}`, "Idempotency-Key", `"sub-1"`)
	st := wantRESTError(t, r, http.StatusUnprocessableEntity, codes.InvalidArgument, "")
	if got := reasonOf(status.FromProto(st)); got != "IDEMPOTENCY_KEY_REUSED" {
		t.Errorf("REST reason: got %q, want IDEMPOTENCY_KEY_REUSED; body %s", got, r.Body)
	}
	wantReplayed(t, "reused key", r, false)
	if n := e.count(t, `SELECT count(*) FROM subscriptions WHERE account_id = $1`, id); n != 1 {
		t.Errorf("subscriptions: got %d, want 1", n)
	}
	// Both times come from the one transaction that wrote the record.
	if n := e.count(t, `SELECT count(*) FROM idempotency_keys WHERE expire_time - create_time = $1 * interval '1 microsecond'`, ttl.Microseconds()); n != 1 {
		t.Errorf("records kept idempotency.ttl (%v): got %d, want 1", ttl, n)
	}
}

// TestIdempotencyInUseREST checks the REST answer to a key in use: 409 with
// the reason and Retry-After, which the chain's error details write.
func TestIdempotencyInUseREST(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	id := e.insertAccount(t, "cora")
	// The first create holds its transaction, and so the key, while its
	// insert waits for the account's row, which the test locks; the key is
	// claimed when the transaction begins, at the handler's first
	// statement.
	lock, err := e.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(t.Context())
	if _, err := lock.Exec(t.Context(), `SELECT FROM accounts WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.sub.CreateSubscription(withIdemKey(t.Context(), "same"), &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"})
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); e.count(t, `
		SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO subscriptions%'`) == 0; time.Sleep(10 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("held create: got %v before it was held", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the first create did not come to wait for the account's row within 10s")
		}
	}

	r := e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", "same")
	st := wantRESTError(t, r, http.StatusConflict, codes.Aborted, "")
	if got := reasonOf(status.FromProto(st)); got != "IDEMPOTENCY_KEY_IN_USE" {
		t.Errorf("reason: got %q, want IDEMPOTENCY_KEY_IN_USE; body %s", got, r.Body)
	}
	if got := r.Header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After: got %q, want 1", got)
	}
	if err := lock.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("held create: %v", err)
	}
	again := e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", "same")
	wantCode(t, again, http.StatusOK)
	wantReplayed(t, "retry once the first is done", again, true)
}

// TestIdempotencyKeyInvalidREST checks the malformed keys that only REST
// can send: the gateway must pass an empty Idempotency-Key on, and answer
// one with bytes it would drop itself, rather than let the create run
// without a key.
func TestIdempotencyKeyInvalidREST(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	id := e.insertAccount(t, "ivan")
	for _, test := range []struct {
		name, key string
	}{
		{"empty", " "},
		{"not ASCII", "clé"},
	} {
		t.Run(test.name, func(t *testing.T) {
			r := e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", test.key)
			wantRESTError(t, r, http.StatusBadRequest, codes.InvalidArgument, "idempotency-key")
		})
	}
	if n := e.count(t, `SELECT count(*) FROM subscriptions`); n != 0 {
		t.Errorf("subscriptions: got %d, want 0", n)
	}
}

// TestIdempotencyTimeout checks that the deadline of limits.timeout covers
// the idempotency transaction (the timeout interceptor sits outside it): a
// call whose deadline passes inside it leaves nothing, and the retry runs
// as the first call.
func TestIdempotencyTimeout(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	slowFirst := withHandlerHook(func(ctx context.Context, method string) error {
		if strings.HasSuffix(method, "/CreateSubscription") && calls.Add(1) == 1 {
			<-ctx.Done()
		}
		return nil
	})
	// Long enough for the retry, which runs under the same limit, on a
	// loaded machine.
	e := newTestEnvWith(t, nil, []app.Option{slowFirst}, func(c *config.Config) { c.Limits.Timeout = 2 * time.Second })
	id := e.insertAccount(t, "tim")
	r := e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", "slow")
	wantRESTError(t, r, http.StatusGatewayTimeout, codes.DeadlineExceeded, "")
	if n := e.count(t, `SELECT count(*) FROM idempotency_keys`); n != 0 {
		t.Errorf("records: got %d, want 0", n)
	}
	again := e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", "slow")
	wantCode(t, again, http.StatusOK)
	wantReplayed(t, "the retry", again, false)
	if n := e.count(t, `SELECT count(*) FROM subscriptions`); n != 1 {
		t.Errorf("subscriptions: got %d, want 1", n)
	}
}

// TestIdempotencyNeedsCaller checks that a key on a public method, which
// has no caller to scope it, is refused rather than shared by everyone:
// auth runs before idempotency and leaves the public call without a caller.
func TestIdempotencyNeedsCaller(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(c *config.Config) {
		c.Auth.Public = append(c.Auth.Public, shebav1.SubscriptionService_CreateSubscription_FullMethodName)
	})
	id := e.insertAccount(t, "pub")
	r := e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", "anon", "X-Api-Key", "")
	wantRESTError(t, r, http.StatusBadRequest, codes.InvalidArgument, "idempotency-key")
	wantCode(t, e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`, "X-Api-Key", ""), http.StatusOK)
}

// TestIdempotencyPassword checks that the password is part of the request
// a key is bound to, on both transports: the same key with the same
// password replays, with another password it is refused as reused.
func TestIdempotencyPassword(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	body := func(password string) string {
		return `{"username":"pat","password":"` + password + `"}`
	}
	first := e.do(t, "POST", "/v1/accounts", body("correct horse"), "Idempotency-Key", "signup")
	wantCode(t, first, http.StatusOK)
	again := e.do(t, "POST", "/v1/accounts", body("correct horse"), "Idempotency-Key", "signup")
	wantCode(t, again, http.StatusOK)
	wantReplayed(t, "REST retry with the same password", again, true)
	if !bytes.Equal(first.Body, again.Body) {
		t.Errorf("replayed body:\n got %s\nwant %s", again.Body, first.Body)
	}

	r := e.do(t, "POST", "/v1/accounts", body("wrong horse"), "Idempotency-Key", "signup")
	st := wantRESTError(t, r, http.StatusUnprocessableEntity, codes.InvalidArgument, "")
	if got := reasonOf(status.FromProto(st)); got != "IDEMPOTENCY_KEY_REUSED" {
		t.Errorf("REST reason: got %q, want IDEMPOTENCY_KEY_REUSED; body %s", got, r.Body)
	}
	wantReplayed(t, "REST retry with another password", r, false)

	_, err := e.account.CreateAccount(withIdemKey(t.Context(), "signup"), &shebav1.CreateAccountRequest{Username: "pat", Password: "wrong horse"})
	if s := status.Convert(err); s.Code() != codes.InvalidArgument || reasonOf(s) != "IDEMPOTENCY_KEY_REUSED" {
		t.Errorf("gRPC retry with another password: got %v, want INVALID_ARGUMENT IDEMPOTENCY_KEY_REUSED", err)
	}
	var header metadata.MD
	resp, err := e.account.CreateAccount(withIdemKey(t.Context(), "signup"), &shebav1.CreateAccountRequest{Username: "pat", Password: "correct horse"}, grpc.Header(&header))
	if err != nil {
		t.Fatalf("gRPC retry with the same password: %v", err)
	}
	wantGRPCReplay(t, "gRPC replay of a REST sign-up", header, first.Body, resp.GetAccount())
	// The first password is the one that logs in.
	if _, err := e.account.Login(t.Context(), &shebav1.LoginRequest{Username: "pat", Password: "correct horse"}); err != nil {
		t.Errorf("Login with the first password: %v", err)
	}
	if n := e.count(t, `SELECT count(*) FROM accounts`); n != 1 {
		t.Errorf("accounts: got %d, want 1", n)
	}
}
