// Package callinfo carries what the outer interceptors (request log,
// metrics) need to know about a call but can only learn from inner ones:
// the caller identity, found by authentication deeper in the chain.
//
// The outermost interceptor puts an *Info in the context; inner steps fill
// it in; outer steps read it after the handler returns. An Info belongs to
// one call and is written and read by that call's goroutine only.
package callinfo

import "context"

// Info describes one call.
type Info struct {
	// RequestID is the call's x-request-id.
	RequestID string
	// CallerID is the id of the caller's API key, "" without a valid key.
	CallerID string
}

type key struct{}

// NewContext returns ctx carrying info.
func NewContext(ctx context.Context, info *Info) context.Context {
	return context.WithValue(ctx, key{}, info)
}

// FromContext returns the Info of the call in ctx, or nil.
func FromContext(ctx context.Context) *Info {
	info, _ := ctx.Value(key{}).(*Info)
	return info
}
