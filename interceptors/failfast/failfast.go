package failfast

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// UnaryServerInterceptor refuses, with Unavailable and message msg, the
// calls to the methods in needs while up reports false.
func UnaryServerInterceptor(up func() bool, needs map[string]bool, msg string) grpc.UnaryServerInterceptor {
	down := status.Error(codes.Unavailable, msg)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if needs[info.FullMethod] && !up() {
			return nil, down
		}
		return handler(ctx, req)
	}
}
