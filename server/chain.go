package server

import (
	"context"
	"log/slog"
	"runtime/debug"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// unaryChain builds the one interceptor chain of every business call. The
// grpc.Server and the gateway's in-process channel both use it, so a rule
// holds on REST exactly as on gRPC. Order, outermost first:
//
//   - recovery: a panicking handler answers Internal "internal error" and is
//     logged with its stack; the server keeps serving.
func unaryChain(log *slog.Logger) grpc.UnaryServerInterceptor {
	return chainUnary(
		recovery.UnaryServerInterceptor(recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
			log.ErrorContext(ctx, "panic in handler", "panic", p, "stack", string(debug.Stack()))
			return status.Error(codes.Internal, "internal error")
		})),
	)
}

// chainUnary composes interceptors into one, the first outermost. It exists
// because grpc.ChainUnaryInterceptor is a grpc.ServerOption, while the
// in-process channel takes a single interceptor; composing once gives both
// the same chain.
func chainUnary(interceptors ...grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	if len(interceptors) == 1 {
		return interceptors[0]
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return interceptors[0](ctx, req, info, nextHandler(interceptors[1:], info, handler))
	}
}

func nextHandler(rest []grpc.UnaryServerInterceptor, info *grpc.UnaryServerInfo, final grpc.UnaryHandler) grpc.UnaryHandler {
	if len(rest) == 0 {
		return final
	}
	return func(ctx context.Context, req any) (any, error) {
		return rest[0](ctx, req, info, nextHandler(rest[1:], info, final))
	}
}
