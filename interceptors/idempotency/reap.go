package idempotency

import (
	"context"
	"log/slog"
	"time"
)

// Deleter deletes expired records; *store.Store implements it.
type Deleter interface {
	DeleteExpiredIdempotencyKeys(ctx context.Context, limit int) (int64, error)
}

// reapBatch is the most records one statement deletes: enough to keep up
// with thousands of keyed requests a second, few enough that no statement
// holds its row locks for long.
const reapBatch = 500

// ReapInterval returns how often Reap should run for records kept ttl: every
// minute, or every ttl when that is shorter.
func ReapInterval(ttl time.Duration) time.Duration {
	return min(ttl, time.Minute)
}

// Reap deletes expired records every interval until ctx is done, in batches
// of a few hundred per statement, each committed on its own, until a batch
// comes back short. Expired records are already ignored by the interceptor,
// so a late or failed reap costs only space; a failure is logged and tried
// again at the next tick. Several replicas may reap at once.
func Reap(ctx context.Context, d Deleter, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for {
			n, err := d.DeleteExpiredIdempotencyKeys(ctx, reapBatch)
			if err != nil {
				if ctx.Err() == nil {
					log.WarnContext(ctx, "idempotency: reaping expired keys failed", "error", err)
				}
				break
			}
			if n < reapBatch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
