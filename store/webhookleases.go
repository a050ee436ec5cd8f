package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// WebhookLease is one slot of an endpoint's cap on attempts in flight,
// held by one attempt until it is released or expires.
type WebhookLease struct {
	EndpointID string
	Slot       int
	// Holder tells this lease from a later one of the same slot.
	Holder string
}

// AcquireWebhookLease takes one of the endpoint's slots (0 to slots-1)
// that no lease holds, or whose lease has expired, for d by the database's
// clock, and returns it; ok is false if every slot is held. It returns
// ErrNotFound if the endpoint is gone.
//
// At most slots leases of an endpoint are unexpired at once, however many
// callers on however many replicas acquire together: the primary key
// (endpoint, slot) lets one insert a slot's row, and the conflict's update
// takes the row over only where it has expired, which two callers cannot
// both see (the second waits for the first and reads its lease). The row
// exists only while the slot is held, so there are no rows to lock for a
// FOR UPDATE SKIP LOCKED, nor to keep in step with slots; instead each
// caller draws a free slot at random, so that callers at once rarely pick
// the same. One that loses the draw finds ok false, as if the slots were
// all held, and tries again later.
func (s *Store) AcquireWebhookLease(ctx context.Context, endpointID string, slots int, d time.Duration) (lease WebhookLease, ok bool, err error) {
	lease.EndpointID = endpointID
	err = s.db(ctx).QueryRow(ctx, `
		INSERT INTO webhook_leases AS l (endpoint_id, slot, holder, expire_time)
		SELECT $1, free.slot, gen_random_uuid(), now() + $3 * interval '1 microsecond'
		FROM generate_series(0, $2::integer - 1) AS free (slot)
		WHERE NOT EXISTS (
			SELECT 1 FROM webhook_leases h
			WHERE h.endpoint_id = $1 AND h.slot = free.slot AND h.expire_time > now())
		ORDER BY random()
		LIMIT 1
		ON CONFLICT (endpoint_id, slot) DO UPDATE
		SET holder = excluded.holder, expire_time = excluded.expire_time
		WHERE l.expire_time <= now()
		RETURNING slot, holder`, endpointID, slots, d.Microseconds()).Scan(&lease.Slot, &lease.Holder)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return WebhookLease{}, false, nil
	case err != nil:
		return WebhookLease{}, false, fmt.Errorf("acquire a lease of webhook endpoint %q: %w", endpointID, translate(err))
	}
	return lease, true, nil
}

// ReleaseWebhookLease frees the slot of lease, unless it expired and
// another lease took it over meanwhile.
func (s *Store) ReleaseWebhookLease(ctx context.Context, lease WebhookLease) error {
	if _, err := s.db(ctx).Exec(ctx, `
		DELETE FROM webhook_leases WHERE endpoint_id = $1 AND slot = $2 AND holder = $3`,
		lease.EndpointID, lease.Slot, lease.Holder); err != nil {
		return fmt.Errorf("release lease %d of webhook endpoint %q: %w", lease.Slot, lease.EndpointID, translate(err))
	}
	return nil
}

// DeleteExpiredWebhookLeases deletes the leases that expired without a
// release (their replica died), which free their slots already, and
// returns how many it deleted.
func (s *Store) DeleteExpiredWebhookLeases(ctx context.Context) (int64, error) {
	tag, err := s.db(ctx).Exec(ctx, `DELETE FROM webhook_leases WHERE expire_time <= now()`)
	if err != nil {
		return 0, fmt.Errorf("delete expired webhook leases: %w", translate(err))
	}
	return tag.RowsAffected(), nil
}
