package gateway

import (
	"net/http"
	"slices"
	"strings"

	"github.com/rs/cors"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// CORS (docs/browser.md#cors), by rs/cors: the pages of the configured
// origins may call the REST routes and the browser protocols; a preflight
// is answered before the key, the limits or the body are looked at; a
// request from any other origin is served as ever, with no CORS header
// that grants it anything, so its page cannot read the answer. Cookies and
// client certificates are not asked for (AllowCredentials off): a browser
// client sends its key in a header.

// corsMethods returns the methods of the REST routes of services (their
// option (google.api.http)) and of the browser protocols (Connect and
// gRPC-Web call with POST), each once, sorted.
func corsMethods(services []*shebav1.ServiceTable) []string {
	methods := []string{http.MethodPost}
	for _, svc := range services {
		for _, m := range svc.Methods {
			methods = append(methods, m.HTTP.Method)
		}
	}
	slices.Sort(methods)
	return slices.Compact(methods)
}

// corsRequestHeaders are the headers a client may send: those of Connect and
// gRPC-Web clients (connect-es, grpc-web), the API key, sheba's own, the
// If-Match of a conditional change and the W3C trace context. A browser asks for every header beyond the few the
// Fetch standard safelists, and one left out fails the whole call.
var corsRequestHeaders = []string{
	"Content-Type", "Accept", "Content-Encoding",
	"Connect-Protocol-Version", "Connect-Timeout-Ms", "Connect-Content-Encoding", "Connect-Accept-Encoding",
	"Grpc-Timeout", "Grpc-Encoding", "Grpc-Accept-Encoding", "X-Grpc-Web", "X-User-Agent",
	"X-Api-Key", "Authorization", "Idempotency-Key", "X-Request-Id", "If-Match",
	"Traceparent", "Tracestate",
}

// corsExposedHeaders are the answer's headers a page may read beyond the
// safelisted ones: the status of a gRPC-Web call that failed at once (its
// trailers then come as headers), the encodings the protocols negotiate,
// and sheba's own: the limits' state, the retry hint, the request id, the
// idempotent replay and a resource's ETag. Named one by one: Access-Control-Expose-Headers
// takes no prefix pattern, and Connect's response headers are these two.
var corsExposedHeaders = []string{
	"Grpc-Status", "Grpc-Message", "Grpc-Status-Details-Bin", "Grpc-Encoding", "Grpc-Accept-Encoding",
	"Connect-Content-Encoding", "Connect-Accept-Encoding", "Content-Encoding",
	"RateLimit", "RateLimit-Policy", "Retry-After", "X-Request-Id", "Idempotent-Replayed", "ETag",
}

// corsMaxAge is how long a browser may keep a preflight's answer, in
// seconds: two hours, the most Chromium keeps one.
const corsMaxAge = 7200

// withCORS returns h granting CORS to origins ("*": all) on the API's paths
// (corsPath), for the methods of services; with no origin, h as it is.
func withCORS(h http.Handler, origins []string, services []*shebav1.ServiceTable) http.Handler {
	if len(origins) == 0 {
		return h
	}
	granted := cors.New(cors.Options{
		AllowedOrigins: origins,
		AllowedMethods: corsMethods(services),
		AllowedHeaders: corsRequestHeaders,
		ExposedHeaders: corsExposedHeaders,
		MaxAge:         corsMaxAge,
	}).Handler(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if corsPath(r.URL.Path) {
			granted.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// corsPath reports whether path is one of the API's: a REST route's
// (/v1/…) or a browser call's (/sheba.v1.…). The others that reach the
// handler (an OPTIONS of /openapi.json or of an operator endpoint, which
// the operator mux serves only to GET) get no grant, as those endpoints
// get none.
func corsPath(path string) bool {
	return strings.HasPrefix(path, "/v1/") || strings.HasPrefix(path, browserPrefix)
}
