package standby

import "time"

// WithClock sets the clock of the recent writes, for tests that move it.
func WithClock(now func() time.Duration) Option {
	return func(o *options) { o.now = now }
}
