package app

import (
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/interceptors/apikey"
	"github.com/shebasvc/sheba/interceptors/concurrency"
	"github.com/shebasvc/sheba/interceptors/concurrency/gradient"
	"github.com/shebasvc/sheba/interceptors/ratelimit"
	"github.com/shebasvc/sheba/interceptors/ratelimit/redislimit"
)

// rateLimits are the global and per-key rate limits (nil when off), and
// the Redis backend that shares them and the login throttle when redis.url
// is set (else nil).
type rateLimits struct {
	global, perKey ratelimit.Limiter
	backend        *redislimit.Backend
}

// newRedisBackend returns the Redis backend of the limits when redis.url is
// set and a limit is on that it would share: a rate, or the login
// throttle (docs/configuration.md#redis). Else it returns nil. It connects
// nowhere: a Redis that is down at start is found out by the first
// decision.
func newRedisBackend(l config.Limits, r config.Redis, log *slog.Logger, tp trace.TracerProvider) (*redislimit.Backend, error) {
	anonRate, _ := l.AnonymousLimit()
	if r.URL == "" || (l.Rate == 0 && anonRate == 0 && l.PerKeyRate == 0 && l.LoginFailures.Max == 0) {
		return nil, nil
	}
	client, err := redislimit.NewClient(r.URL, r.Timeout)
	if err != nil {
		// The URL may hold a password: the parser's message is left out.
		return nil, fmt.Errorf("redis.url does not parse")
	}
	if tp != nil {
		if err := redisotel.InstrumentTracing(client, redisotel.WithTracerProvider(tp)); err != nil {
			_ = client.Close()
			return nil, fmt.Errorf("redis tracing: %w", err)
		}
	}
	return redislimit.New(client, redislimit.WithTimeout(r.Timeout), redislimit.WithFallbackShare(r.FallbackShare),
		redislimit.WithLogger(log)), nil
}

// newRateLimits builds the rate limits of limits: in-process token buckets,
// or, with backend not nil, GCRA in Redis with the backend's conservative
// fallback (redis.fallback_share of each limit, in buckets that start
// empty; docs/configuration.md#redis).
func newRateLimits(l config.Limits, backend *redislimit.Backend, keyIDs []string) rateLimits {
	// Each limit in process, or in Redis under its name.
	global := func(name string, rate float64, burst int) ratelimit.Limiter {
		if backend == nil {
			return ratelimit.NewBucket(rate, burst)
		}
		return backend.Limiter(name, rate, burst, redislimit.Global())
	}
	perKey := func(rate float64, burst int) ratelimit.Limiter {
		if backend == nil {
			return ratelimit.NewPerKey(rate, burst, keyIDs, apikey.IDFromContext)
		}
		return backend.Limiter("key", rate, burst, redislimit.PerKey(keyIDs, apikey.IDFromContext))
	}
	// The global limit is two buckets: one for callers with a key, and one
	// for anonymous callers of public methods, so that a flood of those
	// cannot starve the callers with a key.
	var keyed, anonymous ratelimit.Limiter
	anonRate, anonBurst := l.AnonymousLimit()
	rl := rateLimits{backend: backend}
	if l.Rate > 0 {
		keyed = global("global", l.Rate, l.Burst)
	}
	if anonRate > 0 {
		anonymous = global("anonymous", anonRate, anonBurst)
	}
	if l.PerKeyRate > 0 {
		rl.perKey = perKey(l.PerKeyRate, l.PerKeyBurst)
	}
	if keyed != nil || anonymous != nil {
		rl.global = ratelimit.NewSplit(keyed, anonymous, apikey.IDFromContext)
	}
	return rl
}

// close closes the Redis client, if any.
func (rl rateLimits) close() error {
	if rl.backend == nil {
		return nil
	}
	return rl.backend.Close()
}

// newInflightLimiter returns the concurrency limit of limits: fixed at
// max_inflight, or adaptive between min_inflight and max_inflight.
func newInflightLimiter(l config.Limits) concurrency.Limiter {
	if l.Adaptive {
		return gradient.New(l.MinInflight, l.MaxInflight)
	}
	return concurrency.NewLimiter(l.MaxInflight)
}
