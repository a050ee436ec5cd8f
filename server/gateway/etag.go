package gateway

import (
	"net/http"

	"github.com/shebasvc/sheba/internal/etag"
)

// ETags (docs/api.md#etags). A REST call's If-Match header reaches the
// handler as its if-match metadata (channelHeaders), where every transport
// puts it: the handler makes the call's condition of it and the store
// checks it in the change's transaction, so If-Match means the same on
// REST, gRPC and Connect. What is REST's alone is done here: the ETag
// header of an answer that carries a resource with an etag, and the 412 of
// a mismatch under If-Match (errorHandler, by the error table).

// ifMatchHeader is the header of a REST call's If-Match condition.
var ifMatchHeader = http.CanonicalHeaderKey(etag.MetadataKey)

// hasIfMatch reports whether r carries an If-Match condition: its
// ETAG_MISMATCH is 412 Precondition Failed, as RFC 9110 §13.1.1 says,
// rather than the 409 of its code.
func hasIfMatch(r *http.Request) bool {
	return etag.NewCondition("", r.Header[ifMatchHeader]).HasIfMatch()
}
