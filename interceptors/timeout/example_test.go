package timeout_test

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/timeout"
)

// A handler that outlives the server's maximum answers DeadlineExceeded.
func Example() {
	interceptor := timeout.UnaryServerInterceptor(10 * time.Millisecond)
	info := &grpc.UnaryServerInfo{FullMethod: "/sheba.v1.AccountService/GetAccount"}
	_, err := interceptor(context.Background(), nil, info, func(ctx context.Context, _ any) (any, error) {
		<-ctx.Done() // a query cancelled at the deadline
		return nil, ctx.Err()
	})
	fmt.Println(status.Code(err))
	// Output: DeadlineExceeded
}
