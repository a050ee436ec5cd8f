package gateway

import (
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	"github.com/shebasvc/sheba/interceptors/idempotency"
)

// idempotencyKeyHeader is the header that makes a create safe to retry
// (docs/api.md#idempotency-keys), passed to the interceptor as its
// metadata; canonical once here, so that looking it up allocates nothing.
var idempotencyKeyHeader = http.CanonicalHeaderKey(idempotency.MetadataKey)

// badIdempotencyKey answers 400 to a request whose Idempotency-Key the
// gateway would drop on its way to gRPC metadata (a byte that is not
// printable ASCII), and reports whether it did: the interceptor would see
// no key at all and run the request unprotected. Like a body that cannot be
// decoded, it is answered here, before auth; the rule and the answer are
// the interceptor's (idempotency.CheckHeader).
func badIdempotencyKey(gw *runtime.ServeMux, w http.ResponseWriter, r *http.Request) bool {
	if err := idempotency.CheckHeader(r.Header.Values(idempotencyKeyHeader)); err != nil {
		writeError(gw, w, r, err)
		return true
	}
	return false
}
