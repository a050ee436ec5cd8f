package idempotency

import "context"

// WithBeforeCommit runs f after the record is written, inside its
// transaction: an error from f rolls the change and the record back, as a
// crash before the commit would.
func WithBeforeCommit(f func(ctx context.Context) error) Option {
	return func(o *options) { o.beforeCommit = f }
}

// ReapBatch is reapBatch, for tests.
const ReapBatch = reapBatch
