package concurrency

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/interceptors/retryafter"
)

// Limiter admits calls up to a limit, which may move (the gradient
// package's adaptive limiter) or not (Fixed). Implementations must be safe
// for concurrent use.
type Limiter interface {
	// TryAcquire takes a slot if one is free, at once: it never waits. Each
	// successful TryAcquire must be followed by one Release.
	TryAcquire() bool
	// Release frees a slot. start is when the call was admitted; measured
	// is false for a call whose latency says nothing about the server (the
	// caller cancelled it), which an adaptive limiter must not learn from.
	Release(start time.Time, measured bool)
	// InFlight returns the number of calls running now.
	InFlight() int64
	// Limit returns the current limit.
	Limit() int
}

// Fixed counts the calls in flight against a fixed maximum. A bare atomic
// counter rather than golang.org/x/sync/semaphore: shedding needs only a
// non-blocking try, which one atomic add gives without a mutex. It is safe
// for concurrent use.
type Fixed struct {
	max      int64
	inflight atomic.Int64
}

// NewLimiter returns a Fixed limiter that lets max calls run at once.
func NewLimiter(max int) *Fixed {
	return &Fixed{max: int64(max)}
}

// InFlight returns the number of calls running now.
func (l *Fixed) InFlight() int64 { return l.inflight.Load() }

// Limit returns the maximum.
func (l *Fixed) Limit() int { return int(l.max) }

// TryAcquire takes a slot if one is free.
func (l *Fixed) TryAcquire() bool {
	if l.inflight.Add(1) > l.max {
		l.inflight.Add(-1)
		return false
	}
	return true
}

// Release frees a slot.
func (l *Fixed) Release(time.Time, bool) { l.inflight.Add(-1) }

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
// it with ResourceExhausted otherwise. Every admitted call's latency is
// reported to l on release, except calls the client cancelled (and calls
// that panicked), which are released unmeasured.
func UnaryServerInterceptor(l Limiter, opts ...Option) grpc.UnaryServerInterceptor {
	o := options{onReject: func(context.Context) {}}
	for _, opt := range opts {
		opt(&o)
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		if !l.TryAcquire() {
			o.onReject(ctx)
			retryafter.Set(ctx, time.Second)
			return nil, errShed
		}
		start := time.Now()
		measured := false
		defer func() { l.Release(start, measured) }()
		resp, err = handler(ctx, req)
		measured = !cancelled(ctx, err)
		return resp, err
	}
}

// cancelled reports whether the caller gave up on the call: its latency
// is the client's choice, not the server's, so it is no sign of load.
func cancelled(ctx context.Context, err error) bool {
	return errors.Is(ctx.Err(), context.Canceled) || status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled)
}
