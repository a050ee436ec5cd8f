package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/e2e/shebaproc"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// hookServer is a real local hook of the http protocol: it keeps what
// sheba sends it and answers what its answer function says.
type hookServer struct {
	url string

	mu     sync.Mutex
	got    []map[string]any
	raw    []string
	traces []string // the traceparent of each call
	answer func(call map[string]any) (status int, body string)
}

// startHookServer serves a hook on network "tcp" (127.0.0.1) or "unix" (a
// socket in a fresh folder) that answers continue until told otherwise.
func startHookServer(t *testing.T, network string) *hookServer {
	t.Helper()
	h := &hookServer{answer: func(map[string]any) (int, string) { return 200, `{"control":"continue"}` }}
	var lis net.Listener
	var err error
	switch network {
	case "unix":
		// A short folder: a socket's path has at most 107 bytes.
		dir, derr := os.MkdirTemp("", "hook")
		if derr != nil {
			t.Fatal(derr)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		path := filepath.Join(dir, "hook.sock")
		lis, err = net.Listen("unix", path)
		h.url = "unix://" + path
	default:
		lis, err = net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			h.url = "http://" + lis.Addr().String() + "/check"
		}
	}
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var call map[string]any
		_ = json.Unmarshal(b, &call)
		h.mu.Lock()
		h.got = append(h.got, call)
		h.raw = append(h.raw, string(b))
		h.traces = append(h.traces, r.Header.Get("Traceparent"))
		answer := h.answer
		h.mu.Unlock()
		code, body := answer(call)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, body)
	})}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
	return h
}

// answering makes the hook answer body with 200 from now on.
func (h *hookServer) answering(body string) {
	h.answerWith(func(map[string]any) (int, string) { return 200, body })
}

func (h *hookServer) answerWith(f func(map[string]any) (int, string)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.answer = f
}

// calls returns what the hook was sent so far, and forgets it.
func (h *hookServer) calls() ([]map[string]any, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	got, raw := h.got, h.raw
	h.got, h.raw = nil, nil
	return got, raw
}

// withHook configures the http hook at url, with the given changes.
func withHook(url string, more ...func(*config.Hook)) func(*config.Config) {
	return func(c *config.Config) {
		c.Hook.URL = url
		for _, m := range more {
			m(&c.Hook)
		}
	}
}

// hookCall is one call made on either transport.
type hookCall struct {
	code    codes.Code // gRPC code, or the REST status's Status code
	http    int        // REST status; 0 on gRPC
	header  func(name string) []string
	st      *status.Status
	subPlan string // the plan of the subscription answered, if any
}

// subscribeREST creates a subscription over REST, with header pairs.
func (e *testEnv) subscribeREST(t *testing.T, accountID, plan string, header ...string) hookCall {
	t.Helper()
	r := e.do(t, http.MethodPost, subscribePath(accountID), `{"plan":"`+plan+`"}`, header...)
	c := hookCall{http: r.Code, header: func(n string) []string { return r.Header.Values(n) }}
	if r.Code == http.StatusOK {
		c.subPlan, _ = r.JSON(t)["plan"].(string)
		return c
	}
	st := r.Status(t)
	c.st = status.FromProto(st)
	c.code = c.st.Code()
	return c
}

// subscribeGRPC creates a subscription over gRPC, with metadata pairs.
func (e *testEnv) subscribeGRPC(t *testing.T, accountID, plan string, md ...string) hookCall {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(t.Context(), md...)
	var header metadata.MD
	resp, err := e.sub.CreateSubscription(ctx, &shebav1.CreateSubscriptionRequest{AccountId: accountID, Plan: plan}, grpc.Header(&header))
	c := hookCall{code: status.Code(err), st: status.Convert(err), header: func(n string) []string { return header.Get(n) }}
	c.subPlan = resp.GetSubscription().GetPlan()
	return c
}

// transports runs f for each transport, on accounts of its own.
func transports(t *testing.T, e *testEnv, f func(t *testing.T, subscribe func(t *testing.T, accountID, plan string, header ...string) hookCall, rest bool)) {
	t.Run("rest", func(t *testing.T) { f(t, e.subscribeREST, true) })
	t.Run("grpc", func(t *testing.T) { f(t, e.subscribeGRPC, false) })
}

var accountSeq struct {
	sync.Mutex
	n int
}

// freshAccount inserts an account of a name no other test uses.
func (e *testEnv) freshAccount(t *testing.T) string {
	t.Helper()
	accountSeq.Lock()
	accountSeq.n++
	n := accountSeq.n
	accountSeq.Unlock()
	return e.insertAccount(t, fmt.Sprintf("hook-user-%d", n))
}

// TestHookNeverSeesInvalidRequests checks that a request that breaks the
// constraints of its proto is answered 400 by the chain's validation link,
// before the hook, which is never asked about it, on either transport.
func TestHookNeverSeesInvalidRequests(t *testing.T) {
	t.Parallel()
	hook := startHookServer(t, "tcp")
	e := newTestEnv(t, withHook(hook.url))
	transports(t, e, func(t *testing.T, subscribe func(*testing.T, string, string, ...string) hookCall, rest bool) {
		id := e.freshAccount(t)
		hook.calls()
		c := subscribe(t, id, "Not A Plan")
		if c.code != codes.InvalidArgument || !hasViolation(c.st, "plan") {
			t.Errorf("got %v %q, want InvalidArgument with a violation of plan", c.code, c.st.Message())
		}
		if got, _ := hook.calls(); len(got) != 0 {
			t.Errorf("the hook was asked %d times about an invalid request, want never", len(got))
		}
	})
}

func TestHookSees(t *testing.T) {
	t.Parallel()
	hook := startHookServer(t, "tcp")
	e := newTestEnv(t, withHook(hook.url, func(h *config.Hook) { h.Headers = []string{"user-agent", "x-tenant"} }))
	transports(t, e, func(t *testing.T, subscribe func(*testing.T, string, string, ...string) hookCall, rest bool) {
		id := e.freshAccount(t)
		hook.calls()
		c := subscribe(t, id, "pro", "x-tenant", "acme", "x-request-id", "req-"+fmt.Sprint(rest), "user-agent", "ua-test")
		if c.subPlan != "pro" {
			t.Fatalf("got %v %v, want the subscription created", c.code, c.st.Message())
		}
		got, raw := hook.calls()
		if len(got) != 1 {
			t.Fatalf("the hook got %d calls, want 1", len(got))
		}
		transport := "grpc"
		if rest {
			transport = "rest"
		}
		want := map[string]any{
			"version": 1.0, "stage": "request", "id": "req-" + fmt.Sprint(rest), "transport": transport,
			"method":  "/sheba.v1.SubscriptionService/CreateSubscription",
			"caller":  map[string]any{"apiKeyId": testKeyID},
			"headers": map[string]any{"user-agent": []any{"ua-test"}, "x-tenant": []any{"acme"}},
			"body":    map[string]any{"accountId": id, "plan": "pro"},
		}
		if !rest {
			// grpc-go sends its own user-agent (grpc.WithUserAgent
			// prefixes it), whatever the metadata says.
			ua, _ := got[0]["headers"].(map[string]any)["user-agent"].([]any)
			if len(ua) != 1 || !strings.HasPrefix(fmt.Sprint(ua[0]), "grpc-go/") {
				t.Errorf("got user-agent %v, want grpc-go's", ua)
			}
			want["headers"].(map[string]any)["user-agent"] = ua
		}
		if diff := cmp.Diff(want, got[0]); diff != "" {
			t.Errorf("hook request mismatch (-want +got):\n%s", diff)
		}
		if strings.Contains(raw[0], testKey) {
			t.Errorf("the hook was sent the API key: %s", raw[0])
		}
	})
	// A browser call's headers reach the hook as a gRPC call's metadata do.
	t.Run("connect", func(t *testing.T) {
		id := e.freshAccount(t)
		hook.calls()
		a := browserCall[shebav1.CreateSubscriptionRequest, shebav1.CreateSubscriptionResponse](t, e, "connect-json",
			"/sheba.v1.SubscriptionService/CreateSubscription", &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"}, testKey,
			"x-tenant", "acme", "x-request-id", "req-connect")
		if a.st != nil {
			t.Fatalf("CreateSubscription: %v", a.st)
		}
		got, _ := hook.calls()
		if len(got) != 1 {
			t.Fatalf("the hook got %d calls, want 1", len(got))
		}
		want := map[string]any{"id": "req-connect", "x-tenant": []any{"acme"}}
		headers, _ := got[0]["headers"].(map[string]any)
		gotSome := map[string]any{"id": got[0]["id"], "x-tenant": headers["x-tenant"]}
		if diff := cmp.Diff(want, gotSome); diff != "" {
			t.Errorf("hook request mismatch (-want +got):\n%s", diff)
		}
		if ua, _ := headers["user-agent"].([]any); len(ua) != 1 {
			t.Errorf("got user-agent %v, want the client's", headers["user-agent"])
		}
	})
	t.Run("public method without a key", func(t *testing.T) {
		hook.calls()
		r := e.do(t, http.MethodGet, "/v1/ping", "", "X-Api-Key", "")
		wantCode(t, r, http.StatusOK)
		if _, err := shebav1.NewPingServiceClient(e.anon).Ping(t.Context(), &shebav1.PingRequest{}); err != nil {
			t.Fatal(err)
		}
		got, _ := hook.calls()
		if len(got) != 2 {
			t.Fatalf("the hook got %d calls, want 2", len(got))
		}
		for _, c := range got {
			if _, ok := c["caller"]; ok {
				t.Errorf("got caller %v for a call without a key, want none", c["caller"])
			}
			if c["method"] != "/sheba.v1.PingService/Ping" {
				t.Errorf("got method %v", c["method"])
			}
		}
	})
}

func TestHookDecisions(t *testing.T) {
	t.Parallel()
	hook := startHookServer(t, "tcp")
	e := newTestEnv(t, withHook(hook.url))
	for _, test := range []struct {
		name     string
		answer   string
		plan     string
		wantPlan string // the subscription made; "" none
		wantHTTP int
		wantCode codes.Code
		wantMsg  string
		wantWhy  string // ErrorInfo reason
		wantMeta map[string]string
		wantRule string // the x-plan-rule header of the answer
	}{
		{name: "continue", answer: `{"control":"continue"}`, plan: "pro", wantPlan: "pro", wantHTTP: 200},
		{
			name:   "replacement and headers",
			answer: `{"control":"continue","body":{"accountId":"%ID%","plan":"pro-trial"},"responseHeaders":{"x-plan-rule":["trial"]}}`,
			plan:   "pro", wantPlan: "pro-trial", wantHTTP: 200, wantRule: "trial",
		},
		{
			name:   "invalid replacement",
			answer: `{"control":"continue","body":{"accountId":"%ID%","plan":"Not A Plan"}}`,
			plan:   "pro", wantHTTP: 503, wantCode: codes.Unavailable, wantWhy: reason.HookUnavailable, wantMsg: "external hook unavailable",
		},
		{
			// The hook is not asked (TestHookNeverSeesInvalidRequests), so
			// its headers are not added either.
			name:   "invalid request",
			answer: `{"control":"continue","responseHeaders":{"x-plan-rule":["checked"]}}`,
			plan:   "bad plan!", wantHTTP: 400, wantCode: codes.InvalidArgument, wantWhy: reason.InvalidArgument,
		},
		{
			name:   "break",
			answer: `{"control":{"break":403},"message":"plans are closed in this region","reason":"REGION_CLOSED","responseHeaders":{"x-plan-rule":["closed"]}}`,
			plan:   "pro", wantHTTP: 403, wantCode: codes.PermissionDenied, wantWhy: reason.HookDenied, wantMsg: "plans are closed in this region",
			wantMeta: map[string]string{"reason": "REGION_CLOSED"}, wantRule: "closed",
		},
		{name: "break 400", answer: `{"control":{"break":400}}`, plan: "pro", wantHTTP: 400, wantCode: codes.InvalidArgument, wantWhy: reason.HookDenied, wantMsg: "denied by policy"},
		{name: "break 401", answer: `{"control":{"break":401}}`, plan: "pro", wantHTTP: 401, wantCode: codes.Unauthenticated, wantWhy: reason.HookDenied, wantMsg: "denied by policy"},
		{name: "break 404", answer: `{"control":{"break":404}}`, plan: "pro", wantHTTP: 404, wantCode: codes.NotFound, wantWhy: reason.HookDenied, wantMsg: "denied by policy"},
		{name: "break 409", answer: `{"control":{"break":409}}`, plan: "pro", wantHTTP: 409, wantCode: codes.Aborted, wantWhy: reason.HookDenied, wantMsg: "denied by policy"},
		{name: "break 429", answer: `{"control":{"break":429}}`, plan: "pro", wantHTTP: 429, wantCode: codes.ResourceExhausted, wantWhy: reason.HookDenied, wantMsg: "denied by policy"},
		{name: "break 418", answer: `{"control":{"break":418}}`, plan: "pro", wantHTTP: 418, wantCode: codes.FailedPrecondition, wantWhy: reason.HookDenied, wantMsg: "denied by policy"},
		{name: "break 502", answer: `{"control":{"break":502}}`, plan: "pro", wantHTTP: 502, wantCode: codes.Unavailable, wantWhy: reason.HookDenied, wantMsg: "denied by policy"},
	} {
		t.Run(test.name, func(t *testing.T) {
			transports(t, e, func(t *testing.T, subscribe func(*testing.T, string, string, ...string) hookCall, rest bool) {
				id := e.freshAccount(t)
				hook.answering(strings.ReplaceAll(test.answer, "%ID%", id))
				c := subscribe(t, id, test.plan)
				if rest && c.http != test.wantHTTP {
					t.Errorf("got HTTP %d, want %d", c.http, test.wantHTTP)
				}
				if c.code != test.wantCode {
					t.Errorf("got %v %q, want %v", c.code, c.st.Message(), test.wantCode)
				}
				if test.wantMsg != "" && c.st.Message() != test.wantMsg {
					t.Errorf("got message %q, want %q", c.st.Message(), test.wantMsg)
				}
				if test.wantWhy != "" {
					info := errorInfo(t, c.st)
					if info.GetReason() != test.wantWhy || !cmp.Equal(info.GetMetadata(), test.wantMeta, cmpopts.EquateEmpty()) {
						t.Errorf("got ErrorInfo %v, want reason %s, metadata %v", info, test.wantWhy, test.wantMeta)
					}
				}
				if got := strings.Join(c.header("x-plan-rule"), ","); got != test.wantRule {
					t.Errorf("got x-plan-rule %q, want %q", got, test.wantRule)
				}
				if c.subPlan != test.wantPlan {
					t.Errorf("got subscription plan %q, want %q", c.subPlan, test.wantPlan)
				}
				rows := e.count(t, `SELECT count(*) FROM subscriptions WHERE account_id = $1`, id)
				if want := map[bool]int{true: 1, false: 0}[test.wantPlan != ""]; rows != want {
					t.Errorf("got %d subscriptions, want %d: the handler ran when it should not, or not when it should", rows, want)
				}
				if test.wantCode == codes.ResourceExhausted || test.wantCode == codes.Unavailable {
					if len(c.header("retry-after")) == 0 {
						t.Errorf("no retry-after on a %v", test.wantCode)
					}
				}
			})
		})
	}
}

// errorInfo returns the one ErrorInfo of st.
func errorInfo(t *testing.T, st *status.Status) *errdetails.ErrorInfo {
	t.Helper()
	var infos []*errdetails.ErrorInfo
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			infos = append(infos, info)
		}
	}
	if len(infos) != 1 {
		t.Fatalf("got %d ErrorInfo in %v, want 1", len(infos), st.Proto())
	}
	return infos[0]
}

func TestHookFailures(t *testing.T) {
	t.Parallel()
	refused := "http://" + shebaproc.FreeAddr(t) + "/"
	for _, test := range []struct {
		name   string
		answer func(map[string]any) (int, string) // nil: refused connection
	}{
		{name: "refused connection"},
		{name: "slower than hook.timeout", answer: func(map[string]any) (int, string) {
			time.Sleep(time.Second)
			return 200, `{"control":"continue"}`
		}},
		{name: "status 500", answer: func(map[string]any) (int, string) { return 500, `{"control":"continue"}` }},
		{name: "not JSON", answer: func(map[string]any) (int, string) { return 200, `<html>continue</html>` }},
		{name: "not the protocol", answer: func(map[string]any) (int, string) { return 200, `{"control":"go on"}` }},
	} {
		for _, mode := range []string{config.HookFailClosed, config.HookFailOpen} {
			t.Run(test.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				url := refused
				if test.answer != nil {
					hook := startHookServer(t, "tcp")
					hook.answerWith(test.answer)
					url = hook.url
				}
				e := newTestEnv(t, withHook(url, func(h *config.Hook) {
					h.FailureMode, h.Timeout = mode, 100*time.Millisecond
				}))
				transports(t, e, func(t *testing.T, subscribe func(*testing.T, string, string, ...string) hookCall, rest bool) {
					id := e.freshAccount(t)
					c := subscribe(t, id, "pro")
					if mode == config.HookFailOpen {
						if c.subPlan != "pro" {
							t.Errorf("got %v %q, want the call to go on", c.code, c.st.Message())
						}
						return
					}
					if c.code != codes.Unavailable || (rest && c.http != http.StatusServiceUnavailable) {
						t.Fatalf("got %v (HTTP %d) %q, want Unavailable", c.code, c.http, c.st.Message())
					}
					if info := errorInfo(t, c.st); info.GetReason() != reason.HookUnavailable {
						t.Errorf("got reason %s, want %s", info.GetReason(), reason.HookUnavailable)
					}
					if got := c.header("retry-after"); len(got) != 1 || got[0] == "" {
						t.Errorf("got retry-after %q, want one", got)
					}
					if n := e.count(t, `SELECT count(*) FROM subscriptions WHERE account_id = $1`, id); n != 0 {
						t.Errorf("got %d subscriptions, want none", n)
					}
				})
				if !strings.Contains(e.logs.String(), `"hook":"error"`) {
					t.Errorf("no request log line with the hook's outcome: %s", e.logs.String())
				}
			})
		}
	}
}

func TestHookBreaker(t *testing.T) {
	t.Parallel()
	hook := startHookServer(t, "tcp")
	hook.answerWith(func(map[string]any) (int, string) { return 500, "" })
	e := newTestEnv(t, withHook(hook.url))
	ping := func() codes.Code {
		_, err := e.ping.Ping(t.Context(), &shebav1.PingRequest{})
		return status.Code(err)
	}
	for range 10 {
		if got := ping(); got != codes.Unavailable {
			t.Fatalf("got %v, want Unavailable", got)
		}
	}
	got, _ := hook.calls()
	if len(got) != 5 {
		t.Errorf("the hook got %d of 10 calls, want 5: the breaker opens after 5 failures", len(got))
	}
	hook.answering(`{"control":"continue"}`)
	// The breaker tries the hook again 2 s after it opened.
	deadline := time.Now().Add(10 * time.Second)
	for ping() != codes.OK {
		if time.Now().After(deadline) {
			t.Fatal("the breaker did not close within 10 s of the hook working again")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for range 3 {
		if got := ping(); got != codes.OK {
			t.Fatalf("got %v after the breaker closed, want OK", got)
		}
	}
	results := series(e.scrape(t), "sheba_hook_requests_total", "result")
	if results["result=error"] != 5 || results["result=skipped"] < 5 || results["result=continue"] < 4 {
		t.Errorf("got %v, want 5 errors, at least 5 skipped and 4 continued", results)
	}
}

func TestHookCache(t *testing.T) {
	t.Parallel()
	hook := startHookServer(t, "tcp")
	hook.answering(`{"control":"continue","cacheSeconds":60,"responseHeaders":{"x-plan-rule":["cached"]}}`)
	e := newTestEnv(t, withHook(hook.url))
	a, b := e.freshAccount(t), e.freshAccount(t)
	get := func(id string) restResponse {
		r := e.do(t, http.MethodGet, subscribePath(id), "")
		wantCode(t, r, http.StatusNotFound)
		if got := r.Header.Get("X-Plan-Rule"); got != "cached" {
			t.Errorf("got X-Plan-Rule %q, want the decision's header, cached or not", got)
		}
		return r
	}
	get(a)
	get(a)
	if got, _ := hook.calls(); len(got) != 1 {
		t.Errorf("the hook got %d calls for the same request twice, want 1", len(got))
	}
	get(b)
	if got, _ := hook.calls(); len(got) != 1 {
		t.Errorf("the hook got %d calls for another body, want 1", len(got))
	}
	results := series(e.scrape(t), "sheba_hook_requests_total", "result")
	if results["result=cached"] != 1 || results["result=continue"] != 2 {
		t.Errorf("got %v, want 1 cached and 2 continue", results)
	}
}

func TestHookMethods(t *testing.T) {
	t.Parallel()
	hook := startHookServer(t, "tcp")
	hook.answering(`{"control":{"break":403}}`)
	e := newTestEnv(t, withHook(hook.url, func(h *config.Hook) {
		h.Methods = []string{"/sheba.v1.SubscriptionService/CreateSubscription"}
	}))
	if _, err := e.ping.Ping(t.Context(), &shebav1.PingRequest{}); err != nil {
		t.Errorf("Ping: %v, want OK: the hook does not see it", err)
	}
	wantCode(t, e.do(t, http.MethodGet, "/v1/ping", ""), http.StatusOK)
	id := e.freshAccount(t)
	if c := e.subscribeGRPC(t, id, "pro"); c.code != codes.PermissionDenied {
		t.Errorf("CreateSubscription: got %v, want PermissionDenied from the hook", c.code)
	}
	if got, _ := hook.calls(); len(got) != 1 {
		t.Errorf("the hook got %d calls, want 1", len(got))
	}
}

func TestHookUnixSocket(t *testing.T) {
	t.Parallel()
	hook := startHookServer(t, "unix")
	hook.answering(`{"control":"continue","responseHeaders":{"x-plan-rule":["unix"]}}`)
	e := newTestEnv(t, withHook(hook.url))
	transports(t, e, func(t *testing.T, subscribe func(*testing.T, string, string, ...string) hookCall, _ bool) {
		c := subscribe(t, e.freshAccount(t), "pro")
		if c.subPlan != "pro" || strings.Join(c.header("x-plan-rule"), ",") != "unix" {
			t.Errorf("got %v, plan %q, x-plan-rule %q; want the call to pass the hook on the socket", c.code, c.subPlan, c.header("x-plan-rule"))
		}
	})
	if got, _ := hook.calls(); len(got) != 2 {
		t.Errorf("the hook got %d calls, want 2", len(got))
	}
	fams := e.scrape(t)
	if got := series(fams, "sheba_hook_requests_total", "result")["result=continue"]; got != 2 {
		t.Errorf("got %v continue, want 2", got)
	}
	if h := fams["sheba_hook_duration_seconds"]; h == nil || h.GetMetric()[0].GetHistogram().GetSampleCount() != 2 {
		t.Errorf("got sheba_hook_duration_seconds %v, want 2 calls timed", h)
	}
}

// TestHookSpan finds, on both transports, a client span of the hook call
// under the call's server span, and the call's trace sent to the hook.
func TestHookSpan(t *testing.T) {
	t.Parallel()
	hook := startHookServer(t, "tcp")
	tp, exp := newRecorder(t)
	// The spans are what is tested: a hook call slower than the default
	// 100 ms (a loaded machine) must not fail the call.
	e := newTestEnvWith(t, tp, nil, withHook(hook.url, func(h *config.Hook) { h.Timeout = 10 * time.Second }))
	for _, test := range []struct {
		name, traceID string
		call          func(traceparent string)
	}{
		{name: "rest", traceID: "4bf92f3577b34da6a3ce929d0e0e4736", call: func(tp string) {
			wantCode(t, e.do(t, http.MethodGet, "/v1/ping", "", "Traceparent", tp), http.StatusOK)
		}},
		{name: "grpc", traceID: "5bf92f3577b34da6a3ce929d0e0e4737", call: func(tp string) {
			ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", tp)
			if _, err := e.ping.Ping(ctx, &shebav1.PingRequest{}); err != nil {
				t.Fatalf("Ping: %v", err)
			}
		}},
	} {
		t.Run(test.name, func(t *testing.T) {
			hook.mu.Lock()
			hook.traces = nil
			hook.mu.Unlock()
			test.call("00-" + test.traceID + "-00f067aa0ba902b7-01")
			var server, client sdktrace.ReadOnlySpan
			waitFor(t, 5*time.Second, "the server and hook spans in trace "+test.traceID, func() bool {
				server, client = nil, nil
				for _, s := range exp.GetSpans() {
					if s.SpanContext.TraceID().String() != test.traceID {
						continue
					}
					switch {
					case s.SpanKind == trace.SpanKindServer:
						server = s.Snapshot()
					case s.Name == "sheba.hook":
						client = s.Snapshot()
					}
				}
				return server != nil && client != nil
			})
			if client.SpanKind() != trace.SpanKindClient {
				t.Errorf("hook span of kind %v, want client", client.SpanKind())
			}
			if !isBelow(exp.GetSpans(), client, server.SpanContext().SpanID()) {
				t.Errorf("hook span %s is not under the server span %s", client.SpanContext().SpanID(), server.SpanContext().SpanID())
			}
			hook.mu.Lock()
			traces := hook.traces
			hook.mu.Unlock()
			if want := "00-" + test.traceID + "-" + client.SpanContext().SpanID().String() + "-01"; len(traces) != 1 || traces[0] != want {
				t.Errorf("the hook got traceparent %q, want %q: the hook span's", traces, want)
			}
		})
	}
}

// isBelow reports whether span s descends from the span of id, among
// spans.
func isBelow(spans tracetest.SpanStubs, s sdktrace.ReadOnlySpan, id trace.SpanID) bool {
	parents := map[trace.SpanID]trace.SpanID{}
	for _, x := range spans {
		parents[x.SpanContext.SpanID()] = x.Parent.SpanID()
	}
	for p := s.Parent().SpanID(); p.IsValid(); p = parents[p] {
		if p == id {
			return true
		}
	}
	return false
}
