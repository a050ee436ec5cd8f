package failfast

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/interceptors/reason"
)

type options struct {
	reason string
}

// Option configures the interceptor.
type Option func(*options)

// WithReason sets the ErrorInfo reason of a refusal (default
// reason.DatabaseUnavailable).
func WithReason(r string) Option {
	return func(o *options) { o.reason = r }
}

// UnaryServerInterceptor refuses, with Unavailable and message msg, the
// calls to the methods in needs while up reports false.
func UnaryServerInterceptor(up func() bool, needs map[string]bool, msg string, opts ...Option) grpc.UnaryServerInterceptor {
	o := options{reason: reason.DatabaseUnavailable}
	for _, opt := range opts {
		opt(&o)
	}
	down := reason.Error(codes.Unavailable, o.reason, msg)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if needs[info.FullMethod] && !up() {
			return nil, down
		}
		return handler(ctx, req)
	}
}
