package e2e

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// authzServer is an ext_authz server built as any other is, from
// go-control-plane's service types: it keeps the requests it is sent and
// answers what answer returns.
type authzServer struct {
	authv3.UnimplementedAuthorizationServer
	mu     sync.Mutex
	got    []*authv3.CheckRequest
	answer *authv3.CheckResponse
}

func (s *authzServer) Check(_ context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, req)
	return s.answer, nil
}

func (s *authzServer) answering(r *authv3.CheckResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answer = r
}

func (s *authzServer) requests() []*authv3.CheckRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.got
	s.got = nil
	return got
}

// startAuthzServer serves an ext_authz server on 127.0.0.1 and returns it
// and its grpc:// URL.
func startAuthzServer(t *testing.T) (*authzServer, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &authzServer{answer: allow(nil)}
	srv := grpc.NewServer()
	authv3.RegisterAuthorizationServer(srv, s)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return s, "grpc://" + lis.Addr().String()
}

// allow is an OK answer adding headers to the response.
func allow(headers map[string]string) *authv3.CheckResponse {
	ok := &authv3.OkHttpResponse{}
	for k, v := range headers {
		ok.ResponseHeadersToAdd = append(ok.ResponseHeadersToAdd, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: v}})
	}
	return &authv3.CheckResponse{
		Status:       &rpcstatus.Status{Code: int32(codes.OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: ok},
	}
}

// deny is a denied answer of HTTP status code (0: unset) and body.
func deny(code typev3.StatusCode, body string) *authv3.CheckResponse {
	d := &authv3.DeniedHttpResponse{Body: body}
	if code != 0 {
		d.Status = &typev3.HttpStatus{Code: code}
	}
	return &authv3.CheckResponse{
		Status:       &rpcstatus.Status{Code: int32(codes.PermissionDenied)},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: d},
	}
}

func TestHookExtAuthz(t *testing.T) {
	t.Parallel()
	authz, url := startAuthzServer(t)
	e := newTestEnv(t, withHook(url, func(h *config.Hook) {
		h.Protocol, h.Headers = config.HookExtAuthz, []string{"x-tenant"}
	}))

	t.Run("what the server is sent", func(t *testing.T) {
		id := e.freshAccount(t)
		authz.requests()
		e.subscribeREST(t, id, "pro", "X-Tenant", "acme", "X-Request-Id", "req-rest")
		e.subscribeGRPC(t, e.freshAccount(t), "pro", "x-tenant", "acme", "x-request-id", "req-grpc")
		got := authz.requests()
		if len(got) != 2 {
			t.Fatalf("the server got %d checks, want 2", len(got))
		}
		type seen struct {
			Method, Path, ID, Tenant string
			Authority                bool
			Extensions               map[string]string
		}
		var have []seen
		for _, r := range got {
			h := r.GetAttributes().GetRequest().GetHttp()
			have = append(have, seen{
				Method: h.GetMethod(), Path: h.GetPath(), ID: h.GetId(), Tenant: h.GetHeaders()["x-tenant"],
				Authority: h.GetHeaders()[":authority"] != "", Extensions: r.GetAttributes().GetContextExtensions(),
			})
			if _, ok := h.GetHeaders()["x-api-key"]; ok {
				t.Error("the ext_authz server was sent the API key")
			}
		}
		want := []seen{
			{Method: "POST", Path: subscribePath(id), ID: "req-rest", Tenant: "acme", Authority: true, Extensions: map[string]string{
				"grpc_method": "/sheba.v1.SubscriptionService/CreateSubscription", "transport": "rest", "api_key_id": testKeyID,
			}},
			{Method: "POST", Path: "/sheba.v1.SubscriptionService/CreateSubscription", ID: "req-grpc", Tenant: "acme", Authority: true, Extensions: map[string]string{
				"grpc_method": "/sheba.v1.SubscriptionService/CreateSubscription", "transport": "grpc", "api_key_id": testKeyID,
			}},
		}
		if diff := cmp.Diff(want, have); diff != "" {
			t.Errorf("checks mismatch (-want +got):\n%s", diff)
		}
	})

	for _, test := range []struct {
		name     string
		answer   *authv3.CheckResponse
		wantHTTP int
		wantCode codes.Code
		wantMsg  string
		wantRule string
	}{
		{name: "allow with headers", answer: allow(map[string]string{"x-plan-rule": "authz"}), wantHTTP: 200, wantRule: "authz"},
		{name: "deny", answer: deny(typev3.StatusCode_Forbidden, "tenant suspended"), wantHTTP: 403, wantCode: codes.PermissionDenied, wantMsg: "tenant suspended"},
		{name: "deny without a status", answer: deny(0, ""), wantHTTP: 403, wantCode: codes.PermissionDenied, wantMsg: "denied by policy"},
		{name: "deny 429", answer: deny(typev3.StatusCode_TooManyRequests, "slow down"), wantHTTP: 429, wantCode: codes.ResourceExhausted, wantMsg: "slow down"},
	} {
		t.Run(test.name, func(t *testing.T) {
			authz.answering(test.answer)
			transports(t, e, func(t *testing.T, subscribe func(*testing.T, string, string, ...string) hookCall, rest bool) {
				id := e.freshAccount(t)
				c := subscribe(t, id, "pro")
				if rest && c.http != test.wantHTTP {
					t.Errorf("got HTTP %d, want %d", c.http, test.wantHTTP)
				}
				if c.code != test.wantCode {
					t.Fatalf("got %v %q, want %v", c.code, c.st.Message(), test.wantCode)
				}
				if test.wantCode != codes.OK {
					if c.st.Message() != test.wantMsg {
						t.Errorf("got message %q, want %q", c.st.Message(), test.wantMsg)
					}
					if info := errorInfo(t, c.st); info.GetReason() != reason.HookDenied {
						t.Errorf("got reason %s, want %s", info.GetReason(), reason.HookDenied)
					}
					if n := e.count(t, `SELECT count(*) FROM subscriptions WHERE account_id = $1`, id); n != 0 {
						t.Errorf("got %d subscriptions, want none: the handler ran", n)
					}
				}
				if got := strings.Join(c.header("x-plan-rule"), ","); got != test.wantRule {
					t.Errorf("got x-plan-rule %q, want %q", got, test.wantRule)
				}
			})
		})
	}

	t.Run("server down", func(t *testing.T) {
		down := newTestEnv(t, withHook("grpc://127.0.0.1:1", func(h *config.Hook) { h.Protocol = config.HookExtAuthz }))
		r := down.do(t, http.MethodGet, "/v1/ping", "")
		wantRESTError(t, r, http.StatusServiceUnavailable, codes.Unavailable, "")
		if r.Header.Get("Retry-After") == "" {
			t.Error("no Retry-After on HOOK_UNAVAILABLE")
		}
	})
}
