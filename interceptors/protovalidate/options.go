package protovalidate

import "log/slog"

type options struct {
	log *slog.Logger
	// answers is the interceptor's cache of answers (nil for Check).
	answers *answers
}

var defaultOptions = options{log: slog.New(slog.DiscardHandler)}

// Option configures the interceptor.
type Option func(*options)

// WithLogger logs the failures of the validator other than an invalid
// request (which the request log records as any answer) to log; by default
// they are not logged.
func WithLogger(log *slog.Logger) Option {
	return func(o *options) { o.log = log }
}

func evaluateOptions(opts []Option) *options {
	o := defaultOptions
	for _, f := range opts {
		f(&o)
	}
	return &o
}
