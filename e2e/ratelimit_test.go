package e2e

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/interceptortest"
	"github.com/shebasvc/sheba/interceptors/ratelimit/redislimit/redistest"
)

// TestRateLimitHeaders checks the RateLimit fields on REST headers and gRPC
// metadata: the tightest policy, r counting down, and a 429 whose
// Retry-After is not earlier than t.
func TestRateLimitHeaders(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(c *config.Config) {
		c.Limits.Rate, c.Limits.Burst = 10, 1000           // q=1000, w=100
		c.Limits.PerKeyRate, c.Limits.PerKeyBurst = 0.5, 3 // q=3, w=6
	})
	// REST with the key: the per-key limit is the tighter.
	for i := range 4 {
		resp := e.do(t, http.MethodGet, "/v1/ping", "")
		name, q, w, r, tt := interceptortest.RateLimitFields(t, resp.Header.Values("RateLimit-Policy"), resp.Header.Values("RateLimit"))
		if name != "key" || q != 3 || w != 6 {
			t.Errorf("REST call %d: policy %q q=%d w=%d, want \"key\" q=3 w=6", i+1, name, q, w)
		}
		if len(resp.Header.Values("Grpc-Metadata-Ratelimit")) != 0 {
			t.Error("RateLimit also sent with the Grpc-Metadata- prefix")
		}
		if i < 3 {
			if resp.Code != http.StatusOK || r != int64(2-i) {
				t.Errorf("REST call %d: %d r=%d, want 200 r=%d", i+1, resp.Code, r, 2-i)
			}
			continue
		}
		ra, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64)
		if resp.Code != http.StatusTooManyRequests || r != 0 || err != nil || ra < tt || tt < 1 {
			t.Errorf("REST call 4: %d r=%d t=%d Retry-After %q; want 429 r=0, Retry-After >= t >= 1",
				resp.Code, r, tt, resp.Header.Get("Retry-After"))
		}
	}
	// gRPC without a key (Ping is public): only the global limit applies.
	var prev int64 = -1
	for i := range 3 {
		var header metadata.MD
		if _, err := shebav1.NewPingServiceClient(e.anon).Ping(t.Context(), &shebav1.PingRequest{}, grpc.Header(&header)); err != nil {
			t.Fatalf("gRPC ping: %v", err)
		}
		name, q, _, r, _ := interceptortest.RateLimitFields(t, header.Get("ratelimit-policy"), header.Get("ratelimit"))
		if name != "global" || q != 1000 || (prev >= 0 && r >= prev) {
			t.Errorf("gRPC call %d: policy %q q=%d r=%d (previous r %d), want \"global\" q=1000 and r decreasing", i+1, name, q, r, prev)
		}
		prev = r
	}
}

// drive calls ping at perSecond for d, each call in its own goroutine, the
// i-th call on envs[i%len(envs)]; it returns each call's env index, code
// and latency.
type callResult struct {
	env     int
	code    codes.Code
	latency time.Duration
}

func drive(ctx context.Context, envs []*testEnv, perSecond int, d time.Duration) ([]callResult, time.Duration) {
	n := int(d.Seconds() * float64(perSecond))
	results := make([]callResult, n)
	interval := time.Second / time.Duration(perSecond)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			e := i % len(envs)
			t0 := time.Now()
			_, err := envs[e].ping.Ping(cctx, &shebav1.PingRequest{})
			results[i] = callResult{e, status.Code(err), time.Since(t0)}
		})
	}
	elapsed := time.Since(start)
	wg.Wait()
	return results, elapsed
}

// tally counts the admitted calls per env and overall, fails the test on
// any code but OK and ResourceExhausted, and returns the p99 latency.
func tally(t *testing.T, results []callResult, envs int) (perEnv []int, total int, p99 time.Duration) {
	t.Helper()
	perEnv = make([]int, envs)
	lat := make([]time.Duration, 0, len(results))
	for _, r := range results {
		switch r.code {
		case codes.OK:
			perEnv[r.env]++
			total++
		case codes.ResourceExhausted:
		default:
			t.Errorf("a call answered %v, want OK or ResourceExhausted only", r.code)
		}
		lat = append(lat, r.latency)
	}
	slices.Sort(lat)
	return perEnv, total, lat[len(lat)*99/100]
}

// backendUp reads sheba_ratelimit_backend_up from e's /metrics.
func backendUp(t *testing.T, e *testEnv) float64 {
	t.Helper()
	v, ok := series(e.scrape(t), "sheba_ratelimit_backend_up")[""]
	if !ok {
		t.Fatal("sheba_ratelimit_backend_up missing from /metrics")
	}
	return v
}

// TestRateLimitsSharedThroughRedis runs three services (three replicas,
// each with its own limiter state and Redis client) on one real Redis: a
// key at 50/s, burst 50, driven at 300 calls/s round-robin admits what
// one replica would. Then Redis is killed: no call fails, each replica
// limits alone, the gauge says 0; and when Redis is back the gauge is 1
// again within 10 s. Not parallel: it paces calls in real time, and the
// other tests of the package would crowd its 2 × 300 calls a second.
func TestRateLimitsSharedThroughRedis(t *testing.T) {
	srv := redistest.Start(t)
	envs := make([]*testEnv, 3)
	for i := range envs {
		envs[i] = newTestEnv(t, func(c *config.Config) {
			c.Limits.PerKeyRate, c.Limits.PerKeyBurst = 50, 50
			c.Redis.URL = srv.URL()
			// The most allowed, not the 5 ms default: a test machine
			// loaded by -race and other packages stalls for hundreds of
			// milliseconds, which would send the replicas to their own
			// buckets by themselves. The outage below is a killed Redis,
			// found at once whatever the timeout.
			c.Redis.Timeout = time.Second
		})
	}

	shared, elapsed := drive(t.Context(), envs, 300, 6*time.Second)
	perEnv, admitted, p99Redis := tally(t, shared, len(envs))
	want := 50 + 50*elapsed.Seconds()
	if float64(admitted) < 0.85*want || float64(admitted) > 1.15*want {
		t.Errorf("admitted %d of %d over %v on 3 replicas (%v each), want %.0f ± 15%% (50 + 50/s)", admitted, len(shared), elapsed, perEnv, want)
	}
	t.Logf("through Redis: admitted %d of %d in %v (%v per replica; one replica alone: %.0f), p99 %v",
		admitted, len(shared), elapsed.Round(time.Millisecond), perEnv, want, p99Redis)
	for i, e := range envs {
		if up := backendUp(t, e); up != 1 {
			t.Errorf("replica %d: sheba_ratelimit_backend_up %v with Redis up, want 1; log:\n%s", i, up, e.logs.String())
		}
	}

	srv.Stop()
	alone, elapsed := drive(t.Context(), envs, 300, 3*time.Second)
	perEnv, admitted, p99Alone := tally(t, alone, len(envs))
	// Each replica limits alone: it admits its own bucket's worth (at
	// least its burst, at most burst + rate × elapsed), and together they
	// admit more than the shared limit would. Calls bunch up on a loaded
	// machine, so no tighter bound holds.
	wantEach := 50 + 50*elapsed.Seconds()
	for i, n := range perEnv {
		if n < 50 || float64(n) > 1.15*wantEach {
			t.Errorf("replica %d admitted %d with Redis down, want its own limit: 50..%.0f", i, n, 1.15*wantEach)
		}
	}
	if float64(admitted) < 1.15*wantEach {
		t.Errorf("admitted %d together with Redis down, want more than the shared limit %.0f", admitted, wantEach)
	}
	t.Logf("Redis killed: admitted %d of %d in %v (%v per replica, each alone %.0f), p99 %v (was %v through Redis)",
		admitted, len(alone), elapsed.Round(time.Millisecond), perEnv, wantEach, p99Alone, p99Redis)
	for i, e := range envs {
		if up := backendUp(t, e); up != 0 {
			t.Errorf("replica %d: sheba_ratelimit_backend_up %v with Redis killed, want 0", i, up)
		}
		if n := strings.Count(e.logs.String(), "redis is down or slow"); n != 1 {
			t.Errorf("replica %d logged the fallback %d times, want once", i, n)
		}
	}

	srv.Restart()
	restarted := time.Now()
	for i, e := range envs {
		for backendUp(t, e) != 1 {
			if time.Since(restarted) > 10*time.Second {
				t.Fatalf("replica %d: sheba_ratelimit_backend_up still 0 10s after Redis came back", i)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("back on Redis after %v", time.Since(restarted).Round(time.Millisecond))
}

// TestRedisTracedAndCounted checks that a decision in Redis is a client
// span below the call's server span, and that the pool and the backend
// state are on /metrics.
func TestRedisTracedAndCounted(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	tp, exp := newRecorder(t)
	e := newTestEnvWith(t, tp, nil, func(c *config.Config) {
		c.Limits.PerKeyRate, c.Limits.PerKeyBurst = 100, 100
		c.Redis.URL, c.Redis.Timeout = srv.URL(), time.Second
	})
	if _, err := e.ping.Ping(t.Context(), &shebav1.PingRequest{}); err != nil {
		t.Fatalf("ping: %v", err)
	}
	// The server span ends after the answer has left, so it may reach the
	// exporter a moment after the client has the answer.
	var spans tracetest.SpanStubs
	var serverID string
	for deadline := time.Now().Add(5 * time.Second); serverID == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		spans = exp.GetSpans()
		for _, s := range spans {
			if s.SpanKind == trace.SpanKindServer && strings.Contains(s.Name, "PingService/Ping") {
				serverID = s.SpanContext.SpanID().String()
			}
		}
	}
	found := false
	for _, s := range spans {
		if hasAttr(s.Attributes, attribute.String("db.system", "redis")) && s.Parent.SpanID().String() == serverID {
			found = true
		}
	}
	if serverID == "" || !found {
		t.Errorf("no span with db.system=redis under the server span; spans: %s", spanNames(spans))
	}
	families := e.scrape(t)
	if v := series(families, "sheba_redis_pool_total_conns")[""]; v < 1 {
		t.Errorf("sheba_redis_pool_total_conns %v, want at least 1", v)
	}
	if v := series(families, "sheba_ratelimit_backend_up")[""]; v != 1 {
		t.Errorf("sheba_ratelimit_backend_up %v, want 1", v)
	}
}
