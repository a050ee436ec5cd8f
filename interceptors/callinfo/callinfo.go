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
