package webhooks

import (
	"context"
	"log/slog"
	"time"

	"github.com/shebasvc/sheba/store"
)

// Limiter caps the attempts in flight to each endpoint
// (webhooks.per_endpoint_concurrency). Acquire takes a slot of the
// endpoint and returns its release, which the caller calls once, when its
// attempt has ended; or it reports ok false when no slot is free. Either
// way it may wait a moment for one, but not for long: a held attempt goes
// back to the queue (not counted as an attempt) and comes back soon. An
// error (the limiter's own store failed) holds the attempt back as well.
// Implementations are safe for concurrent use.
type Limiter interface {
	Acquire(ctx context.Context, endpointID string) (release func(), ok bool, err error)
}

// NewSharedLimiter returns a Limiter of perEndpoint slots per endpoint
// shared by every replica on the database of st: N replicas together hold
// at most perEndpoint at once. A slot is a lease in Postgres
// (store.AcquireWebhookLease) that expires after lease by the database's
// clock, so the slots of a replica that died free themselves; make lease
// longer than anything the attempt does while it holds one. An Acquire
// waits up to 100 ms for a slot, looking again every 25 ms or so. A release that fails is logged to log: its slot frees
// when it expires.
func NewSharedLimiter(st *store.Store, perEndpoint int, lease time.Duration, log *slog.Logger) Limiter {
	return &leases{st: st, max: perEndpoint, lease: lease, log: log}
}

// leases is the Limiter of NewSharedLimiter.
type leases struct {
	st    *store.Store
	max   int
	lease time.Duration
	log   *slog.Logger
}

// releaseTimeout bounds a release, which runs even when the attempt's
// context has ended (a stop): failing it only keeps the slot until it
// expires.
const releaseTimeout = 5 * time.Second

func (l *leases) Acquire(ctx context.Context, endpointID string) (func(), bool, error) {
	deadline := time.Now().Add(slotWait)
	for {
		lease, ok, err := l.st.AcquireWebhookLease(ctx, endpointID, l.max, l.lease)
		if err != nil {
			return nil, false, err
		}
		if ok {
			return func() { l.release(context.WithoutCancel(ctx), lease) }, true, nil
		}
		// Spread, so that attempts waiting for one endpoint do not all look
		// at once.
		wait := jitter(slotWait / 4)
		if time.Until(deadline) < wait {
			return nil, false, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, false, ctx.Err()
		}
	}
}

func (l *leases) release(ctx context.Context, lease store.WebhookLease) {
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	if err := l.st.ReleaseWebhookLease(ctx, lease); err != nil {
		l.log.WarnContext(ctx, "webhook lease not released; it frees itself when it expires",
			"endpoint_id", lease.EndpointID, "error", err)
	}
}
