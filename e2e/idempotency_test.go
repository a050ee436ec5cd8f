package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/internal/app"
)

// The end-to-end tests of idempotency keys (docs/api.md#idempotency-keys).

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
	got := r.header.Get("Idempotent-Replayed")
	if (got == "true") != want || (!want && got != "") {
		t.Errorf("%s: Idempotent-Replayed %q, want replayed %v", what, got, want)
	}
}

func TestIdempotencyReplayREST(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	id := e.insertAccount(t, "ida")

	// The quoted form of the draft and the bare token are the same key.
	first := e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", `"sub-1"`)
	wantCode(t, first, http.StatusOK)
	wantReplayed(t, "first create", first, false)
	again := e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", `sub-1`)
	wantCode(t, again, http.StatusOK)
	wantReplayed(t, "retry", again, true)
	if !bytes.Equal(first.body, again.body) {
		t.Errorf("replayed body:\n got %s\nwant %s", again.body, first.body)
	}
	if n := e.count(t, `SELECT count(*) FROM subscriptions WHERE account_id = $1`, id); n != 1 {
		t.Errorf("subscriptions after a create and its retry: got %d, want 1", n)
	}

	// A cancel retried with its key answers the canceled subscription again,
	// where a plain second cancel would be 404.
	cancel := e.do(t, "POST", subscribePath(id)+":cancel", `{}`, "Idempotency-Key", "cancel-1")
	wantCode(t, cancel, http.StatusOK)
	cancelAgain := e.do(t, "POST", subscribePath(id)+":cancel", `{}`, "Idempotency-Key", "cancel-1")
	wantCode(t, cancelAgain, http.StatusOK)
	wantReplayed(t, "retried cancel", cancelAgain, true)
	if !bytes.Equal(cancel.body, cancelAgain.body) {
		t.Errorf("replayed cancel:\n got %s\nwant %s", cancelAgain.body, cancel.body)
	}
	plain := e.do(t, "POST", subscribePath(id)+":cancel", `{}`)
	wantRESTError(t, plain, http.StatusNotFound, codes.NotFound, "")

	// The keys are the creates' own: none were recorded for the plain call.
	if n := e.count(t, `SELECT count(*) FROM idempotency_keys`); n != 2 {
		t.Errorf("idempotency records: got %d, want 2", n)
	}
}

func TestIdempotencyReplayGRPC(t *testing.T) {
	t.Parallel()
	// CreateAccount hashes a password: on a loaded machine under -race that
	// can take longer than the default deadline, which is not under test.
	e := newTestEnv(t, func(c *config.Config) { c.Limits.Timeout = 30 * time.Second })
	id := e.insertAccount(t, "igor")
	req := &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"}
	ctx := withIdemKey(t.Context(), "grpc-1")

	var h1, h2 metadata.MD
	first, err := e.sub.CreateSubscription(ctx, req, grpc.Header(&h1))
	if err != nil {
		t.Fatalf("first CreateSubscription: %v", err)
	}
	if got := h1.Get("idempotent-replayed"); len(got) != 0 {
		t.Errorf("first call: idempotent-replayed %q, want none", got)
	}
	again, err := e.sub.CreateSubscription(ctx, req, grpc.Header(&h2))
	if err != nil {
		t.Fatalf("retried CreateSubscription: %v", err)
	}
	if got := h2.Get("idempotent-replayed"); len(got) != 1 || got[0] != "true" {
		t.Errorf("retry: idempotent-replayed %q, want true", got)
	}
	if !proto.Equal(first, again) {
		t.Errorf("replayed response: got %v, want %v", again, first)
	}

	// The same request over REST has the same fingerprint: the key replays
	// across transports, as the gateway would have marshaled the first.
	r := e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", "grpc-1")
	wantCode(t, r, http.StatusOK)
	wantReplayed(t, "REST retry of a gRPC call", r, true)
	var got shebav1.Subscription
	if err := protojson.Unmarshal(r.body, &got); err != nil {
		t.Fatalf("REST body %s: %v", r.body, err)
	}
	if !proto.Equal(&got, first.GetSubscription()) {
		t.Errorf("REST replay: got %v, want %v", &got, first.GetSubscription())
	}
	if n := e.count(t, `SELECT count(*) FROM subscriptions WHERE account_id = $1`, id); n != 1 {
		t.Errorf("subscriptions: got %d, want 1", n)
	}

	// CreateAccount too; its password is not in the fingerprint, but the
	// username is.
	areq := &shebav1.CreateAccountRequest{Username: "ivy", Password: "password1"}
	actx := withIdemKey(t.Context(), "acct-1")
	a1, err := e.account.CreateAccount(actx, areq)
	if err != nil {
		t.Fatalf("CreateAccount: %v", err)
	}
	a2, err := e.account.CreateAccount(actx, areq)
	if err != nil || !proto.Equal(a1, a2) {
		t.Errorf("retried CreateAccount: got %v, %v; want %v", a2, err, a1)
	}
	_, err = e.account.CreateAccount(actx, &shebav1.CreateAccountRequest{Username: "ivy2", Password: "password1"})
	wantGRPCError(t, err, codes.InvalidArgument, "")
	if got := reasonOf(status.Convert(err)); got != "IDEMPOTENCY_KEY_REUSED" {
		t.Errorf("CreateAccount with a reused key: reason %q, want IDEMPOTENCY_KEY_REUSED", got)
	}
}

func TestIdempotencyKeyReused(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	id := e.insertAccount(t, "rae")
	wantCode(t, e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", "k"), http.StatusOK)

	r := e.do(t, "POST", subscribePath(id), `{"plan":"basic"}`, "Idempotency-Key", "k")
	st := wantRESTError(t, r, http.StatusUnprocessableEntity, codes.InvalidArgument, "")
	if got := reasonOf(status.FromProto(st)); got != "IDEMPOTENCY_KEY_REUSED" {
		t.Errorf("REST reason: got %q, want IDEMPOTENCY_KEY_REUSED; body %s", got, r.body)
	}
	wantReplayed(t, "reused key", r, false)

	_, err := e.sub.CreateSubscription(withIdemKey(t.Context(), "k"), &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "basic"})
	wantGRPCError(t, err, codes.InvalidArgument, "")
	if got := reasonOf(status.Convert(err)); got != "IDEMPOTENCY_KEY_REUSED" {
		t.Errorf("gRPC reason: got %q, want IDEMPOTENCY_KEY_REUSED", got)
	}
	if n := e.count(t, `SELECT count(*) FROM subscriptions WHERE plan = 'basic'`); n != 0 {
		t.Errorf("basic subscriptions: got %d, want 0", n)
	}
}

func TestIdempotencyKeyInvalid(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	id := e.insertAccount(t, "ivan")
	for _, test := range []struct {
		name, key string
	}{
		{"empty", " "},
		{"empty quoted", `""`},
		{"too long", strings.Repeat("k", 256)},
		{"too long quoted", `"` + strings.Repeat("k", 256) + `"`},
		{"space inside", "a b"},
		{"space inside quotes", `"a b"`},
		{"unterminated quote", `"abc`},
		{"after the closing quote", `"a"b`},
		{"not ASCII", "clé"},
	} {
		t.Run(test.name, func(t *testing.T) {
			r := e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", test.key)
			wantRESTError(t, r, http.StatusBadRequest, codes.InvalidArgument, "idempotency-key")
		})
	}
	t.Run("gRPC", func(t *testing.T) {
		_, err := e.sub.CreateSubscription(withIdemKey(t.Context(), strings.Repeat("k", 256)),
			&shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"})
		wantGRPCError(t, err, codes.InvalidArgument, "idempotency-key")
	})
	t.Run("given twice", func(t *testing.T) {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "idempotency-key", "a", "idempotency-key", "b")
		_, err := e.sub.CreateSubscription(ctx, &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"})
		wantGRPCError(t, err, codes.InvalidArgument, "idempotency-key")
	})
	// 255 characters is the longest key, and nothing was created before.
	r := e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", strings.Repeat("~", 255))
	wantCode(t, r, http.StatusOK)
	wantReplayed(t, "a 255-character key", r, false)
}

// TestIdempotencyConcurrent sends 20 identical requests with one key at
// once, half over REST and half over gRPC: one runs, the others answer
// 409 / ABORTED IDEMPOTENCY_KEY_IN_USE while it runs and replay it after.
func TestIdempotencyConcurrent(t *testing.T) {
	t.Parallel()
	var inUse atomic.Int64
	// The one call that runs waits, inside its transaction, until another
	// was told the key is in use (or 5 s pass), so both answers occur.
	hold := withHandlerHook(func(ctx context.Context, method string) error {
		if strings.HasSuffix(method, "/CreateSubscription") {
			deadline := time.Now().Add(5 * time.Second)
			for inUse.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
		}
		return nil
	})
	e := newTestEnvWith(t, nil, []app.Option{hold})
	id := e.insertAccount(t, "cora")
	const n = 20
	req := &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"}

	type answer struct {
		transport  string
		ok         bool
		subID      string
		retryAfter string
		reason     string
		err        error
	}
	answers := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			a := &answers[i]
			if i%2 == 0 {
				a.transport = "grpc"
				var header metadata.MD
				resp, err := e.sub.CreateSubscription(withIdemKey(t.Context(), "same"), req, grpc.Header(&header))
				if err == nil {
					a.ok, a.subID = true, resp.GetSubscription().GetId()
					return
				}
				st := status.Convert(err)
				if st.Code() != codes.Aborted {
					a.err = err
					return
				}
				a.reason = reasonOf(st)
				if v := header.Get("retry-after"); len(v) == 1 {
					a.retryAfter = v[0]
				}
				inUse.Add(1)
				return
			}
			a.transport = "rest"
			code, header, body, err := postJSON(t.Context(), e.baseURL+subscribePath(id), `{"plan":"pro"}`,
				"X-Api-Key", testKey, "Idempotency-Key", "same")
			if err != nil {
				a.err = err
				return
			}
			switch code {
			case http.StatusOK:
				var sub shebav1.Subscription
				if err := protojson.Unmarshal(body, &sub); err != nil {
					a.err = err
					return
				}
				a.ok, a.subID = true, sub.GetId()
			case http.StatusConflict:
				var st spb.Status
				if err := protojson.Unmarshal(body, &st); err != nil {
					a.err = err
					return
				}
				a.reason = reasonOf(status.FromProto(&st))
				a.retryAfter = header.Get("Retry-After")
				inUse.Add(1)
			default:
				a.err = errors.New(http.StatusText(code) + ": " + string(body))
			}
		})
	}
	close(start)
	wg.Wait()

	var ok, conflicts int
	subIDs := map[string]bool{}
	for i, a := range answers {
		switch {
		case a.err != nil:
			t.Errorf("call %d (%s): got %v, want 200 or 409 IN_USE", i, a.transport, a.err)
		case a.ok:
			ok++
			subIDs[a.subID] = true
		default:
			conflicts++
			if a.reason != "IDEMPOTENCY_KEY_IN_USE" || a.retryAfter != "1" {
				t.Errorf("call %d (%s): 409 with reason %q, retry-after %q; want IDEMPOTENCY_KEY_IN_USE, 1", i, a.transport, a.reason, a.retryAfter)
			}
		}
	}
	if ok < 1 || conflicts < 1 || len(subIDs) != 1 {
		t.Errorf("got %d successes with subscriptions %v and %d in-use answers; want one subscription, and both kinds", ok, subIDs, conflicts)
	}
	if got := e.count(t, `SELECT count(*) FROM subscriptions WHERE account_id = $1`, id); got != 1 {
		t.Errorf("subscriptions: got %d, want 1", got)
	}
	if got := e.count(t, `SELECT count(*) FROM idempotency_keys`); got != 1 {
		t.Errorf("idempotency records: got %d, want 1", got)
	}
	t.Logf("%d answered 200, %d answered 409 IN_USE", ok, conflicts)
}

// postJSON posts body with the header pairs, without failing the test (it
// runs on other goroutines).
func postJSON(ctx context.Context, url, body string, header ...string) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

func TestIdempotencyCallersIndependent(t *testing.T) {
	t.Parallel()
	const otherKey = "other-key-0123456789abcdefghijklmnopqrst"
	e := newTestEnv(t, func(c *config.Config) {
		c.Auth.Keys = append(c.Auth.Keys, keyEntry("other", otherKey))
	})
	a := e.insertAccount(t, "amy")
	b := e.insertAccount(t, "bob")

	// The same key, from two callers, on different requests: both run.
	r1 := e.do(t, "POST", subscribePath(a), `{"plan":"pro"}`, "Idempotency-Key", "shared")
	wantCode(t, r1, http.StatusOK)
	r2 := e.do(t, "POST", subscribePath(b), `{"plan":"basic"}`, "Idempotency-Key", "shared", "X-Api-Key", otherKey)
	wantCode(t, r2, http.StatusOK)
	wantReplayed(t, "other caller", r2, false)
	if n := e.count(t, `SELECT count(*) FROM subscriptions`); n != 2 {
		t.Errorf("subscriptions: got %d, want 2", n)
	}
	// Each caller's retry replays its own.
	again := e.do(t, "POST", subscribePath(b), `{"plan":"basic"}`, "Idempotency-Key", "shared", "X-Api-Key", otherKey)
	wantReplayed(t, "other caller's retry", again, true)
	if !bytes.Equal(again.body, r2.body) {
		t.Errorf("other caller's replay:\n got %s\nwant %s", again.body, r2.body)
	}
	// The same key on another method is another key too.
	c := e.do(t, "POST", subscribePath(a)+":cancel", `{}`, "Idempotency-Key", "shared")
	wantCode(t, c, http.StatusOK)
	wantReplayed(t, "same key, other method", c, false)
}

// TestIdempotencyHandlerErrorReplayed checks that an answer of the handler
// about the data is recorded and replayed, even once the data changed.
func TestIdempotencyHandlerErrorReplayed(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	id := e.insertAccount(t, "hal")
	wantCode(t, e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`), http.StatusOK)

	first := e.do(t, "POST", subscribePath(id), `{"plan":"max"}`, "Idempotency-Key", "conflict")
	wantRESTError(t, first, http.StatusConflict, codes.AlreadyExists, "")
	wantReplayed(t, "first conflict", first, false)
	wantCode(t, e.do(t, "POST", subscribePath(id)+":cancel", `{}`), http.StatusOK)

	// The retry would now succeed if it ran: it replays the 409.
	again := e.do(t, "POST", subscribePath(id), `{"plan":"max"}`, "Idempotency-Key", "conflict")
	wantRESTError(t, again, http.StatusConflict, codes.AlreadyExists, "")
	wantReplayed(t, "retried conflict", again, true)
	if !bytes.Equal(first.body, again.body) {
		t.Errorf("replayed error:\n got %s\nwant %s", again.body, first.body)
	}
	if n := e.count(t, `SELECT count(*) FROM subscriptions WHERE account_id = $1 AND status = 'active'`, id); n != 0 {
		t.Errorf("active subscriptions: got %d, want 0 (the retry must not run)", n)
	}
	_, err := e.sub.CreateSubscription(withIdemKey(t.Context(), "conflict"), &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "max"})
	wantGRPCError(t, err, codes.AlreadyExists, "")
}

func TestIdempotencyValidationNotRecorded(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	id := e.insertAccount(t, "val")
	r := e.do(t, "POST", subscribePath(id), `{"plan":"Not A Plan"}`, "Idempotency-Key", "fix-me")
	wantRESTError(t, r, http.StatusBadRequest, codes.InvalidArgument, "plan")
	// The corrected request, with the same key, runs.
	e.wantRunsAnew(t, id, "fix-me")
}

// wantRunsAnew checks that no outcome is recorded, and that a valid
// CreateSubscription of account id with key then runs as a first request.
func (e *testEnv) wantRunsAnew(t *testing.T, id, key string) {
	t.Helper()
	if n := e.count(t, `SELECT count(*) FROM idempotency_keys`); n != 0 {
		t.Errorf("records: got %d, want 0", n)
	}
	r := e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", key)
	wantCode(t, r, http.StatusOK)
	wantReplayed(t, "the request sent next", r, false)
}

func TestIdempotencyExpiry(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	e := newTestEnv(t, func(c *config.Config) { c.Idempotency.TTL = ttl })
	id := e.insertAccount(t, "eve")
	first := e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", "short")
	answered := time.Now()
	wantCode(t, first, http.StatusOK)
	wantReplayed(t, "retry within the TTL", e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", "short"), true)

	// The record expires at most ttl after the first answer: the retry then
	// runs anew, and meets the subscription the first one made.
	time.Sleep(time.Until(answered.Add(ttl)))
	late := e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", "short")
	wantRESTError(t, late, http.StatusConflict, codes.AlreadyExists, "")
	wantReplayed(t, "retry after the TTL", late, false)
}

// TestIdempotencyTimeout checks that a call whose deadline passes inside
// its transaction leaves nothing: the retry runs as the first call.
func TestIdempotencyTimeout(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	slowFirst := withHandlerHook(func(ctx context.Context, method string) error {
		if strings.HasSuffix(method, "/CreateSubscription") && calls.Add(1) == 1 {
			<-ctx.Done()
		}
		return nil
	})
	e := newTestEnvWith(t, nil, []app.Option{slowFirst}, func(c *config.Config) { c.Limits.Timeout = 300 * time.Millisecond })
	id := e.insertAccount(t, "tim")
	r := e.do(t, "POST", subscribePath(id), `{"plan":"pro"}`, "Idempotency-Key", "slow")
	wantRESTError(t, r, http.StatusGatewayTimeout, codes.DeadlineExceeded, "")
	e.wantRunsAnew(t, id, "slow")
	if n := e.count(t, `SELECT count(*) FROM subscriptions`); n != 1 {
		t.Errorf("subscriptions: got %d, want 1", n)
	}
}

// TestIdempotencyNeedsCaller checks that a key on a public method, which
// has no caller to scope it, is refused rather than shared by everyone.
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
