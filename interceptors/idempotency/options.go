package idempotency

import (
	"context"
	"log/slog"
	"time"
)

// DefaultTTL is how long a record is kept when WithTTL is not given.
const DefaultTTL = 24 * time.Hour

type options struct {
	ttl time.Duration
	log *slog.Logger
	// beforeCommit runs after the record is written, in its transaction
	// (tests break the transaction with it).
	beforeCommit func(ctx context.Context) error
}

// Option configures the interceptor.
type Option func(*options)

// WithTTL keeps records for ttl (DefaultTTL if not given).
func WithTTL(ttl time.Duration) Option {
	return func(o *options) { o.ttl = ttl }
}

// WithLogger logs the database errors behind an Internal or Unavailable
// answer, which say nothing more to the caller, and records that could not
// be written.
func WithLogger(log *slog.Logger) Option {
	return func(o *options) { o.log = log }
}

func evaluateOptions(opts []Option) *options {
	o := &options{
		ttl:          DefaultTTL,
		log:          slog.New(slog.DiscardHandler),
		beforeCommit: func(context.Context) error { return nil },
	}
	for _, opt := range opts {
		opt(o)
	}
	return o
}
