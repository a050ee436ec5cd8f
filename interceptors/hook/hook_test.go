package hook

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sony/gobreaker/v2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/callinfo"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// clientFunc is a Client that answers with its function.
type clientFunc func(context.Context, *Call) (Decision, error)

func (f clientFunc) Check(ctx context.Context, c *Call) (Decision, error) { return f(ctx, c) }
func (clientFunc) Close() error                                           { return nil }

// answering returns a Client that answers d to every call, counting them.
func answering(d Decision, calls *atomic.Int32) Client {
	return clientFunc(func(context.Context, *Call) (Decision, error) {
		calls.Add(1)
		return d, nil
	})
}

const createSubscription = "/sheba.v1.SubscriptionService/CreateSubscription"

var info = &grpc.UnaryServerInfo{FullMethod: createSubscription}

// handled is the handler of the direct calls: it records the request it
// ran with.
type handled struct {
	runs int
	req  any
}

func (h *handled) handler(_ context.Context, req any) (any, error) {
	h.runs++
	h.req = req
	return &shebav1.CreateSubscriptionResponse{}, nil
}

// callCtx is the context of a call by caller with request id "req-1";
// with web, a REST call.
func callCtx(caller string, web *callinfo.HTTP) (context.Context, *callinfo.Info) {
	ci := &callinfo.Info{RequestID: "req-1"}
	ctx := callinfo.NewContext(context.Background(), ci)
	ci.CallerID = caller
	if web != nil {
		ctx, _ = callinfo.WithHTTP(ctx, *web)
	}
	return ctx, ci
}

// restCtx is callCtx over REST, and the HTTP the chain adds to.
func restCtx(caller string, web callinfo.HTTP) (context.Context, *callinfo.HTTP) {
	ctx, _ := callCtx(caller, nil)
	return callinfo.WithHTTP(ctx, web)
}

func subscriptionReq(plan string) *shebav1.CreateSubscriptionRequest {
	return &shebav1.CreateSubscriptionRequest{AccountId: "00000000-0000-4000-8000-000000000001", Plan: plan}
}

func TestBreak(t *testing.T) {
	for _, test := range []struct {
		status   int
		code     codes.Code
		msg, why string
		wantMsg  string
	}{
		{status: 400, code: codes.InvalidArgument, wantMsg: defaultDenial},
		{status: 401, code: codes.Unauthenticated, wantMsg: defaultDenial},
		{status: 403, code: codes.PermissionDenied, msg: "plans are closed in this region", why: "REGION_CLOSED", wantMsg: "plans are closed in this region"},
		{status: 404, code: codes.NotFound, wantMsg: defaultDenial},
		{status: 409, code: codes.Aborted, wantMsg: defaultDenial},
		{status: 429, code: codes.ResourceExhausted, wantMsg: defaultDenial},
		{status: 418, code: codes.FailedPrecondition, wantMsg: defaultDenial},
		{status: 422, code: codes.FailedPrecondition, why: "UNPROCESSABLE", wantMsg: defaultDenial},
		{status: 500, code: codes.Unavailable, wantMsg: defaultDenial},
		{status: 503, code: codes.Unavailable, msg: "later", wantMsg: "later"},
	} {
		t.Run(http.StatusText(test.status), func(t *testing.T) {
			var calls atomic.Int32
			m := NewMetrics()
			intercept := UnaryServerInterceptor(answering(Decision{Break: test.status, Message: test.msg, Reason: test.why}, &calls), WithMetrics(m))
			ctx, ci := callCtx("billing", nil)
			var h handled
			_, err := intercept(ctx, subscriptionReq("pro"), info, h.handler)
			if h.runs != 0 {
				t.Errorf("handler ran %d times, want 0", h.runs)
			}
			st := status.Convert(err)
			if st.Code() != test.code || st.Message() != test.wantMsg {
				t.Errorf("got %v %q, want %v %q", st.Code(), st.Message(), test.code, test.wantMsg)
			}
			var infos []*errdetails.ErrorInfo
			for _, d := range st.Details() {
				if ei, ok := d.(*errdetails.ErrorInfo); ok {
					infos = append(infos, ei)
				}
			}
			var wantMD map[string]string
			if test.why != "" {
				wantMD = map[string]string{reason.HookReasonKey: test.why}
			}
			if len(infos) != 1 || infos[0].GetReason() != reason.HookDenied || !cmp.Equal(infos[0].GetMetadata(), wantMD, cmpopts.EquateEmpty()) {
				t.Errorf("got ErrorInfo %v, want one of reason %s with metadata %v", infos, reason.HookDenied, wantMD)
			}
			if se, ok := err.(*reason.StatusError); !ok || se.HTTPStatus() != test.status {
				t.Errorf("got REST status %v, want %d", err, test.status)
			}
			if ci.Hook != ResultBreak {
				t.Errorf("got outcome %q, want %q", ci.Hook, ResultBreak)
			}
			if got := testutil.ToFloat64(m.byResult[ResultBreak]); got != 1 {
				t.Errorf("got %v breaks counted, want 1", got)
			}
		})
	}
}

func TestFailureModes(t *testing.T) {
	failing := clientFunc(func(context.Context, *Call) (Decision, error) {
		return Decision{}, errors.New("hook answered status 500")
	})
	for _, test := range []struct {
		name     string
		open     bool
		wantRuns int
		wantCode codes.Code
	}{
		{name: "closed", wantCode: codes.Unavailable},
		{name: "open", open: true, wantRuns: 1, wantCode: codes.OK},
	} {
		t.Run(test.name, func(t *testing.T) {
			m := NewMetrics()
			intercept := UnaryServerInterceptor(failing, WithFailOpen(test.open), WithMetrics(m))
			ctx, ci := callCtx("billing", nil)
			var h handled
			_, err := intercept(ctx, subscriptionReq("pro"), info, h.handler)
			if h.runs != test.wantRuns || status.Code(err) != test.wantCode {
				t.Errorf("got %d runs and %v, want %d and %v", h.runs, status.Code(err), test.wantRuns, test.wantCode)
			}
			if test.wantCode != codes.OK {
				if se, ok := err.(*reason.StatusError); !ok || se.Reason() != reason.HookUnavailable {
					t.Errorf("got %v, want reason %s", err, reason.HookUnavailable)
				}
			}
			if ci.Hook != ResultError || ci.HookError != "hook answered status 500" {
				t.Errorf("got outcome %q (%q), want %q with the client's error", ci.Hook, ci.HookError, ResultError)
			}
			if got := testutil.ToFloat64(m.byResult[ResultError]); got != 1 {
				t.Errorf("got %v errors counted, want 1", got)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	slow := clientFunc(func(ctx context.Context, _ *Call) (Decision, error) {
		<-ctx.Done()
		return Decision{}, ctx.Err()
	})
	t.Run("hook.timeout is a failure", func(t *testing.T) {
		intercept := UnaryServerInterceptor(slow, WithTimeout(20*time.Millisecond))
		ctx, _ := callCtx("", nil)
		var h handled
		if _, err := intercept(ctx, subscriptionReq("pro"), info, h.handler); status.Code(err) != codes.Unavailable {
			t.Errorf("got %v, want Unavailable", err)
		}
	})
	t.Run("the call's deadline is no failure of the hook", func(t *testing.T) {
		var calls atomic.Int32
		working := false
		client := clientFunc(func(ctx context.Context, c *Call) (Decision, error) {
			calls.Add(1)
			if working {
				return Decision{}, nil
			}
			return slow(ctx, c)
		})
		intercept := UnaryServerInterceptor(client, WithTimeout(time.Minute), WithBreaker(2, time.Minute))
		for range 4 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
			ctx = callinfo.NewContext(ctx, &callinfo.Info{RequestID: "req"})
			var h handled
			_, err := intercept(ctx, subscriptionReq("pro"), info, h.handler)
			cancel()
			if status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("got %v, want DeadlineExceeded", err)
			}
		}
		// Four expired calls opened no breaker: the hook is asked.
		working = true
		ctx, _ := callCtx("", nil)
		var h handled
		if _, err := intercept(ctx, subscriptionReq("pro"), info, h.handler); err != nil || calls.Load() != 5 {
			t.Errorf("got %v after %d hook calls, want the 5th call to reach the hook", err, calls.Load())
		}
	})
}

// TestTrialOnItsOwn opens the breaker, then lets a call whose deadline is
// shorter than the hook's answer take the half-open breaker's trial: the
// call ends at its deadline, but its hook call goes on to the hook's own
// end, which decides the breaker: an answer closes it, and the next call
// reaches the hook; a failure, or hook.timeout, opens it again. (A trial
// cut with its caller used to decide nothing, so that callers with short
// deadlines kept the breaker half-open, every other call skipped, for as
// long as they came.)
func TestTrialOnItsOwn(t *testing.T) {
	const hookTimeout = 300 * time.Millisecond
	for _, test := range []struct {
		name string
		// answer ends the trial: a decision (nil), a failure, or none
		// (hook.timeout).
		answer    error
		never     bool
		wantState gobreaker.State
	}{
		{"the hook answers", nil, false, gobreaker.StateClosed},
		{"the hook fails", errors.New("hook answered status 500"), false, gobreaker.StateOpen},
		{"the hook is slower than hook.timeout", nil, true, gobreaker.StateOpen},
	} {
		t.Run(test.name, func(t *testing.T) {
			var calls atomic.Int32
			var failing atomic.Bool
			failing.Store(true)
			release := make(chan error)
			client := clientFunc(func(ctx context.Context, _ *Call) (Decision, error) {
				calls.Add(1)
				if failing.Load() {
					return Decision{}, errors.New("connection refused")
				}
				select {
				case err := <-release:
					return Decision{Break: http.StatusForbidden}, err
				case <-ctx.Done():
					return Decision{}, ctx.Err()
				}
			})
			h := newInterceptor(client, WithTimeout(hookTimeout), WithBreaker(2, 20*time.Millisecond))
			call := func(ctx context.Context) (string, error) {
				ci := &callinfo.Info{RequestID: "req"}
				var hd handled
				_, err := h.intercept(callinfo.NewContext(ctx, ci), subscriptionReq("pro"), info, hd.handler)
				return ci.Hook, err
			}
			for range 2 {
				call(t.Context())
			}
			if s := h.breaker.State(); s != gobreaker.StateOpen {
				t.Fatalf("breaker %v after 2 failures, want open", s)
			}
			failing.Store(false)
			time.Sleep(30 * time.Millisecond)

			short, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
			defer cancel()
			if result, err := call(short); status.Code(err) != codes.DeadlineExceeded || result != ResultError {
				t.Fatalf("the short call: got %v (%s), want DeadlineExceeded (%s)", err, result, ResultError)
			}
			if !test.never {
				select {
				case release <- test.answer:
				case <-time.After(5 * time.Second):
					t.Fatal("the trial call ended with its caller: nothing to answer 5s later")
				}
			}
			for deadline := time.Now().Add(5 * time.Second); h.breaker.State() == gobreaker.StateHalfOpen; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("breaker still half-open 5s after the trial began")
				}
			}
			if s := h.breaker.State(); s != test.wantState {
				t.Fatalf("breaker %v after the trial, want %v", s, test.wantState)
			}
			if test.wantState != gobreaker.StateClosed {
				return
			}
			before := calls.Load()
			go func() { release <- nil }()
			if _, err := call(t.Context()); status.Code(err) != codes.PermissionDenied || calls.Load() != before+1 {
				t.Errorf("the next call: got %v after %d hook calls, want the hook's break (403) from its own call", err, calls.Load()-before)
			}
		})
	}
}

func TestBreaker(t *testing.T) {
	var calls atomic.Int32
	var failing atomic.Bool
	failing.Store(true)
	client := clientFunc(func(context.Context, *Call) (Decision, error) {
		calls.Add(1)
		if failing.Load() {
			return Decision{}, errors.New("connection refused")
		}
		return Decision{}, nil
	})
	m := NewMetrics()
	intercept := UnaryServerInterceptor(client, WithBreaker(3, 50*time.Millisecond), WithMetrics(m))
	call := func() (string, error) {
		ctx, ci := callCtx("billing", nil)
		var h handled
		_, err := intercept(ctx, subscriptionReq("pro"), info, h.handler)
		return ci.Hook, err
	}
	for range 3 {
		if result, _ := call(); result != ResultError {
			t.Fatalf("got %q, want %q", result, ResultError)
		}
	}
	// Open: the hook is left alone, the failure mode answers.
	for range 5 {
		result, err := call()
		if result != ResultSkipped || status.Code(err) != codes.Unavailable {
			t.Fatalf("got %q %v, want %q and Unavailable", result, err, ResultSkipped)
		}
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("the hook got %d calls, want 3: none while the breaker is open", n)
	}
	failing.Store(false)
	time.Sleep(100 * time.Millisecond)
	// Half open, then closed by the call that succeeds.
	for range 3 {
		if result, err := call(); result != ResultContinue || err != nil {
			t.Fatalf("got %q %v, want %q", result, err, ResultContinue)
		}
	}
	if got := testutil.ToFloat64(m.byResult[ResultSkipped]); got != 5 {
		t.Errorf("got %v skipped, want 5", got)
	}
}

func TestCache(t *testing.T) {
	var calls atomic.Int32
	now := time.Unix(1e9, 0)
	clock := func(o *options) { o.now = func() time.Time { return now } }
	m := NewMetrics()
	intercept := UnaryServerInterceptor(answering(Decision{CacheFor: 30 * time.Second, ResponseHeaders: map[string][]string{"x-rule": {"a"}}}, &calls),
		WithCache(10), WithHeaders("x-tenant"), WithMetrics(m), clock)
	call := func(caller, plan, tenant string) string {
		t.Helper()
		ctx, ci := callCtx(caller, nil)
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("x-tenant", tenant))
		var h handled
		if _, err := intercept(ctx, subscriptionReq(plan), info, h.handler); err != nil || h.runs != 1 {
			t.Fatalf("got %v after %d runs, want the handler to run", err, h.runs)
		}
		return ci.Hook
	}
	for _, step := range []struct {
		name                 string
		caller, plan, tenant string
		advance              time.Duration
		want                 string
	}{
		{name: "first", caller: "billing", plan: "pro", tenant: "a", want: ResultContinue},
		{name: "same request", caller: "billing", plan: "pro", tenant: "a", want: ResultCached},
		{name: "another body", caller: "billing", plan: "basic", tenant: "a", want: ResultContinue},
		{name: "another caller", caller: "ops", plan: "pro", tenant: "a", want: ResultContinue},
		{name: "another header", caller: "billing", plan: "pro", tenant: "b", want: ResultContinue},
		{name: "same again", caller: "billing", plan: "pro", tenant: "a", advance: 29 * time.Second, want: ResultCached},
		{name: "expired", caller: "billing", plan: "pro", tenant: "a", advance: 2 * time.Second, want: ResultContinue},
	} {
		now = now.Add(step.advance)
		if got := call(step.caller, step.plan, step.tenant); got != step.want {
			t.Errorf("%s: got %q, want %q", step.name, got, step.want)
		}
	}
	if n := calls.Load(); n != 5 {
		t.Errorf("the hook got %d calls, want 5", n)
	}
	if got := testutil.ToFloat64(m.byResult[ResultCached]); got != 2 {
		t.Errorf("got %v cached, want 2", got)
	}
}

func TestCacheHoldsNoReplacement(t *testing.T) {
	var calls atomic.Int32
	intercept := UnaryServerInterceptor(answering(Decision{CacheFor: time.Minute, Body: []byte(`{"accountId":"00000000-0000-4000-8000-000000000001","plan":"trial"}`)}, &calls),
		WithCache(10), WithValidator(func(context.Context, proto.Message) error { return nil }))
	for range 2 {
		ctx, _ := callCtx("billing", nil)
		var h handled
		if _, err := intercept(ctx, subscriptionReq("pro"), info, h.handler); err != nil {
			t.Fatal(err)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the hook got %d calls, want 2: a decision with a body is not cached", n)
	}
}

func TestReplacement(t *testing.T) {
	valid := func(_ context.Context, m proto.Message) error {
		if m.(*shebav1.CreateSubscriptionRequest).GetPlan() == "BAD" {
			return reason.Error(codes.InvalidArgument, reason.InvalidArgument, "invalid plan")
		}
		return nil
	}
	for _, test := range []struct {
		name     string
		body     string
		validate func(context.Context, proto.Message) error
		wantPlan string // "": the hook failed
	}{
		{name: "valid", body: `{"accountId":"00000000-0000-4000-8000-000000000001","plan":"trial"}`, validate: valid, wantPlan: "trial"},
		{name: "refused by the validator", body: `{"accountId":"00000000-0000-4000-8000-000000000001","plan":"BAD"}`, validate: valid},
		{name: "unknown field", body: `{"plan":"trial","tier":1}`, validate: valid},
		{name: "not a message", body: `[1]`, validate: valid},
		{name: "no validator", body: `{"plan":"trial"}`},
	} {
		t.Run(test.name, func(t *testing.T) {
			var calls atomic.Int32
			intercept := UnaryServerInterceptor(answering(Decision{Body: []byte(test.body)}, &calls), WithValidator(test.validate))
			ctx, ci := callCtx("billing", nil)
			var h handled
			_, err := intercept(ctx, subscriptionReq("pro"), info, h.handler)
			if test.wantPlan == "" {
				if status.Code(err) != codes.Unavailable || h.runs != 0 || ci.Hook != ResultError {
					t.Errorf("got %v, %d runs, outcome %q; want Unavailable, no run, %q", err, h.runs, ci.Hook, ResultError)
				}
				return
			}
			if err != nil || h.runs != 1 {
				t.Fatalf("got %v after %d runs, want the handler to run", err, h.runs)
			}
			if got := h.req.(*shebav1.CreateSubscriptionRequest).GetPlan(); got != test.wantPlan {
				t.Errorf("handler got plan %q, want %q", got, test.wantPlan)
			}
		})
	}
}

func TestMethods(t *testing.T) {
	var calls atomic.Int32
	m := NewMetrics()
	intercept := UnaryServerInterceptor(answering(Decision{Break: 403}, &calls), WithMethods("/sheba.v1.AccountService/Login"), WithMetrics(m))
	ctx, ci := callCtx("billing", nil)
	var h handled
	if _, err := intercept(ctx, subscriptionReq("pro"), info, h.handler); err != nil || h.runs != 1 {
		t.Errorf("got %v after %d runs, want the handler to run", err, h.runs)
	}
	if calls.Load() != 0 || ci.Hook != "" {
		t.Errorf("the hook got %d calls (outcome %q), want none for a method it does not see", calls.Load(), ci.Hook)
	}
	if got := testutil.CollectAndCount(m, "sheba_hook_requests_total"); got != len(results) {
		t.Errorf("got %d series, want %d", got, len(results))
	}
}

func TestCallOverREST(t *testing.T) {
	var got *Call
	client := clientFunc(func(_ context.Context, c *Call) (Decision, error) {
		got = c
		return Decision{ResponseHeaders: map[string][]string{
			"x-plan-rule": {"trial"}, "content-type": {"text/plain"}, "x-bad": {"a\nb"}, "grpc-status": {"0"},
			"x y": {"1"}, "ratelimit": {"limit=1"}, "access-control-allow-origin": {"*"}, "connect-content-encoding": {"gzip"},
		}}, nil
	})
	intercept := UnaryServerInterceptor(client,
		WithHeaders("User-Agent", "x-api-key", "Authorization", "grpc-metadata-x-api-key", "x-tenant"), WithSendBody(false))
	ctx, web := restCtx("billing", callinfo.HTTP{
		Method: http.MethodPost, Target: "/v1/accounts/1/subscription?x=1", Host: "api.example",
		Header: http.Header{
			"User-Agent": {"curl/8.5.0"}, "X-Api-Key": {"secret"}, "Authorization": {"Bearer secret"},
			"Grpc-Metadata-X-Api-Key": {"secret"}, "Accept": {"*/*"},
		},
	})
	var h handled
	if _, err := intercept(ctx, subscriptionReq("pro"), info, h.handler); err != nil {
		t.Fatal(err)
	}
	want := &Call{
		ID: "req-1", Transport: TransportREST, Method: createSubscription, CallerID: "billing",
		HTTPMethod: http.MethodPost, Path: "/v1/accounts/1/subscription?x=1", Authority: "api.example",
		Headers: map[string][]string{"user-agent": {"curl/8.5.0"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("call mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(http.Header{"X-Plan-Rule": {"trial"}}, web.ResponseHeader); diff != "" {
		t.Errorf("answer headers mismatch (-want +got):\n%s", diff)
	}
}

func TestCallOverGRPC(t *testing.T) {
	var got *Call
	client := clientFunc(func(_ context.Context, c *Call) (Decision, error) {
		got = c
		return Decision{}, nil
	})
	intercept := UnaryServerInterceptor(client, WithHeaders("user-agent", "authorization"))
	ctx, _ := callCtx("", nil)
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(":authority", "127.0.0.1:9090", "user-agent", "grpc-go", "authorization", "Bearer k"))
	req := subscriptionReq("pro")
	var h handled
	if _, err := intercept(ctx, req, info, h.handler); err != nil {
		t.Fatal(err)
	}
	want := &Call{
		ID: "req-1", Transport: TransportGRPC, Method: createSubscription,
		HTTPMethod: http.MethodPost, Path: createSubscription, Authority: "127.0.0.1:9090",
		Headers: map[string][]string{"user-agent": {"grpc-go"}}, Body: req,
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(proto.Equal)); diff != "" {
		t.Errorf("call mismatch (-want +got):\n%s", diff)
	}
}

func TestBreakRetryAfter(t *testing.T) {
	var calls atomic.Int32
	intercept := UnaryServerInterceptor(answering(Decision{Break: 429, ResponseHeaders: map[string][]string{"retry-after": {"30"}, "x-rule": {"quota"}}}, &calls))
	ctx, web := restCtx("billing", callinfo.HTTP{Method: http.MethodPost, Header: http.Header{}})
	ci := callinfo.FromContext(ctx)
	var h handled
	if _, err := intercept(ctx, subscriptionReq("pro"), info, h.handler); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("got %v, want ResourceExhausted", err)
	}
	if ci.RetryAfter != 30*time.Second {
		t.Errorf("got retry hint %v, want the hook's 30s", ci.RetryAfter)
	}
	// sheba writes Retry-After itself, from the hint: once.
	if diff := cmp.Diff(http.Header{"X-Rule": {"quota"}}, web.ResponseHeader); diff != "" {
		t.Errorf("answer headers mismatch (-want +got):\n%s", diff)
	}
}

func TestBreakMessageBounded(t *testing.T) {
	var calls atomic.Int32
	long := strings.Repeat("m", 1<<20)
	intercept := UnaryServerInterceptor(answering(Decision{Break: 403, Message: long, Reason: long, CacheFor: time.Minute}, &calls), WithCache(10))
	for range 2 {
		ctx, _ := callCtx("billing", nil)
		var h handled
		_, err := intercept(ctx, subscriptionReq("pro"), info, h.handler)
		st := status.Convert(err)
		if len(st.Message()) > reason.MaxQuoted+len("…") {
			t.Fatalf("got a message of %d bytes, want at most %d", len(st.Message()), reason.MaxQuoted)
		}
		if got := errorInfo(st).GetMetadata()[reason.HookReasonKey]; len(got) > reason.MaxQuoted+len("…") {
			t.Fatalf("got a reason of %d bytes, want at most %d", len(got), reason.MaxQuoted)
		}
	}
	if calls.Load() != 1 {
		t.Errorf("the hook got %d calls, want 1: the break is cached, bounded", calls.Load())
	}
}

func errorInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	return nil
}
