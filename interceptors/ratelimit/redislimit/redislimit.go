package redislimit

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/shebasvc/sheba/interceptors/ratelimit"
)

type options struct {
	timeout    time.Duration
	probeEvery time.Duration
	log        *slog.Logger
}

// Option configures a Backend.
type Option func(*options)

// WithTimeout bounds one decision in Redis (default 5 ms); a slower one is
// answered by the fallback and marks Redis down.
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// WithProbeInterval sets how often a Redis marked down is probed (default
// 1 s).
func WithProbeInterval(d time.Duration) Option {
	return func(o *options) { o.probeEvery = d }
}

// WithLogger logs the changes between Redis and the fallback to log
// (default: discarded).
func WithLogger(log *slog.Logger) Option {
	return func(o *options) { o.log = log }
}

// Backend is Redis as the store of shared rate limits, with the state of
// its health. It is safe for concurrent use.
type Backend struct {
	client  redis.UniversalClient
	rl      *redis_rate.Limiter
	opts    options
	up      atomic.Bool
	probing atomic.Bool
	// stop ends a running probe; probes is waited on by Close.
	ctx    context.Context
	stop   context.CancelFunc
	probes sync.WaitGroup
}

// New returns a Backend on client, assumed up until a decision fails. The
// client should have ContextTimeoutEnabled set (NewClient does), so the
// per-decision timeout reaches the socket.
func New(client redis.UniversalClient, opts ...Option) *Backend {
	o := options{timeout: 5 * time.Millisecond, probeEvery: time.Second, log: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	ctx, stop := context.WithCancel(context.Background())
	b := &Backend{client: client, rl: redis_rate.NewLimiter(client), opts: o, ctx: ctx, stop: stop}
	b.up.Store(true)
	return b
}

// NewClient returns a go-redis client for the redis:// or rediss:// url,
// set up for decisions under a short deadline: the context's deadline
// reaches the socket, a failed command is not retried (the fallback
// answers instead), and connecting is tried once and gives up after
// timeout × 20 (at least 100 ms).
func NewClient(url string, timeout time.Duration) (*redis.Client, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	o.ContextTimeoutEnabled = true
	o.MaxRetries = -1
	o.DialTimeout = max(100*time.Millisecond, 20*timeout)
	// The probe dials again a second later; retrying here only piles up
	// dials to a Redis that is down.
	o.DialerRetries = 1
	return redis.NewClient(o), nil
}

// Up reports whether decisions go to Redis now.
func (b *Backend) Up() bool { return b.up.Load() }

// Close stops the probe, if one runs, and closes the client.
func (b *Backend) Close() error {
	b.stop()
	b.probes.Wait()
	return b.client.Close()
}

// markDown switches decisions to the fallback, once, and starts probing.
func (b *Backend) markDown(err error) {
	if !b.up.CompareAndSwap(true, false) {
		return
	}
	b.opts.log.Warn("rate limits: redis is down or slow; each replica limits alone until it answers",
		"error", err.Error(), "timeout", b.opts.timeout.String())
	if b.probing.CompareAndSwap(false, true) {
		b.probes.Go(b.probe)
	}
}

// probe PINGs Redis until it answers within the timeout, then switches
// decisions back to it.
func (b *Backend) probe() {
	defer b.probing.Store(false)
	t := time.NewTicker(b.opts.probeEvery)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(b.ctx, b.opts.timeout)
		err := b.client.Ping(ctx).Err()
		cancel()
		if err == nil {
			b.up.Store(true)
			b.opts.log.Info("rate limits: redis answers again; limits are shared again")
			return
		}
	}
}

// Do runs f, one decision in Redis, with the Backend's client and under
// its per-decision timeout, and reports whether Redis answered. It returns
// false at once, without running f, while Redis is marked down; and false
// when f fails or is late, which marks Redis down (unless ctx itself ended:
// a caller that went away says nothing about Redis). On false the caller
// decides in process. Every limit kept in Redis decides through Do (the
// Limiters here, the login throttle of server/loginthrottle), so they share
// one client, one up or down state and its log lines.
func (b *Backend) Do(ctx context.Context, f func(ctx context.Context, c redis.UniversalClient) error) bool {
	if !b.up.Load() {
		return false
	}
	dctx, cancel := context.WithTimeout(ctx, b.opts.timeout)
	err := f(dctx, b.client)
	cancel()
	if err != nil {
		if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
			b.markDown(err)
		}
		return false
	}
	return true
}

// Limiter is one rate limit (global, or one per key) kept in Redis, with
// its in-process fallback. It is safe for concurrent use.
type Limiter struct {
	b        *Backend
	prefix   string
	key      func(ctx context.Context) (string, bool)
	limit    redis_rate.Limit
	policy   ratelimit.Policy
	fallback ratelimit.Limiter
}

// Limiter returns a limit of perSecond a second with burst, kept in Redis
// under name plus the call's key: key returns the part of the Redis key
// that identifies the caller, or false when the call is not under this
// limit. fallback answers while Redis is down or slow; it should be the
// in-process limiter of the same rate and burst.
func (b *Backend) Limiter(name string, perSecond float64, burst int, key func(ctx context.Context) (string, bool), fallback ratelimit.Limiter) *Limiter {
	return &Limiter{
		b:        b,
		prefix:   "sheba:" + name + ":",
		key:      key,
		limit:    gcraLimit(perSecond, burst),
		policy:   ratelimit.PolicyOf(perSecond, burst),
		fallback: fallback,
	}
}

// gcraLimit expresses perSecond as redis_rate's whole number of events per
// period: per second when it is whole, else per 1000 s (to a thousandth of
// a call a second).
func gcraLimit(perSecond float64, burst int) redis_rate.Limit {
	if perSecond == math.Trunc(perSecond) {
		return redis_rate.Limit{Rate: int(perSecond), Burst: burst, Period: time.Second}
	}
	return redis_rate.Limit{Rate: int(math.Round(perSecond * 1000)), Burst: burst, Period: 1000 * time.Second}
}

// Global returns a key func for a limit over all callers.
func Global() func(context.Context) (string, bool) {
	return func(context.Context) (string, bool) { return "all", true }
}

// PerKey returns a key func for a limit per caller id: id reads it from the
// call's context, and only the ids listed (the configured API keys) are
// limited, so unknown callers cannot fill Redis with keys.
func PerKey(ids []string, id func(ctx context.Context) string) func(context.Context) (string, bool) {
	known := make(map[string]bool, len(ids))
	for _, k := range ids {
		known[k] = true
	}
	return func(ctx context.Context) (string, bool) {
		k := id(ctx)
		return k, known[k]
	}
}

// Allow decides in Redis, or in the fallback while Redis is down or when
// it does not answer within the timeout.
func (l *Limiter) Allow(ctx context.Context) ratelimit.Decision {
	k, ok := l.key(ctx)
	if !ok {
		return ratelimit.Decision{Allowed: true}
	}
	var res *redis_rate.Result
	if !l.b.Do(ctx, func(ctx context.Context, _ redis.UniversalClient) (err error) {
		res, err = l.b.rl.Allow(ctx, l.prefix+k, l.limit)
		return err
	}) {
		return l.fallback.Allow(ctx)
	}
	d := ratelimit.Decision{
		Allowed:   res.Allowed > 0,
		Policy:    l.policy,
		Remaining: res.Remaining,
		Reset:     max(0, res.ResetAfter),
	}
	if !d.Allowed {
		d.RetryAfter = max(0, res.RetryAfter)
	}
	return d
}
