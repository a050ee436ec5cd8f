package ratelimit

import (
	"context"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/retryafter"
)

// Limiter decides whether a call may proceed now. When it may not, it says
// how long until it could.
type Limiter interface {
	Allow(ctx context.Context) (ok bool, retryAfter time.Duration)
}

type options struct {
	onReject func(ctx context.Context)
	message  string
}

// Option configures the interceptor.
type Option func(*options)

// WithOnReject calls f for every rejected call (for a rejection counter).
func WithOnReject(f func(ctx context.Context)) Option {
	return func(o *options) { o.onReject = f }
}

// WithMessage sets the status message of a rejection (default "rate limit
// exceeded").
func WithMessage(msg string) Option {
	return func(o *options) { o.message = msg }
}

// UnaryServerInterceptor rejects the calls that l does not allow with
// ResourceExhausted and retry-after metadata.
func UnaryServerInterceptor(l Limiter, opts ...Option) grpc.UnaryServerInterceptor {
	o := options{onReject: func(context.Context) {}, message: "rate limit exceeded"}
	for _, opt := range opts {
		opt(&o)
	}
	rejected := status.Error(codes.ResourceExhausted, o.message)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ok, wait := l.Allow(ctx)
		if !ok {
			o.onReject(ctx)
			retryafter.Set(ctx, wait)
			return nil, rejected
		}
		return handler(ctx, req)
	}
}

// Bucket is a token bucket over all callers. It is safe for concurrent use.
type Bucket struct {
	lim *rate.Limiter
}

// NewBucket returns a bucket refilled at perSecond tokens a second, holding at
// most burst.
func NewBucket(perSecond float64, burst int) *Bucket {
	return &Bucket{lim: rate.NewLimiter(rate.Limit(perSecond), burst)}
}

// Allow takes a token if there is one.
func (b *Bucket) Allow(context.Context) (bool, time.Duration) {
	return allow(b.lim)
}

func allow(lim *rate.Limiter) (bool, time.Duration) {
	now := time.Now()
	if lim.AllowN(now, 1) {
		return true, 0
	}
	// Ask when a token would be free without keeping the reservation.
	r := lim.ReserveN(now, 1)
	if !r.OK() {
		return false, time.Second
	}
	wait := r.DelayFrom(now)
	r.CancelAt(now)
	return false, wait
}

// PerKey holds one token bucket per caller id. The set of ids is fixed when
// it is made (the configured API keys), so callers with unknown or rotating
// keys cannot grow it; calls without a known id pass (they are limited by
// the global bucket alone). It is safe for concurrent use.
type PerKey struct {
	buckets map[string]*rate.Limiter
	id      func(ctx context.Context) string
}

// NewPerKey returns per-key buckets for ids, each refilled at perSecond and
// holding at most burst; id reads the caller id from a call's context.
func NewPerKey(perSecond float64, burst int, ids []string, id func(ctx context.Context) string) *PerKey {
	p := &PerKey{buckets: make(map[string]*rate.Limiter, len(ids)), id: id}
	for _, k := range ids {
		p.buckets[k] = rate.NewLimiter(rate.Limit(perSecond), burst)
	}
	return p
}

// Allow takes a token from the caller's bucket if there is one.
func (p *PerKey) Allow(ctx context.Context) (bool, time.Duration) {
	lim, ok := p.buckets[p.id(ctx)]
	if !ok {
		return true, 0
	}
	return allow(lim)
}

// Split sends the calls of anonymous callers (whose id is "") to one
// limiter and every other call to another, so that a flood of
// unauthenticated calls to public methods draws only on its own bucket and
// cannot starve the callers with a key. It is safe for concurrent use if
// its limiters are.
type Split struct {
	keyed, anonymous Limiter
	id               func(ctx context.Context) string
}

// NewSplit returns a Split over keyed and anonymous; id reads the caller id
// from a call's context. A nil limiter lets its calls pass.
func NewSplit(keyed, anonymous Limiter, id func(ctx context.Context) string) *Split {
	return &Split{keyed: keyed, anonymous: anonymous, id: id}
}

// Allow asks the limiter of the caller's kind.
func (s *Split) Allow(ctx context.Context) (bool, time.Duration) {
	l := s.keyed
	if s.id(ctx) == "" {
		l = s.anonymous
	}
	if l == nil {
		return true, 0
	}
	return l.Allow(ctx)
}
