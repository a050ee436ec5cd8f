// Package gradient is an adaptive concurrency limit: the Gradient2
// algorithm published with Netflix's concurrency-limits library, in the
// manner of Envoy's adaptive concurrency filter. It compares a short-term
// latency (the mean of the last window of calls) with a long-term one (an
// average that falls fast and rises over minutes, unlike Gradient2's
// symmetric one, which lets sustained overload become the baseline): while the short one stays within
// a tolerance (1.5×) of the long one, the limit grows by about its square
// root per window; when it rises above, the limit shrinks in proportion
// (at most halving per window before smoothing). The limit stays between
// a minimum and a maximum, and it never grows while the calls in flight
// stay under half of it (nothing shows that more would be served well).
//
// Written here rather than taken from failsafe-go's adaptivelimiter, which
// does fit the interceptor (a non-blocking TryAcquirePermit, and Drop for
// calls not to learn from): its permits read the wall clock with no way to
// give them another, so its behaviour cannot be tested deterministically
// (a fake clock, a simulated GC pause), and its limit needs 50 samples and
// a second per update by default. The algorithm here is small, and
// Observe takes the time as an argument, so tests drive it with a
// simulated clock.
//
// It is not an interceptor: a Limiter plugs into the concurrency
// interceptor, which reports to it the latency of every call it admits
// except those the client cancelled. It returns no codes.
package gradient
