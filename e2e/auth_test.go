package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/gen/openapiv2"
	_ "github.com/shebasvc/sheba/gen/sheba/v1" // registers the descriptors
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/internal/app"
)

// apiMethods returns every method of every service of the sheba.v1 protos,
// as the generated descriptors know them: a method added to the protos is
// here without a change to the tests.
func apiMethods(t testing.TB) []protoreflect.MethodDescriptor {
	t.Helper()
	var methods []protoreflect.MethodDescriptor
	protoregistry.GlobalFiles.RangeFilesByPackage("sheba.v1", func(f protoreflect.FileDescriptor) bool {
		for i := range f.Services().Len() {
			s := f.Services().Get(i)
			for j := range s.Methods().Len() {
				methods = append(methods, s.Methods().Get(j))
			}
		}
		return true
	})
	if len(methods) == 0 {
		t.Fatal("no sheba.v1 methods in the descriptor registry")
	}
	return methods
}

func fullMethod(m protoreflect.MethodDescriptor) string {
	return "/" + string(m.Parent().FullName()) + "/" + string(m.Name())
}

// restRoute is one operation of the OpenAPI document.
type restRoute struct {
	method, path, grpcMethod string
}

// restRoutes returns every operation of the served OpenAPI document, with
// its gRPC method (operationId is Service_Method).
func restRoutes(t testing.TB, methods []protoreflect.MethodDescriptor) []restRoute {
	t.Helper()
	byOperation := map[string]string{}
	for _, m := range methods {
		byOperation[string(m.Parent().Name())+"_"+string(m.Name())] = fullMethod(m)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(openapiv2.Document), &doc); err != nil {
		t.Fatal(err)
	}
	var routes []restRoute
	for path, ops := range doc.Paths {
		for method, op := range ops {
			full, ok := byOperation[op.OperationID]
			if !ok {
				t.Errorf("REST %s %s: operation %q is no sheba.v1 method", method, path, op.OperationID)
				continue
			}
			routes = append(routes, restRoute{strings.ToUpper(method), path, full})
		}
	}
	if len(routes) == 0 {
		t.Fatal("no routes in the OpenAPI document")
	}
	return routes
}

// TestAuthCoverage calls every gRPC method and every REST route that is not
// public with no key and with a wrong key: each is 401 / UNAUTHENTICATED
// with the reason, and no handler runs. The methods come from the
// descriptors and the routes from the OpenAPI document, so a new one is
// covered as soon as it exists, server-streaming ones included.
func TestAuthCoverage(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	ran := map[string]int{}
	e := newTestEnvWith(t, nil, []app.Option{withHandlerHook(func(_ context.Context, method string) error {
		mu.Lock()
		defer mu.Unlock()
		ran[method]++
		return nil
	})})
	public := config.Default().Auth.Public
	methods := apiMethods(t)

	// What the grpc.Server serves besides health and reflection is exactly
	// the sheba.v1 services. The chain is unary; a server-streaming method
	// (StreamEvents) is still refused without a key before its message is
	// read, by the tap that checks every method of the table
	// (internal/app/tap.go), and on REST its opening passes the chain
	// (gateway.Channel.NewStream): both are covered below.
	var want []string
	for _, m := range methods {
		want = append(want, fullMethod(m))
	}
	var served []string
	for name, info := range e.server.ServiceInfo() {
		if name == "grpc.health.v1.Health" || strings.HasPrefix(name, "grpc.reflection.") {
			continue
		}
		for _, m := range info.Methods {
			served = append(served, "/"+name+"/"+m.Name)
			if m.IsClientStream {
				t.Errorf("/%s/%s is a client-streaming method: nothing refuses it without a key on REST; cover it here", name, m.Name)
			}
		}
	}
	slices.Sort(want)
	slices.Sort(served)
	if !slices.Equal(want, served) {
		t.Errorf("served business methods %v, want the sheba.v1 methods %v", served, want)
	}

	creds := []struct {
		name   string
		md     []string // gRPC metadata
		header []string // REST headers
		reason string
	}{
		{"no key", nil, []string{"X-Api-Key", ""}, reason.APIKeyMissing},
		{"wrong key", []string{"x-api-key", "wrong-key"}, []string{"X-Api-Key", "wrong-key"}, reason.APIKeyInvalid},
		{"wrong bearer", []string{"authorization", "Bearer wrong-key"}, []string{"X-Api-Key", "", "Authorization", "Bearer wrong-key"}, reason.APIKeyInvalid},
		{"not bearer", []string{"authorization", "Basic abc"}, []string{"X-Api-Key", "", "Authorization", "Basic abc"}, reason.APIKeyInvalid},
	}
	covered := 0
	for _, m := range methods {
		full := fullMethod(m)
		if slices.Contains(public, full) {
			continue
		}
		covered++
		for _, c := range creds {
			t.Run("gRPC "+full+" "+c.name, func(t *testing.T) {
				ctx := metadata.AppendToOutgoingContext(t.Context(), c.md...)
				in := dynamicpb.NewMessage(m.Input())
				out := dynamicpb.NewMessage(m.Output())
				var header metadata.MD
				var err error
				if m.IsStreamingClient() || m.IsStreamingServer() {
					err = callStream(ctx, e.anon, m, in, out)
				} else {
					err = e.anon.Invoke(ctx, full, in, out, grpc.Header(&header))
				}
				wantGRPCDetails(t, "gRPC", err, header, codes.Unauthenticated, c.reason)
			})
		}
	}
	for _, rt := range restRoutes(t, methods) {
		if slices.Contains(public, rt.grpcMethod) {
			continue
		}
		// Any id will do: the key is checked before anything else.
		path := rt.path
		for strings.Contains(path, "{") {
			i, j := strings.Index(path, "{"), strings.Index(path, "}")
			path = path[:i] + unknownID + path[j+1:]
		}
		body := ""
		if rt.method != http.MethodGet {
			body = "{}"
		}
		for _, c := range creds {
			t.Run("REST "+rt.method+" "+rt.path+" "+c.name, func(t *testing.T) {
				r := e.do(t, rt.method, path, body, c.header...)
				wantRESTDetails(t, "REST", r, http.StatusUnauthorized, c.reason)
			})
		}
	}
	if covered == 0 {
		t.Fatal("no method needs a key: nothing was tested")
	}

	mu.Lock()
	if len(ran) > 0 {
		t.Errorf("handlers ran without a valid key: %v", ran)
	}
	mu.Unlock()
	// The hook does see calls that pass.
	wantCode(t, e.do(t, http.MethodGet, "/v1/accounts/"+unknownID, ""), http.StatusNotFound)
	mu.Lock()
	defer mu.Unlock()
	if ran["/sheba.v1.AccountService/GetAccount"] != 1 {
		t.Errorf("the handler hook saw %v after one keyed GetAccount", ran)
	}
}

// callStream opens a stream of m, sends in, and returns the error of the
// first receive.
func callStream(ctx context.Context, conn *grpc.ClientConn, m protoreflect.MethodDescriptor, in, out *dynamicpb.Message) error {
	desc := &grpc.StreamDesc{StreamName: string(m.Name()), ClientStreams: m.IsStreamingClient(), ServerStreams: m.IsStreamingServer()}
	s, err := conn.NewStream(ctx, desc, fullMethod(m))
	if err != nil {
		return err
	}
	if err := s.SendMsg(in); err != nil {
		return err
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	return s.RecvMsg(out)
}
