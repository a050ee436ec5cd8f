package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/shebasvc/sheba/gen/openapiv2"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/apikey"
)

// recordingConn is a Channel to every REST service whose chain records
// the method and incoming metadata of every call and answers it NotFound,
// calling no handler.
type recordingConn struct {
	*Channel
	methods []string
	md      metadata.MD // the incoming metadata of the last call
}

func newRecordingConn() *recordingConn {
	c := &recordingConn{}
	c.Channel = NewChannel(func(ctx context.Context, _ any, info *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
		c.methods = append(c.methods, info.FullMethod)
		c.md, _ = metadata.FromIncomingContext(ctx)
		return nil, status.Error(codes.NotFound, "recorded")
	})
	for _, svc := range shebav1.Services {
		c.RegisterService(svc.Desc, nil)
	}
	return c
}

// TestRouteMethods checks that every method of the method table has a
// route, and that the route table names, for every route, the gRPC method
// grpc-gateway's mux calls for it: the key check decides by that name
// before the mux has run.
func TestRouteMethods(t *testing.T) {
	routes, err := newRouteTable(shebav1.Services)
	if err != nil {
		t.Fatal(err)
	}
	routed := map[string]bool{}
	for _, rt := range routes.routes {
		routed[rt.rpc] = true
	}
	for _, svc := range shebav1.Services {
		for _, m := range svc.Methods {
			if !routed[m.FullName] {
				t.Errorf("%s: no REST route", m.FullName)
			}
		}
	}
	conn := newRecordingConn()
	h, err := New(t.Context(), conn.Channel, Options{MaxBodyBytes: 1 << 20, MaxConcurrentBodies: 1, Authenticator: apikey.New(nil, nil)})
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

// TestRouteTemplates checks the templates the route table takes from the
// HTTP rules: each variable by its JSON name, as the OpenAPI document and
// the spans name it; and a template the table cannot match as the mux
// does stops the gateway from starting, rather than leaving a route that
// the key check cannot place.
func TestRouteTemplates(t *testing.T) {
	method := func(path string) shebav1.MethodTable {
		return shebav1.MethodTable{
			FullName:   shebav1.SubscriptionService_CancelSubscription_FullMethodName,
			NewRequest: func() proto.Message { return new(shebav1.CancelSubscriptionRequest) },
			HTTP:       shebav1.HTTPRule{Method: http.MethodPost, Path: path},
		}
	}
	rt, err := newRoute(method("/v1/accounts/{account_id}/subscription:cancel"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "/v1/accounts/{accountId}/subscription:cancel"; rt.template != want || rt.verb != ":cancel" {
		t.Errorf("got template %q, verb %q; want %q, \":cancel\"", rt.template, rt.verb, want)
	}
	for _, path := range []string{
		"v1/accounts",
		"/v1/accounts/{name=accounts/*}",
		"/v1/accounts/*",
		"/v1/accounts/**",
		"/v1//accounts",
		"/v1/accounts/{missing_field}",
		"/v1/accounts/{account_id.nested}",
	} {
		if _, err := newRoute(method(path)); err == nil {
			t.Errorf("%s: got no error", path)
		}
	}
}

// TestOpenAPIDocumentHasEveryRoute checks the generated OpenAPI document
// against the routes of the method table: both come from the HTTP rules of
// the protos, by two generators that must agree.
func TestOpenAPIDocumentHasEveryRoute(t *testing.T) {
	var doc struct {
		Swagger string `json:"swagger"`
		Paths   map[string]map[string]struct {
			OperationID string `json:"operationId"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(openapiv2.Document), &doc); err != nil {
		t.Fatalf("document is not JSON: %v", err)
	}
	if doc.Swagger != "2.0" {
		t.Errorf("swagger: got %q, want 2.0", doc.Swagger)
	}
	var got []string
	for path, ops := range doc.Paths {
		for method, op := range ops {
			got = append(got, strings.ToUpper(method)+" "+path+" "+op.OperationID)
		}
	}
	slices.Sort(got)
	var want []string
	for _, svc := range shebav1.Services {
		for _, m := range svc.Methods {
			rt, err := newRoute(m)
			if err != nil {
				t.Fatal(err)
			}
			// protoc-gen-openapiv2's operation ids are Service_Method.
			want = append(want, rt.method+" "+rt.template+" "+svc.Name[strings.LastIndexByte(svc.Name, '.')+1:]+"_"+m.Name)
		}
	}
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("routes (-table +document):\n%s", diff)
	}
}

// TestDocsRoutes checks the route table of docs/api.md#routes against the
// method table: a method added to the protos is said there too, with its
// route.
func TestDocsRoutes(t *testing.T) {
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, routes, ok := strings.Cut(string(doc), "\n## Routes\n")
	if !ok {
		t.Fatal("docs/api.md has no Routes section")
	}
	routes, _, _ = strings.Cut(routes, "\n## ")
	// | `/sheba.v1.PingService/Ping` | `GET /v1/ping` | ...
	row := regexp.MustCompile("(?m)^\\| `(/[^`]+)` \\| `([A-Z]+) ([^`?]+)[^`]*` \\|")
	var got []string
	for _, m := range row.FindAllStringSubmatch(routes, -1) {
		got = append(got, m[1]+" "+m[2]+" "+m[3])
	}
	var want []string
	for _, svc := range shebav1.Services {
		for _, m := range svc.Methods {
			want = append(want, m.FullName+" "+m.HTTP.Method+" "+m.HTTP.Path)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("docs/api.md#routes (-method table +docs):\n%s", diff)
	}
}

// TestRESTMetadata checks the incoming metadata of the handler of a REST
// call (headers.go): the headers the chain reads, Authorization,
// Grpc-Metadata-* and the client's address, with values gRPC metadata can
// carry; no x-forwarded-host from the Host, which nothing reads, but the
// one a client sends; the request as it was for the steps around the
// gateway.
func TestRESTMetadata(t *testing.T) {
	conn := newRecordingConn()
	h, err := New(t.Context(), conn.Channel, Options{MaxBodyBytes: 1 << 20, MaxConcurrentBodies: 1, Authenticator: apikey.New(nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	const client = "192.0.2.1:1234"
	for _, tc := range []struct {
		name   string
		header http.Header
		remote string
		want   metadata.MD
	}{
		{"key", http.Header{"X-Api-Key": {"k"}, "User-Agent": {"test"}, "Accept": {"*/*"}}, client,
			metadata.MD{"x-api-key": {"k"}, "x-forwarded-for": {"192.0.2.1"}}},
		{"chain headers", http.Header{"X-Api-Key": {"k"}, "X-Request-Id": {"r1"}, "Idempotency-Key": {"i1"}}, client,
			metadata.MD{"x-api-key": {"k"}, "x-request-id": {"r1"}, "idempotency-key": {"i1"}, "x-forwarded-for": {"192.0.2.1"}}},
		{"forwarded by proxies", http.Header{"X-Forwarded-For": {"198.51.100.7", "203.0.113.9"}, "X-Forwarded-Host": {"proxy.example"}}, client,
			metadata.MD{"x-forwarded-for": {"198.51.100.7, 203.0.113.9, 192.0.2.1"}, "x-forwarded-host": {"proxy.example"}}},
		{"authorization", http.Header{"Authorization": {"Bearer t"}}, client,
			metadata.MD{"authorization": {"Bearer t"}, "x-forwarded-for": {"192.0.2.1"}}},
		{"grpc-metadata", http.Header{"X-Api-Key": {"plain"}, "Grpc-Metadata-X-Api-Key": {"prefixed"}, "Grpc-Metadata-Custom": {"v"}}, client,
			metadata.MD{"x-api-key": {"plain", "prefixed"}, "custom": {"v"}, "x-forwarded-for": {"192.0.2.1"}}},
		{"values metadata cannot carry", http.Header{"X-Api-Key": {"a\x01b", "k", "é"}, "X-Request-Id": {"\x7f"}}, client,
			metadata.MD{"x-api-key": {"k"}, "x-forwarded-for": {"192.0.2.1"}}},
		{"no client address", http.Header{"X-Api-Key": {"k"}}, "",
			metadata.MD{"x-api-key": {"k"}}},
	} {
		r := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "http://sheba.test/v1/ping", http.NoBody)
		r.Header, r.RemoteAddr = tc.header, tc.remote
		conn.methods = nil
		h.ServeHTTP(httptest.NewRecorder(), r)
		if len(conn.methods) != 1 {
			t.Fatalf("%s: the gateway made calls %v, want one", tc.name, conn.methods)
		}
		if diff := cmp.Diff(tc.want, conn.md); diff != "" {
			t.Errorf("%s: incoming metadata (-want +got):\n%s", tc.name, diff)
		}
		if r.Host != "sheba.test" || r.RemoteAddr != tc.remote {
			t.Errorf("%s: the request's Host and RemoteAddr are %q and %q after the gateway", tc.name, r.Host, r.RemoteAddr)
		}
	}
}
