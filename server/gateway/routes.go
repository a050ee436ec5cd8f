package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/reflect/protoreflect"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"

	"github.com/shebasvc/sheba/interceptors/reason"
)

// routeTable knows the REST routes, read from the method table (each
// method's option (google.api.http), from which grpc-gateway's handlers
// are generated too): the methods of every path, to answer 405 with an
// Allow header (the gateway knows that a path exists under another method
// but does not say which), and the gRPC method of each route, for the key
// check that comes before the body is read (keycheck.go).
type routeTable struct {
	routes []route
}

type route struct {
	// template is the path template as the OpenAPI document writes it,
	// the variables by their JSON names: /v1/accounts/{accountId}. It
	// names the route in spans (tracing.go).
	template string
	// spanName names its spans: "GET /v1/accounts/{accountId}".
	spanName string
	segments []string // "{name}" matches any one segment
	// verb ends the path (":rotateSecret" of
	// /v1/webhookEndpoints/{endpointId}:rotateSecret), after the last
	// segment; "" for a route without one.
	verb   string
	method string
	rpc    string // the full gRPC method: /sheba.v1.AccountService/GetAccount
	// vars are the field paths of the path's variables, by segment, as
	// grpc-gateway names them in a handler's path parameters
	// (account_id); "" for a literal segment. nvars counts them.
	vars  []string
	nvars int
	// stream is true for a server-streaming method's route.
	stream bool
	// public is true for a method callable without a key (the
	// Authenticator's policy), set by New.
	public bool
	// handler is the grpc-gateway handler the mux calls for this route,
	// set by New (direct.go).
	handler runtime.HandlerFunc
}

// newRouteTable reads the routes of every method of services.
// grpc-gateway names the gRPC method of a route (runtime.RPCMethod) only
// inside its mux, after it has matched the route and right before it
// decodes the body; the key check must know it earlier, before the guards
// that answer for the body (415, 413) and the body slots. The method table
// holds both, so there is no second list of routes to keep; a test checks
// every route against the method the mux calls (TestRouteMethods), and the
// OpenAPI document against the table (TestOpenAPIDocumentHasEveryRoute). A
// path template of more than literals and single-segment variables
// ({name=a/*}, *, **) is an error here: routes.matches would not match it
// as the mux does.
func newRouteTable(services []*shebav1.ServiceTable) (*routeTable, error) {
	t := &routeTable{}
	for _, svc := range services {
		for _, m := range svc.Methods {
			rt, err := newRoute(m)
			if err != nil {
				return nil, fmt.Errorf("gateway: route of %s: %w", m.FullName, err)
			}
			t.routes = append(t.routes, rt)
		}
	}
	// The table finds a path's route by looking through the routes in
	// order, the mux by looking through them in the reverse order of
	// their registration: they agree as long as no path is two routes'.
	for i, a := range t.routes {
		for _, b := range t.routes[i+1:] {
			if a.overlaps(b) {
				return nil, fmt.Errorf("gateway: routes %s %s and %s %s match the same paths", a.method, a.template, b.method, b.template)
			}
		}
	}
	return t, nil
}

// overlaps reports whether a path exists that both a and b match.
func (a route) overlaps(b route) bool {
	if a.method != b.method || a.verb != b.verb || len(a.segments) != len(b.segments) {
		return false
	}
	for i, seg := range a.segments {
		if a.vars[i] == "" && b.vars[i] == "" && seg != b.segments[i] {
			return false
		}
	}
	return true
}

// newRoute is the route of m.
func newRoute(m shebav1.MethodTable) (route, error) {
	path, ok := strings.CutPrefix(m.HTTP.Path, "/")
	if !ok {
		return route{}, fmt.Errorf("path template %q does not begin with /", m.HTTP.Path)
	}
	segments := strings.Split(path, "/")
	last := segments[len(segments)-1]
	var verb string
	if i := strings.LastIndexByte(last, ':'); i > 0 && !strings.Contains(last[i:], "}") {
		segments[len(segments)-1], verb = last[:i], last[i:]
	}
	request := m.NewRequest().ProtoReflect().Descriptor()
	vars := make([]string, len(segments))
	nvars := 0
	for i, seg := range segments {
		name, isVar := strings.CutPrefix(seg, "{")
		if isVar {
			name, isVar = strings.CutSuffix(name, "}")
		}
		if !isVar {
			if seg == "" || strings.ContainsAny(seg, "{}*=") {
				return route{}, fmt.Errorf("path template %q: segment %q is not a literal nor a {field}", m.HTTP.Path, seg)
			}
			continue
		}
		json, err := jsonFieldPath(request, name)
		if err != nil {
			return route{}, fmt.Errorf("path template %q: %w", m.HTTP.Path, err)
		}
		segments[i] = "{" + json + "}"
		vars[i] = name
		nvars++
	}
	template := "/" + strings.Join(segments, "/") + verb
	return route{
		template: template,
		spanName: m.HTTP.Method + " " + template,
		segments: segments,
		verb:     verb,
		method:   m.HTTP.Method,
		rpc:      m.FullName,
		vars:     vars,
		nvars:    nvars,
		stream:   m.ServerStreams,
	}, nil
}

// jsonFieldPath returns path, a field path of md (account_id, or
// subscription.account_id), with each field by its JSON name, as
// protoc-gen-openapiv2 writes it (json_names_for_fields).
func jsonFieldPath(md protoreflect.MessageDescriptor, path string) (string, error) {
	parts := strings.Split(path, ".")
	for i, part := range parts {
		if md == nil {
			return "", fmt.Errorf("variable {%s}: %s is not a message", path, strings.Join(parts[:i], "."))
		}
		fd := md.Fields().ByName(protoreflect.Name(part))
		if fd == nil {
			return "", fmt.Errorf("variable {%s}: %s has no field %q (only {field} variables are supported)", path, md.FullName(), part)
		}
		parts[i], md = fd.JSONName(), fd.Message()
	}
	return strings.Join(parts, "."), nil
}

// A path that a route with a verb matches is that route's path, under any
// method: a route without a verb whose last segment is a variable matches
// it too (/v1/webhookEndpoints/{endpointId} matches
// /v1/webhookEndpoints/X:rotateSecret, X:rotateSecret its id), and so does
// the mux, which would give a GET of it to GetWebhookEndpoint, answering
// 400 for the id. So the table looks among the routes with a verb alone
// when one matches, and misrouted answers 405 before the mux.

// verbPath reports whether a route with a verb matches path. Only a path
// whose last segment holds a colon is looked up.
func (t *routeTable) verbPath(path string) bool {
	if !strings.Contains(path[strings.LastIndexByte(path, '/')+1:], ":") {
		return false
	}
	for _, rt := range t.routes {
		if rt.verb != "" && rt.matches(path) {
			return true
		}
	}
	return false
}

// allowed returns the methods of the routes that match path, sorted.
func (t *routeTable) allowed(path string) []string {
	verb := t.verbPath(path)
	var methods []string
	for _, rt := range t.routes {
		if (rt.verb != "") == verb && rt.matches(path) && !slices.Contains(methods, rt.method) {
			methods = append(methods, rt.method)
		}
	}
	slices.Sort(methods)
	return methods
}

// find returns the route of method and path, nil if there is none, and
// whether a route with a verb matches path (verbPath).
func (t *routeTable) find(method, path string) (_ *route, verbPath bool) {
	verb := t.verbPath(path)
	for i := range t.routes {
		rt := &t.routes[i]
		if rt.method == method && (rt.verb != "") == verb && rt.matches(path) {
			return rt, verb
		}
	}
	return nil, verb
}

// misrouted answers 405 with Allow to a request for the path of a route
// with a verb under a method it does not have (the REST call's lookup
// found no route, and a route with a verb has its path), and reports
// whether it did; the mux would answer it from the handler of another
// route, or 405 too.
func (t *routeTable) misrouted(gw *runtime.ServeMux, w http.ResponseWriter, r *http.Request, rc *restCall) bool {
	if !rc.verbPath || rc.route != nil {
		return false
	}
	_, m := runtime.MarshalerForRequest(gw, r)
	t.routingError(r.Context(), gw, m, w, r, http.StatusMethodNotAllowed)
	return true
}

// rpc returns the full gRPC method of the route of method and path, or ""
// if there is none.
func (t *routeTable) rpc(method, path string) string {
	if rt, _ := t.find(method, path); rt != nil {
		return rt.rpc
	}
	return ""
}

// matches reports whether path, split at "/" once trimmed of them (and of
// the route's verb, which it must end in), matches the route's segments. It
// walks the path rather than splitting it, so that finding a route
// allocates nothing.
func (rt route) matches(path string) bool {
	rest := strings.Trim(path, "/")
	if rt.verb != "" {
		var ok bool
		if rest, ok = strings.CutSuffix(rest, rt.verb); !ok {
			return false
		}
	}
	for i, want := range rt.segments {
		seg, tail, more := strings.Cut(rest, "/")
		if more != (i < len(rt.segments)-1) {
			return false
		}
		isVar := rt.vars[i] != ""
		if (isVar && seg == "") || (!isVar && seg != want) {
			return false
		}
		rest = tail
	}
	return true
}

func (t *routeTable) routingError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	switch httpStatus {
	case http.StatusNotFound:
		errorHandler(ctx, mux, m, w, r, errRouteNotFound)
		return
	case http.StatusMethodNotAllowed:
	default:
		runtime.DefaultRoutingErrorHandler(ctx, mux, m, w, r, httpStatus)
		return
	}
	if allow := t.allowed(r.URL.Path); len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
	}
	// The path as sent (escaped): its decoded form may not be UTF-8.
	errorHandler(ctx, mux, m, w, r, &runtime.HTTPStatusError{
		HTTPStatus: http.StatusMethodNotAllowed,
		Err: reason.Error(codes.Unimplemented, reason.MethodNotAllowed,
			fmt.Sprintf("method %s not allowed on %s", reason.Clip(r.Method), reason.Clip(r.URL.EscapedPath()))),
	})
}
