// Package ratelimit rejects calls over a rate: a global token bucket over all
// callers, and one bucket per API key. Split gives anonymous callers (of
// public methods, with no key) a bucket of their own, so they cannot starve
// the callers with a key.
//
// It sits after authentication (the per-key limit needs the caller id) and
// before the concurrency limit, so a call over its rate never takes an
// in-flight slot. A rejected call carries a retry hint computed from the
// bucket (retryafter.Set), which the errordetails interceptor turns into
// "retry-after" metadata (whole seconds, at least 1) and a RetryInfo; the
// REST gateway turns the metadata into a Retry-After header.
//
// Every call under a limit is told where it stands in the syntax of
// draft-ietf-httpapi-ratelimit-headers-11: "ratelimit-policy" (q, w) and
// "ratelimit" (r, t) response metadata, which the gateway sends as the
// RateLimit-Policy and RateLimit headers. With the global and the per-key
// limits in one interceptor (UnaryServerInterceptor), only the
// tightest limit is told (docs/api.md#rate-limit-headers). On a rejection, retry-after is never
// earlier than t.
//
// The Limiter is an interface: the in-process token buckets here, or the
// limits shared through Redis in the redislimit package.
//
// go-grpc-middleware's ratelimit interceptor is not used: its Limiter can
// only fail, so it cannot say when to retry, and its message names the
// middleware rather than the limit.
//
// Codes: ResourceExhausted, reason RATE_LIMITED unless WithReason names
// another (sheba's per-key limit uses KEY_RATE_LIMITED).
package ratelimit
