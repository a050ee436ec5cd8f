package gateway

import (
	"io"
	"net/http"

	"github.com/shebasvc/sheba/gen/openapiv2"
)

// Operator holds the handlers of the operator endpoints.
type Operator struct {
	// Ready answers GET /readyz.
	Ready http.Handler
	// Metrics answers GET /metrics.
	Metrics http.Handler
}

// Handler serves the operator endpoints (docs/operations.md#ports-and-endpoints),
// which no key, limit or shedding ever touches, and everything else with
// rest.
func Handler(rest http.Handler, op Operator) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.Handle("GET /readyz", op.Ready)
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, openapiv2.Document)
	})
	mux.Handle("GET /metrics", op.Metrics)
	mux.Handle("/", rest)
	return mux
}
