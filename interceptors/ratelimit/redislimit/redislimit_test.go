package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/shebasvc/sheba/interceptors/ratelimit"
	"github.com/shebasvc/sheba/interceptors/ratelimit/redislimit"
	"github.com/shebasvc/sheba/interceptors/ratelimit/redislimit/redistest"
)

// newBackend returns a Backend on the server at url, closed when the test
// ends.
func newBackend(t testing.TB, url string, opts ...redislimit.Option) *redislimit.Backend {
	t.Helper()
	client, err := redislimit.NewClient(url, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// Generous for a loaded test machine under -race; the fallback tests
	// below make Redis fail or hang outright.
	b := redislimit.New(client, append([]redislimit.Option{redislimit.WithTimeout(200 * time.Millisecond)}, opts...)...)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// family gathers b's metrics and returns the family name.
func family(t testing.TB, b *redislimit.Backend, name string) *dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(b.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	t.Fatalf("%s missing", name)
	return nil
}

// fallbackDecisions reads sheba_ratelimit_fallback_decisions_total of b
// by result.
func fallbackDecisions(t testing.TB, b *redislimit.Backend) (allowed, denied float64) {
	t.Helper()
	for _, m := range family(t, b, "sheba_ratelimit_fallback_decisions_total").GetMetric() {
		switch m.GetLabel()[0].GetValue() {
		case "allowed":
			allowed = m.GetCounter().GetValue()
		case "denied":
			denied = m.GetCounter().GetValue()
		}
	}
	return allowed, denied
}

// total is how many decisions b's fallback took.
func total(t testing.TB, b *redislimit.Backend) float64 {
	t.Helper()
	a, d := fallbackDecisions(t, b)
	return a + d
}

// backendUp reads the sheba_ratelimit_backend_up gauge of b.
func backendUp(t testing.TB, b *redislimit.Backend) float64 {
	t.Helper()
	return family(t, b, "sheba_ratelimit_backend_up").GetMetric()[0].GetGauge().GetValue()
}

// TestShared checks that two backends (two replicas) on one Redis draw from
// one quota, with the same q, w, r and t as the in-process bucket.
func TestShared(t *testing.T) {
	srv := redistest.Start(t)
	ba, bb := newBackend(t, srv.URL()), newBackend(t, srv.URL())
	a := ba.Limiter("global", 1, 10, redislimit.Global())
	b := bb.Limiter("global", 1, 10, redislimit.Global())
	bucket := ratelimit.NewBucket(1, 10)
	for i := range 12 {
		l := a
		if i%2 == 1 {
			l = b
		}
		got, want := l.Allow(t.Context()), bucket.Allow(t.Context())
		if got.Allowed != want.Allowed || got.Remaining != want.Remaining || got.Policy != want.Policy ||
			ratelimit.Seconds(got.Reset) != ratelimit.Seconds(want.Reset) {
			t.Errorf("call %d: redis %+v, in-process %+v; want the same answer", i+1, got, want)
		}
		if !got.Allowed && (got.RetryAfter <= 0 || got.RetryAfter > time.Second) {
			t.Errorf("call %d refused with retry after %v, want within (0, 1s]", i+1, got.RetryAfter)
		}
	}
	if n := total(t, ba) + total(t, bb); n != 0 {
		t.Errorf("fallback asked %v times while Redis is up", n)
	}
}

// TestPerKey checks that keys are limited apart and unknown ids not at all.
func TestPerKey(t *testing.T) {
	srv := redistest.Start(t)
	type ctxKey struct{}
	id := func(ctx context.Context) string { s, _ := ctx.Value(ctxKey{}).(string); return s }
	l := newBackend(t, srv.URL()).Limiter("key", 1, 2, redislimit.PerKey([]string{"a", "b"}, id))
	ctxA := context.WithValue(t.Context(), ctxKey{}, "a")
	ctxB := context.WithValue(t.Context(), ctxKey{}, "b")
	for i, want := range []bool{true, true, false} {
		if got := l.Allow(ctxA).Allowed; got != want {
			t.Errorf("key a call %d: allowed %v, want %v", i+1, got, want)
		}
	}
	if !l.Allow(ctxB).Allowed {
		t.Error("key b refused: keys must be limited apart")
	}
	if d := l.Allow(context.WithValue(t.Context(), ctxKey{}, "rotating")); !d.Allowed || d.Policy.Quota != 0 {
		t.Errorf("unknown id: got %+v, want allowed and not under the limit", d)
	}
}

// TestFallbackAndRecovery kills Redis: the next decision comes from the
// fallback at once, later ones go there without touching Redis, the gauge
// says 0; once Redis is back the probe returns decisions to it.
func TestFallbackAndRecovery(t *testing.T) {
	srv := redistest.Start(t)
	backend := newBackend(t, srv.URL(), redislimit.WithProbeInterval(50*time.Millisecond))
	l := backend.Limiter("global", 1000, 1000, redislimit.Global())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(backend.Collector())

	if !l.Allow(t.Context()).Allowed || total(t, backend) != 0 {
		t.Fatal("first decision did not come from Redis")
	}
	srv.Stop()
	for range 100 {
		if d := l.Allow(t.Context()); d.Policy.Quota != 500 {
			t.Fatalf("decision with Redis killed: %+v, want the fallback's policy, q=500 (half the burst)", d)
		}
	}
	if n := total(t, backend); n != 100 {
		t.Errorf("fallback answered %v of 100 calls while Redis is down, want 100", n)
	}
	if backend.Up() {
		t.Error("Up() is true with Redis killed")
	}
	if got := backendUp(t, backend); got != 0 {
		t.Errorf("sheba_ratelimit_backend_up %v, want 0", got)
	}

	srv.Restart()
	waitUp(t, backend)
	before := total(t, backend)
	if !l.Allow(t.Context()).Allowed || total(t, backend) != before {
		t.Error("decision went to the fallback after Redis came back")
	}
	if got := backendUp(t, backend); got != 1 {
		t.Errorf("sheba_ratelimit_backend_up %v, want 1", got)
	}
	if n, err := testutil.GatherAndCount(reg, "sheba_redis_pool_total_conns"); err != nil || n != 1 {
		t.Errorf("pool metrics: %d, %v", n, err)
	}
}

// TestSlowRedis pauses Redis: each decision waits no longer than the
// timeout (give or take scheduling) and the fallback answers it; a lone
// late decision leaves Redis up, decisions late for the grace mark it
// down, and then they no longer wait on it.
func TestSlowRedis(t *testing.T) {
	srv := redistest.Start(t)
	client, err := redislimit.NewClient(srv.URL(), 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	backend := redislimit.New(client, redislimit.WithTimeout(20*time.Millisecond), redislimit.WithGrace(100*time.Millisecond),
		redislimit.WithProbeInterval(50*time.Millisecond))
	t.Cleanup(func() { _ = backend.Close() })
	l := backend.Limiter("global", 1000, 1000, redislimit.Global())
	// A loaded machine may miss 20 ms by itself: start from a decision
	// that went through Redis.
	for i := 0; ; i++ {
		waitUp(t, backend)
		before := total(t, backend)
		l.Allow(t.Context())
		if total(t, backend) == before {
			break
		}
		if i == 20 {
			t.Fatal("no decision went through Redis in 20 tries")
		}
	}

	srv.Pause()
	before := total(t, backend)
	start := time.Now()
	l.Allow(t.Context())
	took := time.Since(start)
	if n := total(t, backend) - before; n != 1 {
		t.Errorf("fallback answered %v decisions of 1 with Redis hung, want 1", n)
	}
	t.Logf("first decision with Redis hung took %v (timeout 20ms)", took)
	if !backend.Up() {
		// A lone late decision is no outage; only a machine that stalled
		// for the whole grace in between could see two late ones so far
		// apart.
		t.Error("marked down after one late decision")
	}
	calls := 1
	for deadline := time.Now().Add(10 * time.Second); backend.Up(); calls++ {
		if time.Now().After(deadline) {
			t.Fatal("still up 10s into decisions late against a hung Redis (grace 100ms)")
		}
		l.Allow(t.Context())
	}
	if n := total(t, backend) - before; n != float64(calls) {
		t.Errorf("fallback answered %v of the %d decisions with Redis hung, want all", n, calls)
	}
	t.Logf("marked down after %d late decisions in %v", calls, time.Since(start))
	srv.Resume()
	waitUp(t, backend)
}

// TestFallbackStartsEmpty runs with Redis down from the start: the
// fallback admits half the rate (redis.fallback_share's default), and
// nothing at once; what it decides is counted.
func TestFallbackStartsEmpty(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	backend := newBackend(t, srv.URL())
	l := backend.Limiter("global", 50, 50, redislimit.Global())
	start := time.Now()
	allowed := 0
	for range 30 {
		if l.Allow(t.Context()).Allowed {
			allowed++
		}
	}
	if backend.Up() {
		t.Fatal("Redis is down, and Up() is true")
	}
	// One token every 40 ms (25/s): at most one more than the time taken
	// allows, where a bucket that started full would admit 30.
	if max := 1 + int(25*time.Since(start).Seconds()); allowed > max {
		t.Errorf("admitted %d of 30 calls at once with Redis down, want at most %d (no burst)", allowed, max)
	}
	// Then about 25/s, not 50/s.
	start, allowed = time.Now(), 0
	for time.Since(start) < time.Second {
		if l.Allow(t.Context()).Allowed {
			allowed++
		}
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(start).Seconds()
	if max := 1 + int(25*elapsed); allowed > max || allowed < 10 {
		t.Errorf("admitted %d in %.2fs with Redis down, want 10..%d (25/s)", allowed, elapsed, max)
	}
	a, d := fallbackDecisions(t, backend)
	if a == 0 || d == 0 || a+d < 30 {
		t.Errorf("fallback decisions counted: %v allowed, %v denied; want both, at least 30 in all", a, d)
	}
}

// TestFallbackKeepsItsState stops Redis, calls at once, starts it again
// and lets it answer for a while, three times: the time Redis answered
// never refills the fallback, so over the three outages it admits no more
// than half the rate over the time Redis was out, where a bucket refilled
// meanwhile would grant a burst each time.
func TestFallbackKeepsItsState(t *testing.T) {
	srv := redistest.Start(t)
	backend := newBackend(t, srv.URL(), redislimit.WithProbeInterval(20*time.Millisecond))
	l := backend.Limiter("global", 100, 100, redislimit.Global())
	l.Allow(t.Context())
	allowed, down := 0, time.Duration(0)
	for range 3 {
		srv.Stop()
		start := time.Now()
		for range 200 {
			if l.Allow(t.Context()).Allowed {
				allowed++
			}
		}
		srv.Restart()
		waitUp(t, backend)
		down += time.Since(start)
		// At 50/s the fallback would be full again after 1 s.
		time.Sleep(1200 * time.Millisecond)
	}
	if max := 1 + int(50*down.Seconds()); allowed > max {
		t.Errorf("admitted %d of 3 × 200 calls at once in 3 outages of %v in all, want at most %d (50/s, no burst)", allowed, down, max)
	}
	t.Logf("admitted %d in 3 outages of %v in all", allowed, down)
}

// waitUp waits up to 5 s for the probe to find Redis back.
func waitUp(t *testing.T, b *redislimit.Backend) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !b.Up(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("still down 5s after Redis came back")
		}
	}
}

// BenchmarkAllow measures one decision in Redis over loopback (make bench
// reports it in µs), beside the in-process bucket.
func BenchmarkAllow(b *testing.B) {
	srv := redistest.Start(b)
	l := newBackend(b, srv.URL()).Limiter("global", 1e9, 1e9, redislimit.Global())
	b.Run("redis", func(b *testing.B) {
		for b.Loop() {
			l.Allow(b.Context())
		}
	})
	bucket := ratelimit.NewBucket(1e9, 1e9)
	b.Run("in-process", func(b *testing.B) {
		for b.Loop() {
			bucket.Allow(b.Context())
		}
	})
}
