package gateway

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

	"github.com/shebasvc/sheba/interceptors/reason"
)

// routeTable knows the REST routes, read from the generated OpenAPI
// document: the methods of every path, to answer 405 with an Allow header
// (the gateway knows that a path exists under another method but does not
// say which), and the gRPC method of each route, for the key check that
// comes before the body is read (keycheck.go).
type routeTable struct {
	routes []route
}

type route struct {
	template string   // as in the OpenAPI document: /v1/accounts/{accountId}
	segments []string // "{name}" matches any one segment
	// verb ends the path (":rotateSecret" of
	// /v1/webhookEndpoints/{endpointId}:rotateSecret), after the last
	// segment; "" for a route without one.
	verb   string
	method string
	rpc    string // the full gRPC method: /sheba.v1.AccountService/GetAccount
}

// newRouteTable reads the routes of doc, each the operation of one method
// of services. grpc-gateway names the gRPC method of a route
// (runtime.RPCMethod) only inside its mux, after it has matched the route
// and right before it decodes the body; the key check must know it
// earlier, before the guards that answer for the body (415, 413) and the
// body slots. The route table of the 405s already holds every route, and
// protoc-gen-openapiv2 names each operation Service_Method (its default
// operation ids), so the services' descriptions turn the name into the
// full method: no second list of routes to keep. An operation of no known
// method is an error here, and a test checks every route against the
// method the mux calls (TestRouteMethods).
func newRouteTable(doc string, services ...*grpc.ServiceDesc) (*routeTable, error) {
	var d struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		return nil, fmt.Errorf("read OpenAPI document: %w", err)
	}
	rpcs := map[string]string{}
	for _, svc := range services {
		short := svc.ServiceName[strings.LastIndex(svc.ServiceName, ".")+1:]
		for _, m := range svc.Methods {
			rpcs[short+"_"+m.MethodName] = "/" + svc.ServiceName + "/" + m.MethodName
		}
	}
	t := &routeTable{}
	for path, ops := range d.Paths {
		for method, op := range ops {
			rpc, ok := rpcs[op.OperationID]
			if !ok {
				return nil, fmt.Errorf("OpenAPI document: %s %s: operation %q is no method of the services", strings.ToUpper(method), path, op.OperationID)
			}
			segments := strings.Split(strings.Trim(path, "/"), "/")
			last := segments[len(segments)-1]
			var verb string
			if i := strings.LastIndexByte(last, ':'); i > 0 && !strings.Contains(last[i:], "}") {
				segments[len(segments)-1], verb = last[:i], last[i:]
			}
			t.routes = append(t.routes, route{
				template: path,
				segments: segments,
				verb:     verb,
				method:   strings.ToUpper(method),
				rpc:      rpc,
			})
		}
	}
	return t, nil
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

// find returns the route of method and path, if there is one.
func (t *routeTable) find(method, path string) (route, bool) {
	verb := t.verbPath(path)
	for _, rt := range t.routes {
		if rt.method == method && (rt.verb != "") == verb && rt.matches(path) {
			return rt, true
		}
	}
	return route{}, false
}

// misrouted answers 405 with Allow to a request for the path of a route
// with a verb under a method it does not have, and reports whether it did;
// the mux would answer it from the handler of another route, or 405 too.
func (t *routeTable) misrouted(gw *runtime.ServeMux, w http.ResponseWriter, r *http.Request) bool {
	if !t.verbPath(r.URL.Path) {
		return false
	}
	if _, ok := t.find(r.Method, r.URL.Path); ok {
		return false
	}
	_, m := runtime.MarshalerForRequest(gw, r)
	t.routingError(r.Context(), gw, m, w, r, http.StatusMethodNotAllowed)
	return true
}

// template returns the path template of the route of method and path, or
// "" if there is none.
func (t *routeTable) template(method, path string) string {
	rt, _ := t.find(method, path)
	return rt.template
}

// rpc returns the full gRPC method of the route of method and path, or ""
// if there is none.
func (t *routeTable) rpc(method, path string) string {
	rt, _ := t.find(method, path)
	return rt.rpc
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
		isVar := strings.HasPrefix(want, "{") && strings.HasSuffix(want, "}")
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
