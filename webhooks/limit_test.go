package webhooks

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

// replicaStores returns n stores on one fresh database, each with a pool
// of its own, as n replicas have, the first store's pool, and an endpoint
// id to lease slots of.
func replicaStores(t *testing.T, n int) ([]*store.Store, *pgxpool.Pool, string) {
	t.Helper()
	dbURL := storetest.NewDatabase(t)
	stores := make([]*store.Store, n)
	var first *pgxpool.Pool
	for i := range stores {
		pool, err := pgxpool.New(t.Context(), dbURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		stores[i] = store.New(pool)
		if i == 0 {
			first = pool
		}
	}
	ep, err := stores[0].CreateWebhookEndpoint(t.Context(), store.WebhookEndpoint{
		Owner: testOwner, URL: "https://example.com/", EventTypes: []string{"account.created"}, Secret: testSecret(),
	}, 1)
	if err != nil {
		t.Fatal(err)
	}
	return stores, first, ep.ID
}

// TestSharedLimiter has three replicas' limiters of 2 slots run 24
// attempts at once to one endpoint, each holding its slot 20 ms: never
// more than 2 hold one at once, and all 24 get one in the end, each taken
// when a release freed it.
func TestSharedLimiter(t *testing.T) {
	t.Parallel()
	const (
		replicas = 3
		slots    = 2
		attempts = 24
	)
	stores, pool, ep := replicaStores(t, replicas)
	limiters := make([]Limiter, replicas)
	for i, st := range stores {
		limiters[i] = NewSharedLimiter(st, slots, time.Minute, slog.New(slog.DiscardHandler))
	}

	var inflight, peak atomic.Int64
	var wg sync.WaitGroup
	for i := range attempts {
		l := limiters[i%replicas]
		wg.Go(func() {
			// As a held attempt comes back later; bounded, for a test that
			// fails.
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
				release, ok, err := l.Acquire(t.Context(), ep)
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					continue
				}
				n := inflight.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(20 * time.Millisecond)
				inflight.Add(-1)
				release()
				return
			}
			t.Error("no slot within a minute")
		})
	}
	wg.Wait()
	t.Logf("%d attempts on %d replicas, at most %d holding a slot at once", attempts, replicas, peak.Load())
	if p := peak.Load(); p > slots {
		t.Errorf("got %d slots held at once, want at most %d", p, slots)
	}

	// Every lease was released.
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM webhook_leases`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("got %d leases left, want none", n)
	}

	// A full endpoint makes Acquire wait its 100 ms, and a canceled
	// context ends the wait.
	var releases []func()
	for range slots {
		release, ok, err := limiters[0].Acquire(t.Context(), ep)
		if !ok || err != nil {
			t.Fatalf("Acquire of a free slot: got %v, %v", ok, err)
		}
		releases = append(releases, release)
	}
	start := time.Now()
	if _, ok, err := limiters[1].Acquire(t.Context(), ep); ok || err != nil {
		t.Errorf("Acquire with every slot held: got %v, %v, want no slot", ok, err)
	}
	if took := time.Since(start); took < slotWait/2 {
		t.Errorf("Acquire with every slot held gave up after %v, want it to wait about %v", took, slotWait)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, ok, err := limiters[1].Acquire(ctx, ep); ok || !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire canceled: got %v, %v, want context.Canceled", ok, err)
	}
	releases[0]()
	if release, ok, err := limiters[2].Acquire(t.Context(), ep); !ok || err != nil {
		t.Errorf("Acquire after a release: got %v, %v, want the slot", ok, err)
	} else {
		release()
	}
}

// TestSharedLimiterLeaseExpires has a replica die while it holds the one
// slot of an endpoint (its context canceled, its release never called):
// another replica gets no slot until the lease has expired, then gets it.
func TestSharedLimiterLeaseExpires(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	stores, _, ep := replicaStores(t, 2)
	discard := slog.New(slog.DiscardHandler)
	dying, alive := NewSharedLimiter(stores[0], 1, lease, discard), NewSharedLimiter(stores[1], 1, lease, discard)

	ctx, die := context.WithCancel(t.Context())
	start := time.Now()
	if _, ok, err := dying.Acquire(ctx, ep); !ok || err != nil {
		t.Fatalf("Acquire: got %v, %v", ok, err)
	}
	die()

	// The lease runs from the database's now, a moment after start: while
	// this process's clock says it has not expired, it has not.
	_, ok, err := alive.Acquire(t.Context(), ep)
	if err != nil {
		t.Fatal(err)
	}
	if ok && time.Since(start) < lease {
		t.Fatalf("another replica got the slot %v after it was leased for %v", time.Since(start), lease)
	}
	for deadline := start.Add(lease + time.Minute); !ok; {
		if time.Now().After(deadline) {
			t.Fatalf("the dead replica's lease of %v not expired after %v", lease, time.Since(start))
		}
		release, got, err := alive.Acquire(t.Context(), ep)
		if err != nil {
			t.Fatal(err)
		}
		if ok = got; ok {
			release()
		}
	}
	took := time.Since(start)
	t.Logf("the dead replica's slot was taken over %v after it was leased for %v", took, lease)
	if took < lease {
		t.Errorf("the slot was taken over after %v, want no sooner than its lease of %v", took, lease)
	}
}
