// Package redislimit shares rate limits between replicas through Redis.
//
// A Backend wraps one go-redis client; each Limiter it makes is a
// ratelimit.Limiter that decides with GCRA in Redis
// (github.com/go-redis/redis_rate), one round trip per decision, so every
// replica draws from the same quota. GCRA with rate ρ and burst b admits
// exactly what a token bucket of the same ρ and b does, so the
// RateLimit fields (q, w, r, t) are the same numbers on either backend
// (docs/api.md#rate-limit-headers).
//
// A decision that takes longer than the Backend's timeout (5 ms by
// default), or fails, is answered by the Limiter's in-process fallback, and
// the Backend is marked down: while it is down every decision goes to the
// fallback at once, without waiting on Redis, and a background probe PINGs
// Redis every second; when it answers in time, decisions go back to Redis.
// Each change is logged once. Up reports the state for the
// sheba_ratelimit_backend_up gauge. Do runs any other decision kept in
// Redis (the login throttle of server/loginthrottle) under the same
// timeout, state and fallback rule.
//
// It is not an interceptor: its Limiters plug into the ratelimit
// interceptor, and it returns no codes.
package redislimit
