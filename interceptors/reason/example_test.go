package reason_test

import (
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/reason"
)

// A step that knows why it refuses builds its status once, with its reason.
func ExampleStatus() {
	errMissing := reason.Status(codes.Unauthenticated, reason.APIKeyMissing, "missing API key")
	fmt.Println(errMissing.Code(), reason.Of(errMissing))
	// Output: Unauthenticated API_KEY_MISSING
}

// The central step completes any status: the reason of its code when it
// has none, a RetryInfo when it is retryable, a message that is UTF-8.
func ExampleComplete() {
	st, delay := reason.Complete(status.New(codes.Unavailable, "down \xff"), "", 2*time.Second)
	fmt.Printf("%s %+q %v\n", reason.Of(st), st.Message(), delay)

	// What already has its ErrorInfo keeps it.
	st, delay = reason.Complete(reason.Status(codes.NotFound, reason.RouteNotFound, "Not Found"), "", 0)
	fmt.Println(reason.Of(st), len(st.Details()), delay)
	// Output:
	// UNAVAILABLE "down \ufffd" 2s
	// ROUTE_NOT_FOUND 1 0s
}
