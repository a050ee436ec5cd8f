package callinfo

import (
	"context"
	"time"
)

// Info describes one call.
type Info struct {
	// RequestID is the call's x-request-id.
	RequestID string
	// CallerID is the id of the caller's API key, "" without a valid key.
	CallerID string
	// RetryAfter is when a call rejected for load may try again, as the
	// rejecting step said with retryafter.Set; 0 when none did.
	RetryAfter time.Duration
}

type key struct{}

// infoContext carries an Info. It is context.WithValue's valueCtx with the
// Info inline, so that a call pays one allocation for both.
type infoContext struct {
	context.Context
	info Info
}

func (c *infoContext) Value(k any) any {
	if k == (key{}) {
		return &c.info
	}
	return c.Context.Value(k)
}

// New returns ctx carrying a new Info with the given request id, and that
// Info, for the outermost interceptor.
func New(ctx context.Context, requestID string) (context.Context, *Info) {
	c := &infoContext{Context: ctx, info: Info{RequestID: requestID}}
	return c, &c.info
}

// NewContext returns ctx carrying info.
func NewContext(ctx context.Context, info *Info) context.Context {
	return context.WithValue(ctx, key{}, info)
}

// FromContext returns the Info of the call in ctx, or nil.
func FromContext(ctx context.Context) *Info {
	info, _ := ctx.Value(key{}).(*Info)
	return info
}
