package gateway

import (
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// idempotencyKeyHeader is the header that makes a create safe to retry
// (docs/api.md#idempotency-keys); the interceptor checks its value.
const idempotencyKeyHeader = "Idempotency-Key"

// badIdempotencyKey answers 400 to a request whose Idempotency-Key holds a
// byte that is not printable ASCII, and reports whether it did. The gateway
// drops such values on their way to gRPC metadata, so the interceptor would
// see no key at all and run the request unprotected; like a body that
// cannot be decoded, it is answered here, before auth.
func badIdempotencyKey(gw *runtime.ServeMux, w http.ResponseWriter, r *http.Request) bool {
	for _, v := range r.Header.Values(idempotencyKeyHeader) {
		for i := range len(v) {
			if v[i] < ' ' || v[i] > '~' {
				writeError(gw, w, r, errBadIdempotencyKey)
				return true
			}
		}
	}
	return false
}

var errBadIdempotencyKey = func() error {
	const msg = "must be 1 to 255 visible ASCII characters, bare or as a quoted string"
	st := status.New(codes.InvalidArgument, "invalid idempotency-key: "+msg)
	withDetails, err := st.WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "idempotency-key", Description: msg}},
	})
	if err != nil {
		return st.Err()
	}
	return withDetails.Err()
}()
