// Package callinfo carries what the outer interceptors (request log,
// metrics) need to know about a call but can only learn from inner ones:
// the caller identity, found by authentication deeper in the chain.
//
// The outermost interceptor puts an *Info in the context; inner steps fill
// it in; outer steps read it after the handler returns. An Info belongs to
// one call and is written and read by that call's goroutine only.
package callinfo
