package gateway

import (
	"context"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
)

// errorHandler writes a google.rpc.Status body with the HTTP status of its
// code, or of its reason (docs/api.md#errors).
func errorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, reasonStatus(overLimitError(r, err)))
}

// writeError answers err in the type the request's Accept asks for.
func writeError(gw *runtime.ServeMux, w http.ResponseWriter, r *http.Request, err error) {
	_, m := runtime.MarshalerForRequest(gw, r)
	runtime.DefaultHTTPErrorHandler(r.Context(), gw, m, w, r, err)
}
