package gateway

import (
	"io"
	"net/http"
	"path"
	"strings"

	"github.com/shebasvc/sheba/gen/openapiv2"
	"github.com/shebasvc/sheba/gen/openapiv3"
)

// Operator holds the handlers of the operator endpoints.
type Operator struct {
	// Ready answers GET /readyz.
	Ready http.Handler
	// Metrics answers GET /metrics.
	Metrics http.Handler
	// Elsewhere: /livez, /readyz and /metrics are served on an operator
	// port of their own (OperatorHandler), and not beside the API.
	Elsewhere bool
}

// Handler serves the operator endpoints (docs/operations.md#ports-and-endpoints),
// which no key, limit or shedding ever touches, unless they are served
// elsewhere, and the OpenAPI documents, their reference page (/docs) and
// everything else with rest.
func Handler(rest http.Handler, op Operator) http.Handler {
	mux := handlerMux(rest, op)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if apiPath(r) {
			r.Pattern = "/"
			rest.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// handlerMux is the mux of Handler.
func handlerMux(rest http.Handler, op Operator) *http.ServeMux {
	mux := http.NewServeMux()
	if !op.Elsewhere {
		handleOperator(mux, op)
	}
	// The OpenAPI documents: version 2 for the clients that read it,
	// version 3.1 beside it (docs/api.md#openapi).
	mux.Handle("GET /openapi.json", document(openapiv2.Document))
	mux.Handle("GET /openapi.v3.json", document(openapiv3.Document))
	handleDocs(mux)
	mux.Handle("/", rest)
	return mux
}

// document serves doc, a JSON document.
func document(doc string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, doc)
	})
}

// apiPath reports whether r is one that the mux of Handler gives to rest
// as it is, by its pattern "/": a path under /v1/, where no other pattern
// is, that the mux would not redirect to its clean form, by a method other
// than CONNECT (whose paths the mux does not clean). The mux's matching
// cost every REST call 5 allocations; this costs none, and a request it
// does not recognise goes to the mux.
func apiPath(r *http.Request) bool {
	if r.Method == http.MethodConnect {
		return false
	}
	p := r.URL.EscapedPath()
	if !strings.HasPrefix(p, "/v1/") {
		return false
	}
	// As net/http's cleanPath: path.Clean, keeping a trailing slash.
	// Clean allocates nothing for a path it leaves as it is.
	np := path.Clean(p)
	return np == p || (len(p) == len(np)+1 && p[len(p)-1] == '/' && strings.HasPrefix(p, np))
}

// OperatorHandler serves the operator port (operator.addr): /livez,
// /readyz and /metrics, and gRPC calls (HTTP/2 of type application/grpc)
// with grpcHealth, a grpc.Server with grpc.health.v1 alone, so that the
// kubelet's plain httpGet and grpc probes work beside a TLS-only API.
func OperatorHandler(op Operator, grpcHealth http.Handler) http.Handler {
	mux := http.NewServeMux()
	handleOperator(mux, op)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			grpcHealth.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func handleOperator(mux *http.ServeMux, op Operator) {
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.Handle("GET /readyz", op.Ready)
	mux.Handle("GET /metrics", op.Metrics)
}
