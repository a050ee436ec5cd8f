package redislimit

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/shebasvc/sheba/interceptors/ratelimit"
)

// Defaults of the options. Config's redis section has the same timeout
// and fallback share (internal/app's TestRedisDefaults holds them equal).
const (
	// DefaultTimeout bounds one decision in Redis: Envoy's rate-limit
	// filter's default. 5 ms, the default before, was missed often enough
	// on a busy 2-core machine to send replicas to their fallback.
	DefaultTimeout = 20 * time.Millisecond
	// DefaultFallbackShare is the share of each rate (and burst) that a
	// replica's fallback admits while Redis is down or slow.
	DefaultFallbackShare = 0.5
	// DefaultGrace is how long decisions may keep running late before
	// Redis counts as slow (see WithGrace).
	DefaultGrace = 250 * time.Millisecond
)

type options struct {
	timeout    time.Duration
	grace      time.Duration
	probeEvery time.Duration
	share      float64
	log        *slog.Logger
}

// Option configures a Backend.
type Option func(*options)

// WithTimeout bounds one decision in Redis (default DefaultTimeout); a
// slower one is answered by the fallback.
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// WithGrace sets how long decisions may keep running past the timeout,
// with none answered in time between them, before Redis counts as slow
// and is marked down (default DefaultGrace). A decision that fails
// otherwise (Redis refuses the connection, resets it, answers an error)
// marks it down at once. 0 marks it down at the first late decision.
func WithGrace(d time.Duration) Option {
	return func(o *options) { o.grace = d }
}

// WithProbeInterval sets how often a Redis marked down is probed once it
// has been down for a while (default 1 s): the first probe comes a tenth
// of it after Redis was marked down, and the wait doubles up to it.
func WithProbeInterval(d time.Duration) Option {
	return func(o *options) { o.probeEvery = d }
}

// WithFallbackShare sets the share of each limit's rate and burst that its
// fallback admits, in (0, 1] (default DefaultFallbackShare).
func WithFallbackShare(share float64) Option {
	return func(o *options) { o.share = share }
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
	// lateSince is when decisions started running late: the first late
	// one since the last in time, as time since the clock's epoch plus 1,
	// so that 0 means none is late.
	lateSince atomic.Int64
	// clock is the time of the fallback buckets.
	clock fallbackClock
	// allowed and denied count the fallback's decisions.
	fallbackDecisions *prometheus.CounterVec
	allowed, denied   prometheus.Counter
	// stop ends a running probe; probes is waited on by Close.
	ctx    context.Context
	stop   context.CancelFunc
	probes sync.WaitGroup
}

// New returns a Backend on client, assumed up until a decision fails. The
// client should have ContextTimeoutEnabled set (NewClient does), so the
// per-decision timeout reaches the socket.
func New(client redis.UniversalClient, opts ...Option) *Backend {
	o := options{
		timeout:    DefaultTimeout,
		grace:      DefaultGrace,
		probeEvery: time.Second,
		share:      DefaultFallbackShare,
		log:        slog.New(slog.DiscardHandler),
	}
	for _, opt := range opts {
		opt(&o)
	}
	ctx, stop := context.WithCancel(context.Background())
	b := &Backend{
		client: client, rl: redis_rate.NewLimiter(client), opts: o,
		fallbackDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sheba_ratelimit_fallback_decisions_total",
			Help: "Rate-limit decisions taken by this replica's fallback buckets (Redis down, or late), by result: allowed or denied.",
		}, []string{"result"}),
		ctx: ctx, stop: stop,
	}
	b.clock.init(time.Now())
	b.allowed, b.denied = b.fallbackDecisions.WithLabelValues("allowed"), b.fallbackDecisions.WithLabelValues("denied")
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
	// The probe dials again soon (a tenth of the probe interval after Redis
	// is marked down, the wait doubling up to the interval); retrying here
	// only piles up dials to a Redis that is down.
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
	b.clock.run()
	b.lateSince.Store(0)
	b.opts.log.Warn("rate limits: redis is down or slow; this replica limits alone, at redis.fallback_share of each rate, until it answers",
		"error", err.Error(), "timeout", b.opts.timeout.String(), "fallback_share", b.opts.share)
	if b.probing.CompareAndSwap(false, true) {
		b.probes.Go(b.probe)
	}
}

// late notes a decision that ran past the timeout, and marks Redis down
// when decisions have been late for the grace with none in time between.
// A lone late decision does not: on a busy machine a replica's own
// goroutines (or Redis's process) wait for a CPU now and then, which is
// no outage, and marking Redis down for it sent replicas to their
// fallback until a probe found Redis back.
//
// sony/gobreaker, the hook's breaker, is not used for this: its trip
// rule sees counts, not errors, so it cannot switch at once on a refused
// connection and only after a while on late answers; and a count of late
// decisions in a row trips on a single stall, which makes every decision
// in flight late at once.
func (b *Backend) late(err error) {
	now := int64(time.Since(b.clock.epoch)) + 1
	since := b.lateSince.Load()
	switch {
	case !b.up.Load():
		// A decision sent before Redis was marked down: its lateness is
		// already told, and noting it would count against Redis once back.
	case b.opts.grace <= 0:
		b.markDown(err)
	case since == 0:
		b.lateSince.CompareAndSwap(0, now)
	case time.Duration(now-since) >= b.opts.grace:
		b.markDown(err)
	}
}

// probe PINGs Redis until it answers within the timeout, then switches
// decisions back to it. The first probes come soon: a Redis marked down
// because the replica's machine stalled answers at once, and while the
// replica waits for the next probe it admits only its fallback share.
func (b *Backend) probe() {
	defer b.probing.Store(false)
	wait := b.opts.probeEvery / 10
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		wait = min(2*wait, b.opts.probeEvery)
		t.Reset(wait)
		ctx, cancel := context.WithTimeout(b.ctx, b.opts.timeout)
		err := b.client.Ping(ctx).Err()
		cancel()
		if err == nil {
			// The fallback's clock stops before decisions go back to Redis,
			// so the time Redis answers never fills its buckets.
			b.clock.stop()
			b.lateSince.Store(0)
			b.up.Store(true)
			b.opts.log.Info("rate limits: redis answers again; limits are shared again")
			return
		}
	}
}

// Do runs f, one decision in Redis, with the Backend's client and under
// its per-decision timeout, and reports whether Redis answered in time. It
// returns false at once, without running f, while Redis is marked down;
// and false when f fails or is late. A failure marks Redis down at once; a
// late answer only when decisions have been late for the grace (see
// WithGrace); neither when ctx itself ended (a caller that went away says
// nothing about Redis). On false the caller decides in process. Every
// limit kept in Redis decides through Do (the Limiters here, the login
// throttle of server/loginthrottle), so they share one client, one up or
// down state and its log lines.
func (b *Backend) Do(ctx context.Context, f func(ctx context.Context, c redis.UniversalClient) error) bool {
	if !b.up.Load() {
		return false
	}
	dctx, cancel := context.WithTimeout(ctx, b.opts.timeout)
	err := f(dctx, b.client)
	cancel()
	switch {
	case err == nil:
		// Read first: a store on every decision would make the replica's
		// cores fight over one cache line.
		if b.lateSince.Load() != 0 {
			b.lateSince.Store(0)
		}
		return true
	case ctx.Err() != nil:
		// The caller went away, or its own deadline passed: that says
		// nothing of Redis.
	case timedOut(err):
		b.late(err)
	default:
		b.markDown(err)
	}
	return false
}

// timedOut reports whether err says Redis was late rather than down: the
// decision's deadline passed while it dialled, waited for a connection,
// wrote or read.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrPoolTimeout) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// fallbackClock is the time of the fallback buckets. It runs only while
// Redis is marked down, from the epoch on, so the buckets refill only
// while they are the limit: a Redis that answers for an hour, or flaps,
// never finds them refilled by the time it answered. The buckets stay
// x/time/rate's, which decides at whatever time it is given; this is the
// time they are given. It is safe for concurrent use; run and stop are
// called by one goroutine at a time (the one that marked Redis down, then
// its probe).
type fallbackClock struct {
	epoch time.Time
	state atomic.Pointer[clockState]
}

// clockState is a fallbackClock's reading: it ran for ran until it was
// stopped, or until since, when it was started again (zero while it
// stands still).
type clockState struct {
	ran   time.Duration
	since time.Time
}

// init sets the clock at epoch, standing still.
func (c *fallbackClock) init(epoch time.Time) {
	c.epoch = epoch
	c.state.Store(&clockState{})
}

// now is the clock's time.
func (c *fallbackClock) now() time.Time {
	s := c.state.Load()
	if s.since.IsZero() {
		return c.epoch.Add(s.ran)
	}
	return c.epoch.Add(s.ran + time.Since(s.since))
}

func (c *fallbackClock) run() {
	c.state.Store(&clockState{ran: c.state.Load().ran, since: time.Now()})
}

func (c *fallbackClock) stop() {
	s := c.state.Load()
	if s.since.IsZero() {
		return
	}
	c.state.Store(&clockState{ran: s.ran + time.Since(s.since)})
}

// Limiter is one rate limit (global, or one per key) kept in Redis, with
// its in-process fallback. It is safe for concurrent use.
type Limiter struct {
	b      *Backend
	prefix string
	key    func(ctx context.Context) (string, bool)
	limit  redis_rate.Limit
	policy ratelimit.Policy
	// fallback decides while Redis is down or late: one bucket, or one per
	// key of the Scope, made with the Limiter and kept for the process.
	fallback ratelimit.Limiter
}

// Limiter returns a limit of perSecond a second with burst, kept in Redis
// under name plus the key scope finds for the call: one for all callers
// (Global), or one per caller (PerKey).
//
// While Redis is down or late, the call's key is limited by a bucket of
// this replica's own, of the Backend's fallback share of perSecond and of
// burst (at least 1). It starts empty when the Limiter is made, refills
// only while Redis is marked down (see fallbackClock) and is kept for the
// process, so a Redis that flaps never grants a fresh burst: over any
// stretch of time, the fallback admits at most share × perSecond a second
// of the time Redis was down, plus what its bucket held.
func (b *Backend) Limiter(name string, perSecond float64, burst int, scope Scope) *Limiter {
	return &Limiter{
		b:      b,
		prefix: "sheba:" + name + ":",
		key:    scope.key,
		limit:  gcraLimit(perSecond, burst),
		policy: ratelimit.PolicyOf(perSecond, burst),
		fallback: scope.fallback(b.opts.share*perSecond, max(1, int(b.opts.share*float64(burst))),
			ratelimit.StartEmpty(), ratelimit.WithClock(b.clock.now)),
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

// Scope is whom a Limiter's limit is over: all callers (Global), or each
// of a set of callers (PerKey).
type Scope struct {
	// key returns the part of the Redis key that identifies the caller, or
	// false when the call is not under the limit.
	key func(ctx context.Context) (string, bool)
	// fallback returns the in-process limit of the same scope, its buckets
	// made with opts.
	fallback func(perSecond float64, burst int, opts ...ratelimit.BucketOption) ratelimit.Limiter
}

// Global returns the scope of a limit over all callers.
func Global() Scope {
	return Scope{
		key: func(context.Context) (string, bool) { return "all", true },
		fallback: func(perSecond float64, burst int, opts ...ratelimit.BucketOption) ratelimit.Limiter {
			return ratelimit.NewBucket(perSecond, burst, opts...)
		},
	}
}

// PerKey returns the scope of a limit per caller id: id reads it from the
// call's context, and only the ids listed (the configured API keys) are
// limited, so unknown callers cannot fill Redis with keys.
func PerKey(ids []string, id func(ctx context.Context) string) Scope {
	ids = slices.Clone(ids)
	known := make(map[string]bool, len(ids))
	for _, k := range ids {
		known[k] = true
	}
	return Scope{
		key: func(ctx context.Context) (string, bool) {
			k := id(ctx)
			return k, known[k]
		},
		fallback: func(perSecond float64, burst int, opts ...ratelimit.BucketOption) ratelimit.Limiter {
			return ratelimit.NewPerKey(perSecond, burst, ids, id, opts...)
		},
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
		return l.fallbackAllow(ctx)
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

// fallbackAllow decides in the fallback, and counts it.
func (l *Limiter) fallbackAllow(ctx context.Context) ratelimit.Decision {
	d := l.fallback.Allow(ctx)
	if d.Allowed {
		l.b.allowed.Inc()
	} else {
		l.b.denied.Inc()
	}
	return d
}
