package redislimit_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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

// countingFallback is an in-process bucket that counts its decisions.
type countingFallback struct {
	ratelimit.Limiter
	calls atomic.Int64
}

func (c *countingFallback) Allow(ctx context.Context) ratelimit.Decision {
	c.calls.Add(1)
	return c.Limiter.Allow(ctx)
}

func newFallback(perSecond float64, burst int) *countingFallback {
	return &countingFallback{Limiter: ratelimit.NewBucket(perSecond, burst)}
}

// TestShared checks that two backends (two replicas) on one Redis draw from
// one quota, with the same q, w, r and t as the in-process bucket.
func TestShared(t *testing.T) {
	srv := redistest.Start(t)
	fb := newFallback(1, 10)
	a := newBackend(t, srv.URL()).Limiter("global", 1, 10, redislimit.Global(), fb)
	b := newBackend(t, srv.URL()).Limiter("global", 1, 10, redislimit.Global(), fb)
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
	if n := fb.calls.Load(); n != 0 {
		t.Errorf("fallback asked %d times while Redis is up", n)
	}
}

// TestPerKey checks that keys are limited apart and unknown ids not at all.
func TestPerKey(t *testing.T) {
	srv := redistest.Start(t)
	type ctxKey struct{}
	id := func(ctx context.Context) string { s, _ := ctx.Value(ctxKey{}).(string); return s }
	l := newBackend(t, srv.URL()).Limiter("key", 1, 2, redislimit.PerKey([]string{"a", "b"}, id), newFallback(1, 2))
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
// fallback, later ones go there without touching Redis, the gauge says 0;
// once Redis is back the probe returns decisions to it.
func TestFallbackAndRecovery(t *testing.T) {
	srv := redistest.Start(t)
	backend := newBackend(t, srv.URL(), redislimit.WithProbeInterval(50*time.Millisecond))
	fb := newFallback(1000, 1000)
	l := backend.Limiter("global", 1000, 1000, redislimit.Global(), fb)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(backend.Collector())

	if !l.Allow(t.Context()).Allowed || fb.calls.Load() != 0 {
		t.Fatal("first decision did not come from Redis")
	}
	srv.Stop()
	for i := range 100 {
		if !l.Allow(t.Context()).Allowed {
			t.Fatalf("call %d refused by the fallback bucket of 1000", i+1)
		}
	}
	if n := fb.calls.Load(); n != 100 {
		t.Errorf("fallback answered %d of 100 calls while Redis is down, want 100", n)
	}
	if backend.Up() {
		t.Error("Up() is true with Redis killed")
	}
	if got := testutil.ToFloat64(collectorUp(backend)); got != 0 {
		t.Errorf("sheba_ratelimit_backend_up %v, want 0", got)
	}

	srv.Restart()
	waitUp(t, backend)
	before := fb.calls.Load()
	l.Allow(t.Context())
	if fb.calls.Load() != before {
		t.Error("decision went to the fallback after Redis came back")
	}
	if got := testutil.ToFloat64(collectorUp(backend)); got != 1 {
		t.Errorf("sheba_ratelimit_backend_up %v, want 1", got)
	}
	if n, err := testutil.GatherAndCount(reg, "sheba_redis_pool_total_conns"); err != nil || n != 1 {
		t.Errorf("pool metrics: %d, %v", n, err)
	}
}

// TestSlowRedis pauses Redis: the decision waits no longer than the timeout
// (give or take scheduling) and the fallback answers.
func TestSlowRedis(t *testing.T) {
	srv := redistest.Start(t)
	client, err := redislimit.NewClient(srv.URL(), 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	backend := redislimit.New(client, redislimit.WithTimeout(20*time.Millisecond), redislimit.WithProbeInterval(50*time.Millisecond))
	t.Cleanup(func() { _ = backend.Close() })
	fb := newFallback(1000, 1000)
	l := backend.Limiter("global", 1000, 1000, redislimit.Global(), fb)
	// A loaded machine may miss 20 ms by itself: start from a decision
	// that went through Redis.
	for i := 0; ; i++ {
		waitUp(t, backend)
		before := fb.calls.Load()
		l.Allow(t.Context())
		if fb.calls.Load() == before {
			break
		}
		if i == 20 {
			t.Fatal("no decision went through Redis in 20 tries")
		}
	}

	srv.Pause()
	before := fb.calls.Load()
	start := time.Now()
	if !l.Allow(t.Context()).Allowed {
		t.Error("refused while Redis hangs; the fallback should have allowed it")
	}
	took := time.Since(start)
	for range 10 {
		l.Allow(t.Context())
	}
	if n := fb.calls.Load() - before; n != 11 || backend.Up() {
		t.Errorf("fallback answered %d of 11, up %v; want 11, false", n, backend.Up())
	}
	t.Logf("first decision with Redis hung took %v (timeout 20ms)", took)
	srv.Resume()
	waitUp(t, backend)
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

// collectorUp is the backend_up gauge alone, for testutil.ToFloat64.
func collectorUp(b *redislimit.Backend) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "up"}, func() float64 {
		reg := prometheus.NewRegistry()
		reg.MustRegister(b.Collector())
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "sheba_ratelimit_backend_up" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	})
}

// BenchmarkAllow measures one decision in Redis over loopback (make bench
// reports it in µs), beside the in-process bucket.
func BenchmarkAllow(b *testing.B) {
	srv := redistest.Start(b)
	l := newBackend(b, srv.URL()).Limiter("global", 1e9, 1e9, redislimit.Global(), newFallback(1e9, 1e9))
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
