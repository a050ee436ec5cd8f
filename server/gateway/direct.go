package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// A REST call found once. The gateway looks a request's route up once, when
// it arrives (newRESTCall), and calls that route's grpc-gateway handler
// itself: grpc-gateway's mux would look the route up again, trying the
// routes of the request's method one after the other (a split of the path
// and a map of its variables for each, then a context and a copy of the
// request for the one it calls). The mux keeps what the route table does
// not find (404, 405), and the paths it matches otherwise than the table
// (a trailing or doubled slash: directPath).
//
// grpc-gateway gives no handler out of its mux. Every service is registered
// once, on the one mux, with a middleware (runtime.WithMiddlewares) that
// sees each handler as it is registered; New then asks the mux which of
// them it calls for a path of each route (probeRoutes), and the route keeps
// that one. A route the mux calls no handler for, or the handler of
// another route, stops New: the table and the mux would not agree.

// handlerCapture remembers the handlers registered on a mux, in order, and
// makes the handler the mux calls tell its number to a probe.
type handlerCapture struct {
	handlers []runtime.HandlerFunc
}

// probeKey is the context key of a probe's *int: the number of the handler
// the mux called.
type probeKey struct{}

func (c *handlerCapture) middleware(h runtime.HandlerFunc) runtime.HandlerFunc {
	n := len(c.handlers)
	c.handlers = append(c.handlers, h)
	return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		if p, ok := r.Context().Value(probeKey{}).(*int); ok {
			*p = n
			return
		}
		h(w, r, params)
	}
}

// probeRoutes sets the handler of every route of t: the one mux calls for
// a path of the route.
func (c *handlerCapture) probeRoutes(ctx context.Context, mux *runtime.ServeMux, t *routeTable) error {
	taken := map[int]string{}
	for i := range t.routes {
		rt := &t.routes[i]
		path := strings.TrimSuffix(rt.template, rt.verb)
		for _, seg := range rt.segments {
			if strings.HasPrefix(seg, "{") {
				path = strings.Replace(path, seg, "x", 1)
			}
		}
		path += rt.verb
		called := -1
		r, err := http.NewRequestWithContext(context.WithValue(ctx, probeKey{}, &called), rt.method, path, http.NoBody)
		if err != nil {
			return fmt.Errorf("gateway: probing the route %s %s: %w", rt.method, rt.template, err)
		}
		mux.ServeHTTP(discardWriter{}, r)
		if called < 0 {
			return fmt.Errorf("gateway: the mux has no handler for the route %s %s", rt.method, rt.template)
		}
		if other, ok := taken[called]; ok {
			return fmt.Errorf("gateway: the mux calls one handler for the routes %s and %s %s", other, rt.method, rt.template)
		}
		taken[called] = rt.method + " " + rt.template
		rt.handler = c.handlers[called]
	}
	return nil
}

// discardWriter is the ResponseWriter of a probe, which writes nothing
// unless the mux answers it an error.
type discardWriter struct{}

func (discardWriter) Header() http.Header         { return http.Header{} }
func (discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (discardWriter) WriteHeader(int)             {}

// directPath reports whether path is split into its segments as the mux
// splits it, so that the route the table found for it is the mux's: one
// slash before each segment, none after the last (the table finds the
// route of "/v1/ping/" too, the mux none).
func directPath(path string) bool {
	return len(path) > 1 && path[0] == '/' && path[1] != '/' && path[len(path)-1] != '/'
}

// serveRoute calls the handler of rc's route for r, with the path
// parameters the mux would give it, and reports whether it did: false for
// a request the mux is to route (directPath).
func serveRoute(w http.ResponseWriter, r *http.Request, rc *restCall) bool {
	rt := rc.route
	if rt == nil || rt.handler == nil || !directPath(r.URL.Path) {
		return false
	}
	var params map[string]string
	if rt.nvars > 0 {
		// The mux's default unescaping (UnescapingModeLegacy) matches the
		// path as net/http decoded it, the variables as they are there.
		params = make(map[string]string, rt.nvars)
		rest := strings.TrimSuffix(r.URL.Path[1:], rt.verb)
		for _, name := range rt.vars {
			seg, tail, _ := strings.Cut(rest, "/")
			if name != "" {
				params[name] = seg
			}
			rest = tail
		}
	}
	rt.handler(w, r, params)
	return true
}

// streamResponses are the response messages of the server-streaming
// methods of services, whose shared messages rewriteShared writes: no other
// answer is rewritten, and none other looks for its REST call.
func streamResponses(services []*shebav1.ServiceTable) ([]protoreflect.MessageDescriptor, error) {
	var out []protoreflect.MessageDescriptor
	for _, svc := range services {
		for _, m := range svc.Methods {
			if !m.ServerStreams {
				continue
			}
			d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc.Name).Append(protoreflect.Name(m.Name)))
			md, ok := d.(protoreflect.MethodDescriptor)
			if err != nil || !ok {
				return nil, fmt.Errorf("gateway: no descriptor of the method %s: %v", m.FullName, err)
			}
			out = append(out, md.Output())
		}
	}
	return out, nil
}

// isStreamResponse reports whether resp is of one of types.
func isStreamResponse(resp proto.Message, types []protoreflect.MessageDescriptor) bool {
	d := resp.ProtoReflect().Descriptor()
	for _, t := range types {
		if d == t {
			return true
		}
	}
	return false
}
