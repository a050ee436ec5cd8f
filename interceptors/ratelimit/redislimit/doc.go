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
// A decision that takes longer than the Backend's timeout (20 ms by
// default, as Envoy's rate-limit filter) or fails is answered at once by
// the Limiter's fallback. A failure (Redis refuses the connection, resets
// it, answers an error) also marks the Backend down at once; late answers
// do so only when decisions have kept running late for a grace (250 ms by
// default) with none in time between, as a replica on a busy machine
// waits for a CPU now and then without Redis being out. While the Backend
// is down every decision goes to the fallback at once, without waiting on
// Redis, and a background probe PINGs Redis, soon at first, then every
// second; when it answers in time, decisions go back to Redis. Each change
// is logged once. Up reports the state for the sheba_ratelimit_backend_up
// gauge. Do runs any other decision kept in Redis (the login throttle of
// server/loginthrottle) under the same timeout, state and fallback rule.
//
// The fallback is conservative: a token bucket per limit and key of the
// Backend's fallback share (0.5 by default) of the rate and of the burst,
// that starts empty and refills only while the Backend is down, on a
// clock that stands still while Redis answers. The buckets live as long as
// the Backend, so a Redis that flaps never grants a fresh burst.
// sheba_ratelimit_fallback_decisions_total counts what they decide.
//
// It is not an interceptor: its Limiters plug into the ratelimit
// interceptor, and it returns no codes.
package redislimit
