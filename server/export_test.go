package server

import "context"

// WithHandlerHook runs hook around every handler, inside the whole chain
// (tests count, slow down or break handlers with it).
func WithHandlerHook(hook func(ctx context.Context, method string) error) Option {
	return func(o *options) { o.hook = hook }
}
