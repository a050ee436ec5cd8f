package errordetails_test

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/errordetails"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/interceptors/retryafter"
)

// An error without details leaves the chain with the ErrorInfo of its code;
// a retryable one with the retry hint its maker gave, as a RetryInfo.
func Example() {
	interceptor := errordetails.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/sheba.v1.AccountService/GetAccount"}
	for _, handler := range []grpc.UnaryHandler{
		func(context.Context, any) (any, error) { return nil, status.Error(codes.NotFound, "no") },
		func(ctx context.Context, _ any) (any, error) {
			retryafter.Set(ctx, 1500*time.Millisecond)
			return nil, status.Error(codes.ResourceExhausted, "later")
		},
	} {
		_, err := interceptor(context.Background(), nil, info, handler)
		st := status.Convert(err)
		fmt.Println(st.Code(), reason.Of(st), len(st.Details()))
	}
	// Output:
	// NotFound NOT_FOUND 1
	// ResourceExhausted RESOURCE_EXHAUSTED 2
}
