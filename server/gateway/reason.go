package gateway

import (
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/reason"
)

// reasonHTTPStatus holds the HTTP statuses of the error reasons (of domain
// "sheba") whose REST answer is not the one of their gRPC code.
var reasonHTTPStatus = map[string]int{
	// An idempotency key reused with another request is INVALID_ARGUMENT
	// on gRPC, and 422 on REST as the IETF Idempotency-Key draft says: the
	// request itself is well formed (docs/api.md#idempotency-keys).
	reason.IdempotencyKeyReused: http.StatusUnprocessableEntity,
}

// reasonStatus gives err the HTTP status of its reason, if reasonHTTPStatus
// has one, and returns any other error as it is.
func reasonStatus(err error) error {
	if se, ok := err.(*reason.StatusError); ok {
		// The chain's errors: the reason is known without decoding.
		if code, ok := reasonHTTPStatus[se.Reason()]; ok {
			return &runtime.HTTPStatusError{HTTPStatus: code, Err: err}
		}
		return err
	}
	st, ok := status.FromError(err)
	if !ok || len(st.Proto().GetDetails()) == 0 {
		return err
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == "sheba" {
			if code, ok := reasonHTTPStatus[info.GetReason()]; ok {
				return &runtime.HTTPStatusError{HTTPStatus: code, Err: err}
			}
		}
	}
	return err
}
