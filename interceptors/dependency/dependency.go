// Package dependency fails calls fast while a dependency they need is down.
//
// A health checker elsewhere decides whether the dependency (Postgres) is
// up; while it is not, the calls that need it answer Unavailable at once
// instead of each waiting for its deadline on connection attempts, and the
// calls that do not need it (a ping) still run.
//
// It sits innermost, just before the handler, so a call it refuses has been
// authenticated, limited and counted like any other.
//
// Codes: Unavailable.
package dependency

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
