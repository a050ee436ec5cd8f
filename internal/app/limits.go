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
// the Redis backend that shares them when redis.url is set (else nil).
type rateLimits struct {
	global, perKey ratelimit.Limiter
	backend        *redislimit.Backend
}

// newRateLimits builds the rate limits of limits: in-process token buckets,
// or, with redis.url set, GCRA in Redis with those buckets as the fallback
// (docs/configuration.md#redis). It connects nowhere: a Redis that is down
// at start is found out by the first decision.
func newRateLimits(l config.Limits, r config.Redis, keyIDs []string, log *slog.Logger, tp trace.TracerProvider) (rateLimits, error) {
	// The global limit is two buckets: one for callers with a key, and one
	// for anonymous callers of public methods, so that a flood of those
	// cannot starve the callers with a key.
	var keyed, anonymous ratelimit.Limiter
	anonRate, anonBurst := l.AnonymousLimit()
	if l.Rate > 0 {
		keyed = ratelimit.NewBucket(l.Rate, l.Burst)
	}
	if anonRate > 0 {
		anonymous = ratelimit.NewBucket(anonRate, anonBurst)
	}
	var rl rateLimits
	if l.PerKeyRate > 0 {
		rl.perKey = ratelimit.NewPerKey(l.PerKeyRate, l.PerKeyBurst, keyIDs, apikey.IDFromContext)
	}
	if r.URL != "" && (keyed != nil || anonymous != nil || rl.perKey != nil) {
		client, err := redislimit.NewClient(r.URL, r.Timeout)
		if err != nil {
			// The URL may hold a password: the parser's message is left out.
			return rateLimits{}, fmt.Errorf("redis.url does not parse")
		}
		if tp != nil {
			if err := redisotel.InstrumentTracing(client, redisotel.WithTracerProvider(tp)); err != nil {
				return rateLimits{}, fmt.Errorf("redis tracing: %w", err)
			}
		}
		rl.backend = redislimit.New(client, redislimit.WithTimeout(r.Timeout), redislimit.WithLogger(log))
		if keyed != nil {
			keyed = rl.backend.Limiter("global", l.Rate, l.Burst, redislimit.Global(), keyed)
		}
		if anonymous != nil {
			anonymous = rl.backend.Limiter("anonymous", anonRate, anonBurst, redislimit.Global(), anonymous)
		}
		if rl.perKey != nil {
			rl.perKey = rl.backend.Limiter("key", l.PerKeyRate, l.PerKeyBurst, redislimit.PerKey(keyIDs, apikey.IDFromContext), rl.perKey)
		}
	}
	if keyed != nil || anonymous != nil {
		rl.global = ratelimit.NewSplit(keyed, anonymous, apikey.IDFromContext)
	}
	return rl, nil
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
