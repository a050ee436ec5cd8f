package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/shebasvc/sheba/gen/openapiv2"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/server/cborpb"
)

// newGateway returns the REST gateway, calling the services over conn (the
// in-process channel, so every call passes the interceptor chain).
func newGateway(ctx context.Context, conn grpc.ClientConnInterface) (*runtime.ServeMux, *routeTable, error) {
	routes, err := newRouteTable(openapiv2.Document)
	if err != nil {
		return nil, nil, err
	}
	jsonpb := &runtime.JSONPb{
		MarshalOptions: protojson.MarshalOptions{
			// Empty lists and strings are shown (an empty
			// nextPageToken marks the last page); unset messages
			// such as cancelTime stay absent.
			EmitDefaultValues: true,
		},
		UnmarshalOptions: protojson.UnmarshalOptions{
			// Unknown fields are a client's mistake: answer 400.
			DiscardUnknown: false,
		},
	}
	mux := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, jsonpb),
		// By name too, so that negotiateAccept can choose JSON for a
		// CBOR body.
		runtime.WithMarshalerOption("application/json", jsonpb),
		// CBOR for clients that ask for it (Content-Type or Accept), with
		// the JSON mapping's shape.
		runtime.WithMarshalerOption(cborpb.MediaType, &cborpb.Marshaler{}),
		runtime.WithIncomingHeaderMatcher(incomingHeader),
		runtime.WithOutgoingHeaderMatcher(outgoingHeader),
		runtime.WithErrorHandler(errorHandler),
		runtime.WithRoutingErrorHandler(routes.routingError),
		// A form-encoded POST is not a GET in disguise: it is answered 415.
		runtime.WithDisablePathLengthFallback(),
	)
	for _, register := range []func() error{
		func() error {
			return shebav1.RegisterPingServiceHandlerClient(ctx, mux, shebav1.NewPingServiceClient(conn))
		},
		func() error {
			return shebav1.RegisterAccountServiceHandlerClient(ctx, mux, shebav1.NewAccountServiceClient(conn))
		},
		func() error {
			return shebav1.RegisterSubscriptionServiceHandlerClient(ctx, mux, shebav1.NewSubscriptionServiceClient(conn))
		},
	} {
		if err := register(); err != nil {
			return nil, nil, fmt.Errorf("register gateway handler: %w", err)
		}
	}
	return mux, routes, nil
}

// incomingHeader passes the API key and request id headers to gRPC metadata
// unprefixed, besides the gateway's defaults (Authorization among them).
func incomingHeader(key string) (string, bool) {
	switch k := strings.ToLower(key); k {
	case "x-api-key", "x-request-id":
		return k, true
	}
	return runtime.DefaultHeaderMatcher(key)
}

// outgoingHeader turns the response metadata that HTTP clients know by name
// into plain headers; the rest keeps the gateway's Grpc-Metadata- prefix.
func outgoingHeader(key string) (string, bool) {
	switch key {
	case "retry-after":
		return "Retry-After", true
	case "x-request-id":
		return "X-Request-Id", true
	}
	return runtime.MetadataHeaderPrefix + key, true
}

// errorHandler writes a google.rpc.Status body with the status of contract
// §5; a body over the size limit is 413 rather than the 400 the gateway's
// decoder would report.
func errorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if limit, over := bodyOverLimit(r.Context()); over {
		err = errBodyTooLarge(limit)
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}

func errBodyTooLarge(limit int64) error {
	return &runtime.HTTPStatusError{
		HTTPStatus: http.StatusRequestEntityTooLarge,
		Err:        status.Errorf(codes.ResourceExhausted, "request body larger than %d bytes", limit),
	}
}

// routeTable knows the methods of every REST path, read from the generated
// OpenAPI document, to answer 405 with an Allow header: the gateway knows
// that a path exists under another method but does not say which.
type routeTable struct {
	routes []route
}

type route struct {
	template string   // as in the OpenAPI document: /v1/accounts/{accountId}
	segments []string // "{name}" matches any one segment
	method   string
}

func newRouteTable(doc string) (*routeTable, error) {
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		return nil, fmt.Errorf("read OpenAPI document: %w", err)
	}
	t := &routeTable{}
	for path, ops := range d.Paths {
		for method := range ops {
			t.routes = append(t.routes, route{
				template: path,
				segments: strings.Split(strings.Trim(path, "/"), "/"),
				method:   strings.ToUpper(method),
			})
		}
	}
	return t, nil
}

// allowed returns the methods of the routes that match path, sorted.
func (t *routeTable) allowed(path string) []string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	var methods []string
	for _, rt := range t.routes {
		if rt.matches(segs) && !slices.Contains(methods, rt.method) {
			methods = append(methods, rt.method)
		}
	}
	slices.Sort(methods)
	return methods
}

// template returns the path template of the route of method and path, or
// "" if there is none.
func (t *routeTable) template(method, path string) string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for _, rt := range t.routes {
		if rt.method == method && rt.matches(segs) {
			return rt.template
		}
	}
	return ""
}

func (rt route) matches(segs []string) bool {
	if len(segs) != len(rt.segments) {
		return false
	}
	for i, want := range rt.segments {
		isVar := strings.HasPrefix(want, "{") && strings.HasSuffix(want, "}")
		if (isVar && segs[i] == "") || (!isVar && segs[i] != want) {
			return false
		}
	}
	return true
}

func (t *routeTable) routingError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	if httpStatus != http.StatusMethodNotAllowed {
		runtime.DefaultRoutingErrorHandler(ctx, mux, m, w, r, httpStatus)
		return
	}
	if allow := t.allowed(r.URL.Path); len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, &runtime.HTTPStatusError{
		HTTPStatus: http.StatusMethodNotAllowed,
		Err:        status.Errorf(codes.Unimplemented, "method %s not allowed on %s", r.Method, r.URL.Path),
	})
}
