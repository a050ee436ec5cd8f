package concurrency

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/interceptors/retryafter"
)

// Limiter counts the calls in flight against a maximum. A bare atomic
// counter rather than golang.org/x/sync/semaphore: shedding needs only a
// non-blocking try, which one atomic add gives without a mutex. It is safe
// for concurrent use.
type Limiter struct {
	max      int64
	inflight atomic.Int64
}

// NewLimiter returns a Limiter that lets max calls run at once.
func NewLimiter(max int) *Limiter {
	return &Limiter{max: int64(max)}
}

// InFlight returns the number of calls running now.
func (l *Limiter) InFlight() int64 { return l.inflight.Load() }

// TryAcquire takes a slot if one is free. Each successful TryAcquire must be
// followed by one Release.
func (l *Limiter) TryAcquire() bool {
	if l.inflight.Add(1) > l.max {
		l.inflight.Add(-1)
		return false
	}
	return true
}

// Release frees a slot.
func (l *Limiter) Release() { l.inflight.Add(-1) }

type options struct {
	onReject func(ctx context.Context)
}

// Option configures the interceptor.
type Option func(*options)

// WithOnReject calls f for every shed call (for a rejection counter).
func WithOnReject(f func(ctx context.Context)) Option {
	return func(o *options) { o.onReject = f }
}

var errShed = reason.Error(codes.ResourceExhausted, reason.Overloaded, "server busy: too many requests in flight")

// UnaryServerInterceptor runs a call only if l has a free slot, and rejects
// it with ResourceExhausted otherwise.
func UnaryServerInterceptor(l *Limiter, opts ...Option) grpc.UnaryServerInterceptor {
	o := options{onReject: func(context.Context) {}}
	for _, opt := range opts {
		opt(&o)
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !l.TryAcquire() {
			o.onReject(ctx)
			retryafter.Set(ctx, time.Second)
			return nil, errShed
		}
		defer l.Release()
		return handler(ctx, req)
	}
}
