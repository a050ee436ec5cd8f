// Package concurrency sheds load: at most a limited number of calls run at
// once, and a call that finds them all taken is rejected at once, never
// queued.
//
// It sits after authentication and the rate limits (a call they reject
// never takes a slot) and before the timeout and the handler. Rejected calls
// carry a retry hint of 1 second (retryafter.Set).
//
// The limit is a Limiter: Fixed here, or the adaptive gradient limiter of
// the gradient package, which learns from the latency of the calls this
// interceptor admits (cancelled calls excepted).
//
// Its stream side bounds the streams open at once over every connection,
// with a Fixed Limiter of their own. It is the first stream interceptor of
// the server, before the drain's (a refused stream then costs no
// goroutine), and every stream of the server counts: today those are
// health Watch and reflection, which need no key and never end by
// themselves; a stream of the API would need a rule of its own.
//
// Codes: ResourceExhausted, reason OVERLOADED (calls) or TOO_MANY_STREAMS
// (streams).
package concurrency
