package hook

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// authzCheckFunc is how a test's ext_authz server answers a Check.
type authzCheckFunc func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error)

// authzTestServer is an ext_authz server as any other is built: the
// go-control-plane service on a grpc.Server, nothing of sheba's.
type authzTestServer struct {
	authv3.UnimplementedAuthorizationServer
	check authzCheckFunc
}

func (s authzTestServer) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return s.check(ctx, req)
}

// authzServe serves check on network ("tcp" on 127.0.0.1, or "unix" on a
// socket in a temporary directory) and returns an ExtAuthzClient of it.
// Both are stopped when the test ends.
func authzServe(tb testing.TB, network string, check authzCheckFunc) *ExtAuthzClient {
	tb.Helper()
	var lis net.Listener
	var err error
	var target string
	switch network {
	case "tcp":
		lis, err = net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			target = "grpc://" + lis.Addr().String()
		}
	case "unix":
		path := filepath.Join(tb.TempDir(), "authz.sock")
		lis, err = net.Listen("unix", path)
		target = "unix://" + path
	default:
		tb.Fatalf("network %q", network)
	}
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	srv := grpc.NewServer()
	authv3.RegisterAuthorizationServer(srv, authzTestServer{check: check})
	go func() { _ = srv.Serve(lis) }()
	tb.Cleanup(srv.Stop)
	return authzNewClient(tb, target)
}

func authzNewClient(tb testing.TB, target string) *ExtAuthzClient {
	tb.Helper()
	c, err := NewExtAuthzClient(target)
	if err != nil {
		tb.Fatalf("NewExtAuthzClient(%q): %v", target, err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return c
}

// authzAllow is the plainest OK answer.
func authzAllow(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return &authv3.CheckResponse{Status: &rpcstatus.Status{}}, nil
}

func authzHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: key, Value: value}}
}

// authzCheckRequest nests req and ext as a CheckRequest carries them.
func authzCheckRequest(req *authv3.AttributeContext_HttpRequest, ext map[string]string) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request:           &authv3.AttributeContext_Request{Http: req},
		ContextExtensions: ext,
	}}
}

func TestExtAuthzClientRequest(t *testing.T) {
	for _, test := range []struct {
		name string
		call Call
		want *authv3.CheckRequest
	}{
		{
			name: "rest with a caller",
			call: Call{
				ID:         "req-1",
				Transport:  TransportREST,
				Method:     "/sheba.v1.WidgetService/GetWidget",
				CallerID:   "key_1",
				HTTPMethod: "GET",
				Path:       "/v1/widgets/w1",
				Authority:  "api.example.com",
				Headers: map[string][]string{
					"x-tenant":        {"acme"},
					"accept-language": {"en", "fr;q=0.5"},
					"x-empty":         {},
				},
				Body: wrapperspb.String("never sent"),
			},
			want: authzCheckRequest(&authv3.AttributeContext_HttpRequest{
				Id:     "req-1",
				Method: "GET",
				Path:   "/v1/widgets/w1",
				Host:   "api.example.com",
				Size:   -1,
				Headers: map[string]string{
					":authority":      "api.example.com",
					"x-tenant":        "acme",
					"accept-language": "en,fr;q=0.5",
				},
			}, map[string]string{
				"grpc_method": "/sheba.v1.WidgetService/GetWidget",
				"transport":   "rest",
				"api_key_id":  "key_1",
			}),
		},
		{
			name: "public grpc",
			call: Call{
				ID:         "req-2",
				Transport:  TransportGRPC,
				Method:     "/sheba.v1.PingService/Ping",
				HTTPMethod: "POST",
				Path:       "/sheba.v1.PingService/Ping",
				Authority:  "localhost:8443",
			},
			want: authzCheckRequest(&authv3.AttributeContext_HttpRequest{
				Id:      "req-2",
				Method:  "POST",
				Path:    "/sheba.v1.PingService/Ping",
				Host:    "localhost:8443",
				Size:    -1,
				Headers: map[string]string{":authority": "localhost:8443"},
			}, map[string]string{
				"grpc_method": "/sheba.v1.PingService/Ping",
				"transport":   "grpc",
			}),
		},
	} {
		for _, network := range []string{"tcp", "unix"} {
			t.Run(test.name+"/"+network, func(t *testing.T) {
				got := make(chan *authv3.CheckRequest, 1)
				c := authzServe(t, network, func(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
					got <- req
					return authzAllow(ctx, req)
				})
				if _, err := c.Check(t.Context(), &test.call); err != nil {
					t.Fatalf("Check: %v", err)
				}
				if diff := cmp.Diff(test.want, <-got, protocmp.Transform()); diff != "" {
					t.Errorf("CheckRequest mismatch (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestExtAuthzClientDecision(t *testing.T) {
	for _, test := range []struct {
		name    string
		answer  *authv3.CheckResponse
		want    Decision
		wantErr bool
	}{
		{
			name:   "allow",
			answer: &authv3.CheckResponse{Status: &rpcstatus.Status{}},
			want:   Decision{},
		},
		{
			name: "allow with headers",
			answer: &authv3.CheckResponse{
				Status: &rpcstatus.Status{},
				HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
					Headers: []*corev3.HeaderValueOption{authzHeader("x-upstream", "not ours")},
					ResponseHeadersToAdd: []*corev3.HeaderValueOption{
						authzHeader("X-Policy", "p1"),
						authzHeader("x-policy", "p2"),
						{Header: &corev3.HeaderValue{Key: "x-raw", RawValue: []byte("bytes")}},
						authzHeader("", "nameless"),
					},
				}},
			},
			want: Decision{ResponseHeaders: map[string][]string{
				"x-policy": {"p1", "p2"},
				"x-raw":    {"bytes"},
			}},
		},
		{
			name: "allow with an ok_response and no status",
			answer: &authv3.CheckResponse{HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
				ResponseHeadersToAdd: []*corev3.HeaderValueOption{authzHeader("x-policy", "p1")},
			}}},
			want: Decision{ResponseHeaders: map[string][]string{"x-policy": {"p1"}}},
		},
		{
			name: "deny 403 with a body",
			answer: &authv3.CheckResponse{
				Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied)},
				HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
					Status: &typev3.HttpStatus{Code: typev3.StatusCode_Forbidden},
					Body:   "tenant suspended",
				}},
			},
			want: Decision{Break: 403, Message: "tenant suspended"},
		},
		{
			name: "deny with its status unset",
			answer: &authv3.CheckResponse{
				Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied)},
				HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
					Body: "no",
				}},
			},
			want: Decision{Break: 403, Message: "no"},
		},
		{
			name:   "deny without a denied_response",
			answer: &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.Unauthenticated)}},
			want:   Decision{Break: 403},
		},
		{
			name: "deny 429 with headers",
			answer: &authv3.CheckResponse{
				Status: &rpcstatus.Status{Code: int32(codes.ResourceExhausted)},
				HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
					Status: &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests},
					Headers: []*corev3.HeaderValueOption{
						authzHeader("Retry-After", "30"),
						authzHeader("x-quota", "tenant"),
					},
				}},
			},
			want: Decision{Break: 429, ResponseHeaders: map[string][]string{
				"retry-after": {"30"},
				"x-quota":     {"tenant"},
			}},
		},
		{
			name: "deny with a status that is no error",
			answer: &authv3.CheckResponse{
				Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied)},
				HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
					Status: &typev3.HttpStatus{Code: typev3.StatusCode_Found},
				}},
			},
			want: Decision{Break: 403},
		},
		{
			// Envoy allows it: its status's code reads as OK.
			name:   "an empty answer",
			answer: &authv3.CheckResponse{},
			want:   Decision{},
		},
		{
			name: "error_response",
			answer: &authv3.CheckResponse{
				Status: &rpcstatus.Status{Code: int32(codes.Internal), Message: "policy store down"},
				HttpResponse: &authv3.CheckResponse_ErrorResponse{ErrorResponse: &authv3.DeniedHttpResponse{
					Status: &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable},
				}},
			},
			wantErr: true,
		},
	} {
		t.Run(test.name, func(t *testing.T) {
			c := authzServe(t, "tcp", func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return test.answer, nil
			})
			got, err := c.Check(t.Context(), &Call{ID: "req-1"})
			if gotErr := err != nil; gotErr != test.wantErr {
				t.Fatalf("got error %v, want error %t", err, test.wantErr)
			}
			if diff := cmp.Diff(test.want, got); diff != "" {
				t.Errorf("Decision mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExtAuthzClientGRPCError(t *testing.T) {
	for _, test := range []struct {
		name  string
		check authzCheckFunc
		want  codes.Code
	}{
		{
			name: "unavailable",
			check: func(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				return nil, status.Error(codes.Unavailable, "draining")
			},
			want: codes.Unavailable,
		},
		{
			name:  "unimplemented",
			check: authzTestServer{}.UnimplementedAuthorizationServer.Check,
			want:  codes.Unimplemented,
		},
		{
			name: "too slow",
			check: func(ctx context.Context, _ *authv3.CheckRequest) (*authv3.CheckResponse, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			},
			want: codes.DeadlineExceeded,
		},
	} {
		t.Run(test.name, func(t *testing.T) {
			c := authzServe(t, "tcp", test.check)
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			got, err := c.Check(ctx, &Call{ID: "req-1"})
			if status.Code(err) != test.want {
				t.Fatalf("got error %v, want code %v", err, test.want)
			}
			if diff := cmp.Diff(Decision{}, got); diff != "" {
				t.Errorf("Decision mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExtAuthzClientRefused(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := lis.Addr().String()
	lis.Close()
	for _, target := range []string{
		"grpc://" + addr,
		"unix://" + filepath.Join(t.TempDir(), "nobody.sock"),
	} {
		t.Run(target, func(t *testing.T) {
			c := authzNewClient(t, target)
			const deadline = 5 * time.Second
			ctx, cancel := context.WithTimeout(t.Context(), deadline)
			defer cancel()
			start := time.Now()
			_, err := c.Check(ctx, &Call{ID: "req-1"})
			if err == nil {
				t.Fatal("got no error, want one")
			}
			if took := time.Since(start); took >= deadline {
				t.Errorf("got the error after %v, want it within the deadline %v", took, deadline)
			}
		})
	}
}

func TestNewExtAuthzClientTarget(t *testing.T) {
	for _, test := range []struct {
		target  string
		wantErr bool
	}{
		{target: "grpc://localhost:9191"},
		{target: "grpc://10.0.0.7:9191"},
		{target: "grpc://[::1]:9191"},
		{target: "unix:///run/authz/authz.sock"},
		{target: "", wantErr: true},
		{target: "localhost:9191", wantErr: true},
		{target: "http://localhost:9191", wantErr: true},
		{target: "grpc://", wantErr: true},
		{target: "grpc://localhost", wantErr: true},
		{target: "grpc://:9191", wantErr: true},
		{target: "grpc://localhost:0", wantErr: true},
		{target: "grpc://localhost:http", wantErr: true},
		{target: "grpc://localhost:70000", wantErr: true},
		{target: "grpc://localhost:9191/authz", wantErr: true},
		{target: "grpc://user@localhost:9191", wantErr: true},
		{target: "unix://", wantErr: true},
		{target: "unix:///", wantErr: true},
		{target: "unix://authz.sock", wantErr: true},
		{target: "unix:/run/authz.sock", wantErr: true},
		{target: "unix:///run/authz.sock?x=1", wantErr: true},
	} {
		t.Run(test.target, func(t *testing.T) {
			c, err := NewExtAuthzClient(test.target)
			if gotErr := err != nil; gotErr != test.wantErr {
				t.Fatalf("got error %v, want error %t", err, test.wantErr)
			}
			if err != nil {
				if !strings.Contains(err.Error(), test.target) {
					t.Errorf("got error %q, want it to name the target", err)
				}
				return
			}
			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
}

// TestExtAuthzClientConcurrent checks that calls sharing the one connection
// each get their own answer.
func TestExtAuthzClientConcurrent(t *testing.T) {
	c := authzServe(t, "unix", func(_ context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
		return &authv3.CheckResponse{
			Status: &rpcstatus.Status{},
			HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
				ResponseHeadersToAdd: []*corev3.HeaderValueOption{
					authzHeader("x-id", req.GetAttributes().GetRequest().GetHttp().GetId()),
				},
			}},
		}, nil
	})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				id := fmt.Sprintf("req-%d-%d", g, i)
				got, err := c.Check(t.Context(), &Call{ID: id})
				if err != nil {
					t.Errorf("Check(%s): %v", id, err)
					return
				}
				if want := []string{id}; !cmp.Equal(got.ResponseHeaders["x-id"], want) {
					t.Errorf("Check(%s): got x-id %q, want %q", id, got.ResponseHeaders["x-id"], want)
				}
			}
		})
	}
	wg.Wait()
}

// authzBenchCall is a typical authenticated REST call.
var authzBenchCall = Call{
	ID:         "0b4c6a8e-5f3d-4e1a-9c2b-7d8e9f0a1b2c",
	Transport:  TransportREST,
	Method:     "/sheba.v1.WidgetService/GetWidget",
	CallerID:   "key_01J9Z3",
	HTTPMethod: "GET",
	Path:       "/v1/widgets/w1",
	Authority:  "api.example.com",
	Headers: map[string][]string{
		"x-tenant":        {"acme"},
		"user-agent":      {"sheba-bench/1"},
		"accept-language": {"en", "fr"},
	},
}

// BenchmarkExtAuthzClientCheck measures a whole Check against a local
// server that allows: the allocations counted include the server's.
func BenchmarkExtAuthzClientCheck(b *testing.B) {
	for _, network := range []string{"tcp", "unix"} {
		b.Run(network, func(b *testing.B) {
			c := authzServe(b, network, authzAllow)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Check(b.Context(), &authzBenchCall); err != nil {
					b.Fatalf("Check: %v", err)
				}
			}
		})
	}
}

// BenchmarkExtAuthzNewRequest measures the client's own share: building
// the CheckRequest of a call.
func BenchmarkExtAuthzNewRequest(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = extAuthzNewRequest(&authzBenchCall)
	}
}
