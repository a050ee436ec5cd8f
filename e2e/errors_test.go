package e2e

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/codec/cborpb"
	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/interceptors/retryafter"
	"github.com/shebasvc/sheba/internal/app"
	"github.com/shebasvc/sheba/store/storetest"
)

// wantDetails checks what every error of sheba carries: exactly one
// ErrorInfo of domain sheba with reason want, a valid UTF-8 message and,
// exactly when the error is retryable (429, 503), one RetryInfo and one
// retry (the Retry-After header or retry-after metadata) of the same whole
// seconds.
func wantDetails(t *testing.T, what string, st *status.Status, retryable bool, want string, retry []string) {
	t.Helper()
	var infos []*errdetails.ErrorInfo
	var retries []*errdetails.RetryInfo
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			infos = append(infos, d)
		case *errdetails.RetryInfo:
			retries = append(retries, d)
		case error:
			t.Errorf("%s: a detail does not decode: %v", what, d)
		}
	}
	if len(infos) != 1 || infos[0].GetDomain() != reason.Domain || infos[0].GetReason() != want {
		t.Errorf("%s: got ErrorInfos %v, want one {domain sheba, reason %s}", what, infos, want)
	}
	if !utf8.ValidString(st.Message()) {
		t.Errorf("%s: message %q is not valid UTF-8", what, st.Message())
	}
	switch {
	case !retryable && (len(retries) > 0 || len(retry) > 0):
		t.Errorf("%s: %v carries RetryInfo %v / retry-after %q, want neither", what, st.Code(), retries, retry)
	case retryable && (len(retries) != 1 || len(retry) != 1):
		t.Errorf("%s: %v carries RetryInfo %v and retry-after %q, want one of each", what, st.Code(), retries, retry)
	case retryable:
		secs, err := strconv.ParseInt(retry[0], 10, 64)
		if err != nil || secs < 1 || retries[0].GetRetryDelay().AsDuration() != time.Duration(secs)*time.Second {
			t.Errorf("%s: retry-after %q and RetryInfo %v, want the same whole seconds, at least 1", what, retry, retries[0].GetRetryDelay().AsDuration())
		}
	}
}

// wantRESTDetails checks a REST error answer (JSON, or CBOR when the
// request asked for it): its HTTP status and wantDetails.
func wantRESTDetails(t *testing.T, what string, r restResponse, httpCode int, want string) *status.Status {
	t.Helper()
	if r.Code != httpCode {
		t.Errorf("%s: got HTTP %d, want %d; body %q", what, r.Code, httpCode, r.Body)
		return nil
	}
	var st *status.Status
	if r.Header.Get("Content-Type") == "application/cbor" {
		var err error
		if st, err = cborStatus(r.Body); err != nil {
			t.Errorf("%s: CBOR body %x: %v", what, r.Body, err)
			return nil
		}
	} else {
		st = status.FromProto(r.Status(t))
	}
	retryable := httpCode == http.StatusTooManyRequests || httpCode == http.StatusServiceUnavailable
	wantDetails(t, what, st, retryable, want, r.Header.Values("Retry-After"))
	return st
}

// wantGRPCDetails checks a gRPC error: its code and wantDetails.
func wantGRPCDetails(t *testing.T, what string, err error, header metadata.MD, code codes.Code, want string) *status.Status {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != code {
		t.Errorf("%s: got %v (%v), want %v", what, st.Code(), err, code)
		return st
	}
	wantDetails(t, what, st, reason.Retryable(code), want, header.Get(retryafter.Key))
	return st
}

// actionHook runs around every handler the action that the call names in
// its request id (x-request-id, header and metadata alike): "action-panic".
func actionHook(hold <-chan struct{}, held *sync.WaitGroup) app.Option {
	return withHandlerHook(func(ctx context.Context, _ string) error {
		v := metadata.ValueFromIncomingContext(ctx, "x-request-id")
		if len(v) == 0 {
			return nil
		}
		switch strings.TrimPrefix(v[0], "action-") {
		case "panic":
			panic("test panic")
		case "late":
			// Finish after the deadline, successfully.
			d, _ := ctx.Deadline()
			time.Sleep(time.Until(d) + 50*time.Millisecond)
		case "exhausted":
			// A 429 whose maker names no reason and gives no hint.
			return status.Error(codes.ResourceExhausted, "made up")
		case "unavailable":
			// A message built from input that is not UTF-8.
			return status.Error(codes.Unavailable, "no \xff here")
		case "retry":
			retryafter.Set(ctx, 2500*time.Millisecond)
			return status.Error(codes.ResourceExhausted, "come back later")
		case "hold":
			held.Done()
			<-hold
		}
		return nil
	})
}

// errorCase is one error of TestErrorDetails, on both transports.
type errorCase struct {
	name     string
	grpc     func(ctx context.Context, opt grpc.CallOption) error
	method   string
	path     string
	body     string
	header   []string // name, value pairs; "" removes
	code     codes.Code
	httpCode int
	reason   string
}

// TestErrorDetails checks the ErrorInfo (and RetryInfo) of every error the
// chain and the handlers decide, on both transports.
func TestErrorDetails(t *testing.T) {
	t.Parallel()
	e := newTestEnvWith(t, nil, []app.Option{actionHook(nil, nil)}, func(c *config.Config) {
		// Short, for the late answers.
		c.Limits.Timeout = 2 * time.Second
	})
	id := e.insertAccount(t, "errors")
	if _, err := e.sub.CreateSubscription(t.Context(), &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"}); err != nil {
		t.Fatal(err)
	}
	account := shebav1.NewAccountServiceClient(e.anon)
	sub := shebav1.NewSubscriptionServiceClient(e.anon)
	ping := shebav1.NewPingServiceClient(e.anon)
	withMD := func(kv ...string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), append([]string{"x-api-key", testKey}, kv...)...)
	}
	// pingAction is the case of a Ping whose hook does action.
	pingAction := func(name, action string, code codes.Code, httpCode int, why string) errorCase {
		return errorCase{
			name: name,
			grpc: func(_ context.Context, opt grpc.CallOption) error {
				_, err := ping.Ping(withMD("x-request-id", "action-"+action), &shebav1.PingRequest{}, opt)
				return err
			},
			method: http.MethodGet, path: "/v1/ping", header: []string{"X-Request-Id", "action-" + action},
			code: code, httpCode: httpCode, reason: why,
		}
	}
	for _, test := range []errorCase{
		{
			name: "invalid argument",
			grpc: func(ctx context.Context, opt grpc.CallOption) error {
				_, err := account.GetAccount(ctx, &shebav1.GetAccountRequest{AccountId: "nope"}, opt)
				return err
			},
			method: http.MethodGet, path: "/v1/accounts/nope",
			code: codes.InvalidArgument, httpCode: 400, reason: reason.InvalidArgument,
		},
		{
			name: "not found",
			grpc: func(ctx context.Context, opt grpc.CallOption) error {
				_, err := account.GetAccount(ctx, &shebav1.GetAccountRequest{AccountId: unknownID}, opt)
				return err
			},
			method: http.MethodGet, path: "/v1/accounts/" + unknownID,
			code: codes.NotFound, httpCode: 404, reason: reason.NotFound,
		},
		{
			name: "already exists",
			grpc: func(ctx context.Context, opt grpc.CallOption) error {
				_, err := sub.CreateSubscription(ctx, &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"}, opt)
				return err
			},
			method: http.MethodPost, path: "/v1/accounts/" + id + "/subscription", body: `{"plan":"pro"}`,
			code: codes.AlreadyExists, httpCode: 409, reason: reason.AlreadyExists,
		},
		{
			name: "panic",
			grpc: func(_ context.Context, opt grpc.CallOption) error {
				_, err := account.GetAccount(withMD("x-request-id", "action-panic"), &shebav1.GetAccountRequest{AccountId: id}, opt)
				return err
			},
			method: http.MethodGet, path: "/v1/accounts/" + id, header: []string{"X-Request-Id", "action-panic"},
			code: codes.Internal, httpCode: 500, reason: reason.Internal,
		},
		// The answer was ready, but after the deadline: 504.
		pingAction("late success", "late", codes.DeadlineExceeded, 504, reason.DeadlineExceeded),
		// Defaults from the code, RetryInfo and retry-after of 1 s.
		pingAction("429 without reason", "exhausted", codes.ResourceExhausted, 429, "RESOURCE_EXHAUSTED"),
		pingAction("503 with a message that is not UTF-8", "unavailable", codes.Unavailable, 503, "UNAVAILABLE"),
		pingAction("429 with a hint of 2.5 s", "retry", codes.ResourceExhausted, 429, "RESOURCE_EXHAUSTED"),
	} {
		t.Run(test.name, func(t *testing.T) {
			var header metadata.MD
			err := test.grpc(withMD(), grpc.Header(&header))
			gst := wantGRPCDetails(t, "gRPC", err, header, test.code, test.reason)
			r := e.do(t, test.method, test.path, test.body, test.header...)
			st := wantRESTDetails(t, "REST JSON", r, test.httpCode, test.reason)
			if st != nil && gst != nil && st.Message() != gst.Message() {
				t.Errorf("messages differ: REST %q, gRPC %q", st.Message(), gst.Message())
			}
			if test.name == "429 with a hint of 2.5 s" && r.Header.Get("Retry-After") != "3" {
				t.Errorf("Retry-After: got %q, want 3 (2.5 s rounded up)", r.Header.Get("Retry-After"))
			}
			cbor := e.do(t, test.method, test.path, test.body, append([]string{"Accept", "application/cbor"}, test.header...)...)
			wantRESTDetails(t, "REST CBOR", cbor, test.httpCode, test.reason)
		})
	}
}

// TestLoginErrors checks the reason of a failed Login on both transports
// (under the default limits.timeout: a password hash can be slow under
// -race), and the case of the issue: REST Login under a 1 ms deadline
// answered 200 after it.
func TestLoginErrors(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.newAccount(t, "late")
	for _, password := range []string{"wrong-password", "password1"} {
		user := map[string]string{"wrong-password": "late", "password1": "nobody"}[password]
		var header metadata.MD
		_, err := e.account.Login(t.Context(), &shebav1.LoginRequest{Username: user, Password: password}, grpc.Header(&header))
		wantGRPCDetails(t, "gRPC Login "+user, err, header, codes.Unauthenticated, reason.LoginFailed)
		r := e.do(t, http.MethodPost, "/v1/accounts:login", `{"username":"`+user+`","password":"`+password+`"}`)
		wantRESTDetails(t, "REST Login "+user, r, http.StatusUnauthorized, reason.LoginFailed)
	}

	r := e.do(t, http.MethodPost, "/v1/accounts:login", `{"username":"late","password":"password1"}`, "Grpc-Timeout", "1m")
	wantRESTDetails(t, "REST Login under 1 ms", r, http.StatusGatewayTimeout, reason.DeadlineExceeded)
	// Without the deadline it succeeds.
	wantCode(t, e.do(t, http.MethodPost, "/v1/accounts:login", `{"username":"late","password":"password1"}`), http.StatusOK)
}

// TestLoadRejectionDetails checks the reasons and retry hints of the rate
// limits, the concurrency limit and the database gate on both transports.
func TestLoadRejectionDetails(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, e *testEnv, ctx context.Context, code codes.Code, httpCode int, want string, header ...string) {
		t.Helper()
		var md metadata.MD
		_, err := e.account.GetAccount(ctx, &shebav1.GetAccountRequest{AccountId: unknownID}, grpc.Header(&md))
		wantGRPCDetails(t, "gRPC", err, md, code, want)
		wantRESTDetails(t, "REST", e.do(t, http.MethodGet, "/v1/accounts/"+unknownID, "", header...), httpCode, want)
	}
	t.Run("global rate", func(t *testing.T) {
		t.Parallel()
		e := newTestEnv(t, func(c *config.Config) { c.Limits.Rate, c.Limits.Burst = 0.01, 1 })
		wantCode(t, e.do(t, http.MethodGet, "/v1/accounts/"+unknownID, ""), http.StatusNotFound)
		check(t, e, t.Context(), codes.ResourceExhausted, 429, reason.RateLimited)
	})
	t.Run("per-key rate", func(t *testing.T) {
		t.Parallel()
		e := newTestEnv(t, func(c *config.Config) { c.Limits.PerKeyRate, c.Limits.PerKeyBurst = 0.01, 1 })
		wantCode(t, e.do(t, http.MethodGet, "/v1/accounts/"+unknownID, ""), http.StatusNotFound)
		check(t, e, t.Context(), codes.ResourceExhausted, 429, reason.KeyRateLimited)
	})
	t.Run("in flight", func(t *testing.T) {
		t.Parallel()
		hold := make(chan struct{})
		var held sync.WaitGroup
		held.Add(1)
		e := newTestEnvWith(t, nil, []app.Option{actionHook(hold, &held)}, func(c *config.Config) { c.Limits.MaxInflight = 1 })
		done := make(chan struct{})
		go func() {
			defer close(done)
			ctx := metadata.AppendToOutgoingContext(t.Context(), "x-request-id", "action-hold")
			_, _ = e.ping.Ping(ctx, &shebav1.PingRequest{})
		}()
		held.Wait()
		check(t, e, t.Context(), codes.ResourceExhausted, 429, reason.Overloaded)
		close(hold)
		<-done
	})
	t.Run("database down", func(t *testing.T) {
		t.Parallel()
		e := startTestEnv(t, envSetup{
			opts:    []app.Option{app.WithHealthInterval(100 * time.Millisecond)},
			poolURL: func(string) string { return storetest.UnreachableURL(t) },
		})
		waitFor(t, 10*time.Second, "not ready", func() bool { return e.readiness(t).notReady() })
		check(t, e, t.Context(), codes.Unavailable, 503, reason.DatabaseUnavailable)
		// Input is validated before the database is needed: an invalid
		// request is 400 while it is down.
		_, err := e.account.GetAccount(t.Context(), &shebav1.GetAccountRequest{AccountId: "nope"})
		wantGRPCError(t, err, codes.InvalidArgument, "account_id")
		wantRESTError(t, e.do(t, http.MethodGet, "/v1/accounts/nope", ""), http.StatusBadRequest, codes.InvalidArgument, "account_id")
	})
}

// TestGatewayErrorDetails checks the errors the REST gateway makes before
// any method runs, in JSON and CBOR, with request text that is not UTF-8
// among them: every one is answerable and carries its ErrorInfo.
func TestGatewayErrorDetails(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(c *config.Config) { c.HTTP.MaxBodyBytes = 1024 })
	var gz bytes.Buffer
	gz.WriteString("\x1f\x8b\x08\x00 not really gzip")
	for _, test := range []struct {
		name, method, path, body string
		header                   []string
		httpCode                 int
		reason                   string
	}{
		{"unknown path", http.MethodGet, "/v1/nothing%ff", "", nil, 404, reason.RouteNotFound},
		{"wrong method, path not UTF-8", http.MethodDelete, "/v1/accounts/%ff/subscription", "", nil, 405, reason.MethodNotAllowed},
		{"content type", http.MethodPost, "/v1/accounts", `{}`, []string{"Content-Type", "text/\xff"}, 415, reason.UnsupportedMediaType},
		{"content encoding", http.MethodPost, "/v1/accounts", `{}`, []string{"Content-Encoding", "br\xff"}, 415, reason.UnsupportedContentEncoding},
		{"body too large", http.MethodPost, "/v1/accounts", `{"username":"` + strings.Repeat("u", 2000) + `"}`, nil, 413, reason.BodyTooLarge},
		{"corrupt gzip", http.MethodPost, "/v1/accounts", gz.String(), []string{"Content-Encoding", "gzip"}, 400, reason.MalformedBody},
		{"JSON not UTF-8", http.MethodPost, "/v1/accounts", "{\"username\":\"\xff\"}", nil, 400, reason.MalformedBody},
		{"JSON garbage", http.MethodPost, "/v1/accounts", "{\"username\": x\xff}", nil, 400, reason.MalformedBody},
		{"unknown field", http.MethodPost, "/v1/accounts", `{"extra":1}`, nil, 400, reason.MalformedBody},
		{"CBOR text not UTF-8", http.MethodPost, "/v1/accounts", "\xa1\x68username\x61\xff", []string{"Content-Type", "application/cbor"}, 400, reason.MalformedBody},
		{"query parameter not UTF-8", http.MethodGet, "/v1/subscriptions?page_size=%ff", "", nil, 400, reason.InvalidArgument},
		{"plan not UTF-8", http.MethodGet, "/v1/subscriptions?plan=%ff", "", nil, 400, reason.InvalidArgument},
		{"Grpc-Timeout not UTF-8", http.MethodGet, "/v1/ping", "", []string{"Grpc-Timeout", "\xff"}, 400, reason.InvalidArgument},
	} {
		t.Run(test.name, func(t *testing.T) {
			for _, accept := range []string{"application/json", "application/cbor"} {
				h := append([]string{"Accept", accept}, test.header...)
				r := e.do(t, test.method, test.path, test.body, h...)
				wantRESTDetails(t, accept, r, test.httpCode, test.reason)
			}
		})
	}
}

// cborStatus decodes a google.rpc.Status from a CBOR error body.
func cborStatus(body []byte) (*status.Status, error) {
	var st spb.Status
	if err := (&cborpb.Marshaler{}).Unmarshal(body, &st); err != nil {
		return nil, err
	}
	return status.FromProto(&st), nil
}
