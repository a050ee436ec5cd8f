package requestlog

import "time"

// WithClock makes the interceptor read the time from now: the same call
// then writes the same line through any handler.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}
