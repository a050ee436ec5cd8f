package store_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

// createEndpoints stores n endpoints of owner "k" and returns their ids.
func createEndpoints(t *testing.T, s *store.Store, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ep, err := s.CreateWebhookEndpoint(t.Context(), store.WebhookEndpoint{
			Owner: "k", URL: fmt.Sprintf("https://example.com/%d", i), EventTypes: []string{"account.created"}, Secret: "whsec_AAAA",
		}, n)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = ep.ID
	}
	return ids
}

// acquire takes a lease of the endpoint's slots for an hour and fails the
// test unless ok is as wanted.
func acquire(t *testing.T, s *store.Store, endpointID string, slots int, wantOK bool) store.WebhookLease {
	t.Helper()
	lease, ok, err := s.AcquireWebhookLease(t.Context(), endpointID, slots, time.Hour)
	if err != nil || ok != wantOK {
		t.Fatalf("AcquireWebhookLease(%d slots): got %+v, %v, %v, want ok %v", slots, lease, ok, err, wantOK)
	}
	return lease
}

// expireLeases makes the endpoint's leases expired, as an hour gone by would.
func expireLeases(t *testing.T, pool *pgxpool.Pool, endpointID string) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), `
		UPDATE webhook_leases SET expire_time = now() - interval '1 second' WHERE endpoint_id = $1`, endpointID); err != nil {
		t.Fatal(err)
	}
}

// TestWebhookLeases takes every slot of an endpoint, checks that no more
// is given, that a release frees its slot and only its own, that an
// expired lease is taken over, and that endpoints do not share slots.
func TestWebhookLeases(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	s := store.New(pool)
	ids := createEndpoints(t, s, 2)
	ep, other := ids[0], ids[1]
	const slots = 3

	held := map[int]store.WebhookLease{}
	for range slots {
		l := acquire(t, s, ep, slots, true)
		if _, dup := held[l.Slot]; dup || l.Slot < 0 || l.Slot >= slots {
			t.Fatalf("got slot %d with %v held, want a free one of 0-%d", l.Slot, held, slots-1)
		}
		held[l.Slot] = l
	}
	acquire(t, s, ep, slots, false)
	// A smaller cap (another replica's config) sees its slots taken too.
	acquire(t, s, ep, 1, false)
	acquire(t, s, other, slots, true)

	if err := s.ReleaseWebhookLease(t.Context(), held[1]); err != nil {
		t.Fatal(err)
	}
	again := acquire(t, s, ep, slots, true)
	if again.Slot != 1 || again.Holder == held[1].Holder {
		t.Errorf("after releasing slot 1: got %+v, want slot 1 with a new holder", again)
	}
	acquire(t, s, ep, slots, false)

	// The leases of a replica that died expire, and are taken over; the
	// late release of one frees nothing.
	expireLeases(t, pool, ep)
	taken := acquire(t, s, ep, slots, true)
	if err := s.ReleaseWebhookLease(t.Context(), held[taken.Slot]); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(t.Context(), `
		SELECT count(*) FROM webhook_leases WHERE endpoint_id = $1 AND holder = $2`, ep, taken.Holder).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("the expired lease's late release: got the new lease of slot %d gone, want it kept", taken.Slot)
	}

	if _, _, err := s.AcquireWebhookLease(t.Context(), uuid.NewString(), slots, time.Hour); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AcquireWebhookLease of an unknown endpoint: got %v, want ErrNotFound", err)
	}
}

// TestWebhookLeasesAtOnce has three replicas (a pool each) of eight
// workers take, hold and release leases of one endpoint as fast as they
// can: never are more than its slots held at once, and every slot is used.
func TestWebhookLeasesAtOnce(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	const (
		replicas = 3
		workers  = 8
		rounds   = 20
		slots    = 3
	)
	var stores []*store.Store
	for range replicas {
		pool, err := pgxpool.New(t.Context(), dbURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		stores = append(stores, store.New(pool))
	}
	ep := createEndpoints(t, stores[0], 1)[0]

	var inflight, peak, granted atomic.Int64
	used := make([]atomic.Bool, slots)
	var wg sync.WaitGroup
	for i := range replicas * workers {
		s := stores[i%replicas]
		wg.Go(func() {
			for range rounds {
				lease, ok, err := s.AcquireWebhookLease(t.Context(), ep, slots, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					time.Sleep(time.Millisecond)
					continue
				}
				granted.Add(1)
				used[lease.Slot].Store(true)
				n := inflight.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(2 * time.Millisecond)
				inflight.Add(-1)
				if err := s.ReleaseWebhookLease(t.Context(), lease); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d leases granted to %d workers on %d replicas, at most %d held at once", granted.Load(), replicas*workers, replicas, peak.Load())
	if p := peak.Load(); p > slots {
		t.Errorf("got %d leases held at once, want at most %d", p, slots)
	}
	for i := range used {
		if !used[i].Load() {
			t.Errorf("slot %d was never leased", i)
		}
	}
}

// TestDeleteExpiredWebhookLeases deletes the expired leases and keeps the
// others.
func TestDeleteExpiredWebhookLeases(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	s := store.New(pool)
	ids := createEndpoints(t, s, 2)
	acquire(t, s, ids[0], 2, true)
	acquire(t, s, ids[0], 2, true)
	kept := acquire(t, s, ids[1], 2, true)
	expireLeases(t, pool, ids[0])
	n, err := s.DeleteExpiredWebhookLeases(t.Context())
	if err != nil || n != 2 {
		t.Errorf("DeleteExpiredWebhookLeases: got %d, %v, want the 2 expired", n, err)
	}
	rows, _ := pool.Query(t.Context(), `SELECT holder::text FROM webhook_leases`)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{kept.Holder}, left); diff != "" {
		t.Errorf("leases left (-want +got):\n%s", diff)
	}
}
