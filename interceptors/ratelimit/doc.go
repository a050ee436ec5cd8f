// Package ratelimit rejects calls over a rate: a global token bucket over all
// callers, and one bucket per API key. Split gives anonymous callers (of
// public methods, with no key) a bucket of their own, so they cannot starve
// the callers with a key.
//
// It sits after authentication (the per-key limit needs the caller id) and
// before the concurrency limit, so a call over its rate never takes an
// in-flight slot. A rejected call carries "retry-after" response metadata
// (whole seconds, at least 1) computed from the bucket; the REST gateway
// turns it into a Retry-After header.
//
// go-grpc-middleware's ratelimit interceptor is not used: its Limiter can
// only fail, so it cannot say when to retry, and its message names the
// middleware rather than the limit.
//
// Codes: ResourceExhausted.
package ratelimit
