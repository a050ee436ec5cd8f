package webhooks

import (
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/webhooks/webhookstest"
)

// replicas returns the testbed's runner and n-1 more on the same database,
// each on a pool of its own and with its own metrics, as n replicas of
// sheba are, all with testOptions changed by adjust (if not nil). None
// runs yet.
func (b *testbed) replicas(t *testing.T, n int, adjust func(*Options)) []*Runner {
	t.Helper()
	rs := []*Runner{b.r}
	for range n - 1 {
		pool, err := pgxpool.New(t.Context(), b.pool.Config().ConnString())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		o := testOptions()
		o.Registerer = prometheus.NewRegistry()
		if adjust != nil {
			adjust(&o)
		}
		r, err := New(pool, store.New(pool), o)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		rs = append(rs, r)
	}
	return rs
}

// sent returns how many requests r sent.
func (r *Runner) sent() float64 {
	var n float64
	for _, result := range []string{"success", "http_error", "gone", "timeout", "network_error"} {
		n += testutil.ToFloat64(r.m.attempts.WithLabelValues(result))
	}
	return n
}

// TestCapAcrossReplicas runs three replicas on one database and 24 events
// to an endpoint that holds every request 300 ms: the endpoint never has
// more than per_endpoint_concurrency requests in flight, from the three
// together, and gets each event once. Each replica works at most 4 jobs at
// once, so that none can take the whole backlog: with a cap per replica
// (slots kept in each process) the endpoint would see up to 3 × 2 at once.
func TestCapAcrossReplicas(t *testing.T) {
	t.Parallel()
	const (
		replicas = 3
		slots    = 2
		events   = 24
	)
	adjust := func(o *Options) {
		o.PerEndpointConcurrency = slots
		o.Workers = 4
	}
	b := newTestbed(t, adjust)
	rcv := webhookstest.NewReceiver(t, func(int, http.ResponseWriter) int {
		time.Sleep(300 * time.Millisecond)
		return http.StatusOK
	})
	ep := b.endpoint(t, rcv.URL, "subscription.created", "subscription.canceled")
	rs := b.replicas(t, replicas, adjust)
	for _, r := range rs {
		run(t, r)
	}
	start := time.Now()
	b.churn(t, events)
	ds := b.waitDeliveries(t, ep.ID, 2*time.Minute, "every event delivered", all(events, store.DeliverySucceeded))

	var bySent []float64
	for _, r := range rs {
		bySent = append(bySent, r.sent())
	}
	t.Logf("%d events delivered in %v by %d replicas (requests sent by each: %v), at most %d in flight at once",
		events, time.Since(start).Round(time.Millisecond), replicas, bySent, rcv.Peak())
	if peak := rcv.Peak(); peak > slots {
		t.Errorf("got %d requests in flight at once from %d replicas, want at most per_endpoint_concurrency %d", peak, replicas, slots)
	}
	ids := rcv.IDs()
	if len(ids) != events {
		t.Errorf("receiver got %d distinct events, want %d", len(ids), events)
	}
	for id, n := range ids {
		if n != 1 {
			t.Errorf("event %s arrived %d times, want once", id, n)
		}
	}
	for _, d := range ds {
		if d.Attempts != 1 {
			t.Errorf("delivery of %s: got %d attempts, want 1", d.EventID, d.Attempts)
		}
	}
	// With only one replica sending, the test would prove nothing.
	var senders int
	for _, n := range bySent {
		if n > 0 {
			senders++
		}
	}
	if senders < 2 {
		t.Errorf("got %d replicas sending requests (%v), want several", senders, bySent)
	}
}
