// Package concurrency sheds load: at most a fixed number of calls run at
// once, and a call that finds them all taken is rejected at once, never
// queued.
//
// It sits after authentication and the rate limits (a call they reject
// never takes a slot) and before the timeout and the handler. Rejected calls
// carry a retry hint of 1 second (retryafter.Set).
//
// Codes: ResourceExhausted, reason OVERLOADED.
package concurrency
