package timeout

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var errExpired = status.Error(codes.DeadlineExceeded, "deadline exceeded")

// UnaryServerInterceptor runs each call under a deadline of at most max from
// now; a client deadline that is sooner stays.
func UnaryServerInterceptor(max time.Duration) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > max {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, max)
			defer cancel()
		}
		resp, err := handler(ctx, req)
		if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, errExpired
		}
		return resp, err
	}
}
