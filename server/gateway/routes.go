package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/interceptors/reason"
)

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
			fmt.Sprintf("method %s not allowed on %s", r.Method, r.URL.EscapedPath())),
	})
}
