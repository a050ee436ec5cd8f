// Package loginthrottle slows repeated failed logins (docs/api.md#login).
// Failures count per username and caller (the API key id): after max
// failures of one caller for a username within a window, further logins
// of that caller for it answer 429 RESOURCE_EXHAUSTED, reason
// LOGIN_THROTTLED, with a retry hint of what is left of the window, until
// it has passed; one caller's failures never throttle another's logins.
// A ceiling over every caller, maxAll failures for a username within a
// window (10 × max by default), throttles its logins for every caller
// alike, so a guess spread over many keys stays bounded too. The answer
// is the same whether the username exists or not: the Login handler
// counts an unknown username's failures as it counts a wrong password's,
// and a throttled login is answered the same, at once, for both.
//
// It is not an interceptor: the Login handler calls Begin after validating
// the request and before any lookup or password hash, so a throttled login
// costs neither, and ends the attempt with its Result: a failure counts
// (for its caller and for every caller), a success starts its caller
// afresh (the caller knows the password; the count over every caller runs
// out its window), and an undecided login (the database down, the hashing
// queue full, the deadline passed) counts for nothing, as nothing was
// learnt of the password.
//
// A window starts with the first failure and lasts its full length:
// throttled logins do not extend it, so a throttled user gets back in when
// the Retry-After they were told has passed, and a guesser gets at most max
// tries a window per key, and maxAll over all keys. Logins of one username
// by one caller take turns on each replica (gate), so concurrent ones are
// judged one after the other, none refused for being concurrent and none
// let past max together.
//
// The counts are kept in process (local.go), in bounded structures, or in
// Redis (shared.go) through the Backend of the rate limits
// (interceptors/ratelimit/redislimit), so that every replica sees the same
// counts; while Redis is down or slow each replica counts in process, as
// the rate limits fall back to their buckets, and the Backend logs the
// change once.
//
// Codes (from Begin): ResourceExhausted, reason LOGIN_THROTTLED
// (ErrThrottled); ErrBusy and context errors, which the caller maps.
package loginthrottle
