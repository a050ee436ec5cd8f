// Package failfast answers at once, rather than at the deadline, the calls
// that need a dependency while that dependency is down.
//
// A health checker elsewhere decides whether the dependency (Postgres) is
// up; while it is not, the calls that need it answer Unavailable at once
// instead of each waiting for its deadline on connection attempts, and the
// calls that do not need it (a ping) still run.
//
// It sits after auth, the rate and concurrency limits and the timeout, so a
// call it refuses has been authenticated, limited and counted like any
// other, and before idempotency (internal/app/chain.go), so a call it
// refuses opens no transaction and takes no idempotency key.
//
// Codes: Unavailable, reason DATABASE_UNAVAILABLE unless WithReason names
// another; the errordetails interceptor adds a retry hint of 1 second.
package failfast
