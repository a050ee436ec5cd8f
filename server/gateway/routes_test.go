package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/gen/openapiv2"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/apikey"
)

// recordingConn is a connection that records the method of every call and
// answers it NotFound.
type recordingConn struct {
	methods []string
	md      metadata.MD // the outgoing metadata of the last call
}

func (c *recordingConn) Invoke(ctx context.Context, method string, _, _ any, _ ...grpc.CallOption) error {
	c.methods = append(c.methods, method)
	c.md, _ = metadata.FromOutgoingContext(ctx)
	return status.Error(codes.NotFound, "recorded")
}

func (c *recordingConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "no streams")
}

// TestRouteMethods checks that the route table names, for every route, the
// gRPC method grpc-gateway's mux calls for it: the key check decides by that
// name before the mux has run.
func TestRouteMethods(t *testing.T) {
	routes, err := newRouteTable(openapiv2.Document, &shebav1.PingService_ServiceDesc, &shebav1.AccountService_ServiceDesc,
		&shebav1.SubscriptionService_ServiceDesc, &shebav1.WebhookService_ServiceDesc)
	if err != nil {
		t.Fatal(err)
	}
	conn := &recordingConn{}
	h, err := New(t.Context(), conn, Options{MaxBodyBytes: 1 << 20, MaxConcurrentBodies: 1, Authenticator: apikey.New(nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if len(routes.routes) == 0 {
		t.Fatal("no routes")
	}
	for _, rt := range routes.routes {
		path := rt.template
		for _, seg := range rt.segments {
			if strings.HasPrefix(seg, "{") {
				path = strings.Replace(path, seg, "some-id", 1)
			}
		}
		conn.methods = nil
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), rt.method, path, http.NoBody))
		if got := routes.rpc(rt.method, path); got != rt.rpc {
			t.Errorf("%s %s: table finds %q, want its own route's %q", rt.method, path, got, rt.rpc)
		}
		if len(conn.methods) != 1 || conn.methods[0] != rt.rpc {
			t.Errorf("%s %s: the mux called %v, the table says %s", rt.method, path, conn.methods, rt.rpc)
		}
	}
	for _, test := range []struct{ method, path string }{
		{http.MethodGet, "/v1/nothing"},
		{http.MethodDelete, "/v1/accounts"},
		{http.MethodPost, "/v1/accounts/x/y/z"},
		// The path of a verb is the verb's, under every method.
		{http.MethodGet, "/v1/webhookEndpoints/x:rotateSecret"},
		{http.MethodPost, "/v1/webhookEndpoints/:rotateSecret"},
	} {
		if got := routes.rpc(test.method, test.path); got != "" {
			t.Errorf("%s %s: got %q, want no method", test.method, test.path, got)
		}
	}
	for _, test := range []struct{ method, path, want string }{
		{http.MethodPost, "/v1/webhookEndpoints/x:rotateSecret", shebav1.WebhookService_RotateWebhookSecret_FullMethodName},
		// Another verb is an id: the mux takes it as one.
		{http.MethodGet, "/v1/webhookEndpoints/x:rotate", shebav1.WebhookService_GetWebhookEndpoint_FullMethodName},
		{http.MethodGet, "/v1/accounts/x:login", shebav1.AccountService_GetAccount_FullMethodName},
	} {
		if got := routes.rpc(test.method, test.path); got != test.want {
			t.Errorf("%s %s: got %q, want %q", test.method, test.path, got, test.want)
		}
	}
}

// TestRouteTableRefusesUnknownOperations checks that an operation of no
// known method stops the gateway from starting, rather than leaving a route
// that the key check cannot place.
func TestRouteTableRefusesUnknownOperations(t *testing.T) {
	if _, err := newRouteTable(openapiv2.Document, &shebav1.PingService_ServiceDesc); err == nil {
		t.Error("got nil error for a document with operations of services not given")
	}
}

// TestForwardedMetadata checks the metadata the gateway makes of where a
// request comes from: x-forwarded-for (the request log's peer) from the
// client's address, and no x-forwarded-host from the Host, which nothing
// reads (serveWithoutHost); the request keeps its Host for the steps around
// the gateway.
func TestForwardedMetadata(t *testing.T) {
	conn := &recordingConn{}
	h, err := New(t.Context(), conn, Options{MaxBodyBytes: 1 << 20, MaxConcurrentBodies: 1, Authenticator: apikey.New(nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	for _, sent := range []string{"", "proxy.example"} {
		r := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "http://sheba.test/v1/ping", http.NoBody)
		r.RemoteAddr = "192.0.2.1:1234"
		if sent != "" {
			r.Header.Set("X-Forwarded-Host", sent)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		if len(conn.methods) == 0 {
			t.Fatal("the gateway made no call")
		}
		if got := conn.md.Get("x-forwarded-for"); len(got) != 1 || got[0] != "192.0.2.1" {
			t.Errorf("x-forwarded-for: got %q, want the client's address", got)
		}
		var want []string
		if sent != "" {
			want = []string{sent}
		}
		if got := conn.md.Get("x-forwarded-host"); !slices.Equal(got, want) {
			t.Errorf("X-Forwarded-Host %q sent: x-forwarded-host %q, want %q", sent, got, want)
		}
		if r.Host != "sheba.test" {
			t.Errorf("the request's Host is %q after the gateway, want sheba.test", r.Host)
		}
	}
}
