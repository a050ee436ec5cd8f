package ratelimit

import (
	"context"
	"math"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/interceptors/retryafter"
)

// Limiter decides whether a call may proceed now, and says where the caller
// stands against the limit. Implementations must be safe for concurrent
// use.
type Limiter interface {
	Allow(ctx context.Context) Decision
}

// Decision is a Limiter's answer for one call.
type Decision struct {
	// Allowed says whether the call may proceed.
	Allowed bool
	// RetryAfter is, for a refused call, how long until one could pass.
	RetryAfter time.Duration
	// Policy is the limit that applied; the zero Policy means the call is
	// not under this limit (no RateLimit fields are sent for it).
	Policy Policy
	// Remaining is the number of calls the caller may still make at once
	// after this one (the draft's r).
	Remaining int
	// Reset is how long until the whole quota is available again (the
	// draft's t, before rounding up to whole seconds).
	Reset time.Duration
}

// Policy is a limit in the terms of the RateLimit-Policy field: Quota
// calls (q) per Window (w). See docs/api.md#rate-limit-headers for how a
// token bucket of a rate and a burst maps to it.
type Policy struct {
	Quota  int
	Window time.Duration
}

// PolicyOf returns the policy of a token bucket refilled at perSecond
// holding at most burst: q = burst, w = burst/perSecond rounded up to whole
// seconds (at least 1).
func PolicyOf(perSecond float64, burst int) Policy {
	return Policy{Quota: burst, Window: time.Duration(Seconds(time.Duration(float64(burst)/perSecond*float64(time.Second)))) * time.Second}
}

// Seconds rounds d up to whole seconds, and 0 for d <= 0: the draft's
// integer form of w and t.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

type options struct {
	onReject func(ctx context.Context)
	message  string
	name     string
	reason   string
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

// WithReason sets the ErrorInfo reason of a rejection (default
// reason.RateLimited).
func WithReason(r string) Option {
	return func(o *options) { o.reason = r }
}

// WithPolicyName names the policy in the RateLimit fields (default
// "default").
func WithPolicyName(name string) Option {
	return func(o *options) { o.name = name }
}

// Limit is one limit of UnaryServerInterceptor.
type Limit struct {
	Limiter Limiter
	Options []Option
}

// UnaryServerInterceptor asks each of limits in turn, and rejects a call at
// the first that does not allow it with ResourceExhausted and retry-after
// metadata; it tells every call the fields of the tightest limit it is
// under (see tighter), once, in ratelimit-policy and ratelimit response
// metadata. All the limits of a call belong in one interceptor: two of
// them chained would each send their fields.
func UnaryServerInterceptor(limits ...Limit) grpc.UnaryServerInterceptor {
	type limit struct {
		Limiter
		options
		policy   *policyName
		rejected error
	}
	ls := make([]limit, len(limits))
	for i, l := range limits {
		o := options{onReject: func(context.Context) {}, message: "rate limit exceeded", name: "default", reason: reason.RateLimited}
		for _, opt := range l.Options {
			opt(&o)
		}
		ls[i] = limit{Limiter: l.Limiter, options: o, policy: newPolicyName(o.name), rejected: reason.Error(codes.ResourceExhausted, o.reason, o.message)}
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		// The tightest decision so far, and its policy (nil for none yet).
		var policy *policyName
		var best Decision
		// Deferred, so that a call that panics below is told them too.
		defer func() { send(ctx, policy, best) }()
		for i := range ls {
			l := &ls[i]
			d := l.Allow(ctx)
			if d.Policy.Quota != 0 && (policy == nil || tighter(d, best)) {
				policy, best = l.policy, d
			}
			if !d.Allowed {
				l.onReject(ctx)
				// Never earlier than the t the caller is told.
				retryafter.Set(ctx, max(d.RetryAfter, time.Duration(Seconds(d.Reset))*time.Second))
				return nil, l.rejected
			}
		}
		return handler(ctx, req)
	}
}

// Bucket is a token bucket over all callers. It is safe for concurrent use.
type Bucket struct {
	lim *rate.Limiter
	shape
}

// shape is what a bucket's limiter was made with, and the clock it reads.
// The limiters are never changed, so it is kept here rather than asked of
// them on every call (rate.Limiter's Limit and Burst take its lock each).
type shape struct {
	policy    Policy
	perSecond float64
	burst     int
	now       func() time.Time
	empty     bool
}

// BucketOption configures a Bucket, or each bucket of a PerKey.
type BucketOption func(*shape)

// WithClock makes the bucket read the time from now rather than
// time.Now. A bucket refills only as its clock runs: redislimit's
// fallback buckets run on a clock that stands still while Redis answers,
// so the time Redis was up never fills them.
func WithClock(now func() time.Time) BucketOption {
	return func(s *shape) { s.now = now }
}

// StartEmpty makes the bucket start with no token rather than full: its
// first token comes 1/perSecond after it is made.
func StartEmpty() BucketOption {
	return func(s *shape) { s.empty = true }
}

func newShape(perSecond float64, burst int, opts []BucketOption) shape {
	s := shape{policy: PolicyOf(perSecond, burst), perSecond: perSecond, burst: burst, now: time.Now}
	for _, opt := range opts {
		opt(&s)
	}
	return s
}

// limiter returns a new bucket of the shape: full, unless StartEmpty.
func (s *shape) limiter() *rate.Limiter {
	lim := rate.NewLimiter(rate.Limit(s.perSecond), s.burst)
	if s.empty {
		lim.AllowN(s.now(), s.burst)
	}
	return lim
}

// NewBucket returns a bucket refilled at perSecond tokens a second, holding at
// most burst; full unless StartEmpty says otherwise.
func NewBucket(perSecond float64, burst int, opts ...BucketOption) *Bucket {
	b := &Bucket{shape: newShape(perSecond, burst, opts)}
	b.lim = b.limiter()
	return b
}

// Allow takes a token if there is one.
func (b *Bucket) Allow(context.Context) Decision {
	return b.allow(b.lim)
}

// allow takes a token of lim, one of the shape's buckets, if there is one.
func (s *shape) allow(lim *rate.Limiter) Decision {
	now := s.now()
	p := s.policy
	d := Decision{Allowed: true, Policy: p}
	if !lim.AllowN(now, 1) {
		d.Allowed = false
		// Ask when a token would be free without keeping the reservation.
		r := lim.ReserveN(now, 1)
		if !r.OK() {
			d.RetryAfter = time.Second
		} else {
			d.RetryAfter = r.DelayFrom(now)
			r.CancelAt(now)
		}
	}
	tokens := max(0, lim.TokensAt(now))
	d.Remaining = int(tokens)
	d.Reset = time.Duration((float64(s.burst) - tokens) / s.perSecond * float64(time.Second))
	return d
}

// PerKey holds one token bucket per caller id. The set of ids is fixed when
// it is made (the configured API keys), so callers with unknown or rotating
// keys cannot grow it; calls without a known id pass (they are limited by
// the global bucket alone). It is safe for concurrent use.
type PerKey struct {
	buckets map[string]*rate.Limiter
	id      func(ctx context.Context) string
	shape
}

// NewPerKey returns per-key buckets for ids, each refilled at perSecond and
// holding at most burst, and made with opts as NewBucket's are; id reads
// the caller id from a call's context.
func NewPerKey(perSecond float64, burst int, ids []string, id func(ctx context.Context) string, opts ...BucketOption) *PerKey {
	p := &PerKey{buckets: make(map[string]*rate.Limiter, len(ids)), id: id, shape: newShape(perSecond, burst, opts)}
	for _, k := range ids {
		p.buckets[k] = p.limiter()
	}
	return p
}

// Allow takes a token from the caller's bucket if there is one.
func (p *PerKey) Allow(ctx context.Context) Decision {
	lim, ok := p.buckets[p.id(ctx)]
	if !ok {
		return Decision{Allowed: true}
	}
	return p.allow(lim)
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
func (s *Split) Allow(ctx context.Context) Decision {
	l := s.keyed
	if s.id(ctx) == "" {
		l = s.anonymous
	}
	if l == nil {
		return Decision{Allowed: true}
	}
	return l.Allow(ctx)
}
