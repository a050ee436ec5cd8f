package e2e

import (
	"context"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/internal/app"
	"github.com/shebasvc/sheba/store/storetest"
)

// dbBound makes GetAccount wait on a real query, pg_sleep(sleep), over a
// pool of conns connections of its own: the endpoint is bound by the
// database's capacity, as a slow or saturated Postgres makes it.
func dbBound(t *testing.T, conns int, sleep time.Duration) app.Option {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), storetest.NewDatabase(t)+"&pool_max_conns="+strconv.Itoa(conns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return withHandlerHook(func(ctx context.Context, method string) error {
		if method != getAccount {
			return nil
		}
		_, err := pool.Exec(ctx, "SELECT pg_sleep($1)", sleep.Seconds())
		return err
	})
}

// load runs clients closed-loop GetAccount callers for d after warmup, and
// returns the goodput (answers that ran: NotFound here) per second and the
// p99 latency of those. A shed caller honours the 429's Retry-After (1 s)
// before calling again, rather than spinning on 429s.
func load(ctx context.Context, e *testEnv, clients int, warmup, d time.Duration) (goodput float64, p99 time.Duration, shed int) {
	var mu sync.Mutex
	var lat []time.Duration
	start := time.Now()
	measureFrom, end := start.Add(warmup), start.Add(warmup+d)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for time.Now().Before(end) {
				t0 := time.Now()
				_, err := e.account.GetAccount(ctx, &shebav1.GetAccountRequest{AccountId: unknownID})
				took := time.Since(t0)
				code := status.Code(err)
				if t0.Before(measureFrom) {
					if code == codes.ResourceExhausted {
						time.Sleep(time.Second)
					}
					continue
				}
				mu.Lock()
				switch code {
				case codes.NotFound:
					lat = append(lat, took)
				case codes.ResourceExhausted:
					shed++
				default:
					// Neither ran nor shed: counts against goodput.
				}
				mu.Unlock()
				if code == codes.ResourceExhausted {
					time.Sleep(time.Second)
				}
			}
		})
	}
	wg.Wait()
	slices.Sort(lat)
	if len(lat) == 0 {
		return 0, 0, shed
	}
	return float64(len(lat)) / d.Seconds(), lat[len(lat)*99/100], shed
}

// TestAdaptiveOverload is the overload measurement of the adaptive limit
// (docs/api.md#adaptive-concurrency): a database-bound endpoint (8
// connections, 5 ms queries) at 8 clients gives goodput G and p99 P; at
// 200 clients the adaptive limit keeps goodput >= 0.9 G and the p99 of the
// answered calls <= 3 P, while the fixed limit of 512 lets p99 grow with
// the queue. It takes about 40 s, so it runs only with SHEBA_OVERLOAD=1
// (make bench runs it).
func TestAdaptiveOverload(t *testing.T) {
	if os.Getenv("SHEBA_OVERLOAD") != "1" {
		// A wall-clock measurement (goodput and p99 over 40 s) is a
		// benchmark, not a test: it must not fail make test on a slow
		// machine. That the adaptive limit sheds is tested always, by
		// TestAdaptiveLimitSheds.
		t.Skip("timing measurement, run by make bench-limits (SHEBA_OVERLOAD=1); TestAdaptiveLimitSheds tests the shedding itself")
	}
	const conns, sleep = 8, 5 * time.Millisecond
	run := func(adaptive bool, clients int) (float64, time.Duration, int) {
		e := newTestEnvWith(t, nil, []app.Option{dbBound(t, conns, sleep)}, func(c *config.Config) {
			c.Limits.Adaptive, c.Limits.MinInflight, c.Limits.MaxInflight = adaptive, 4, 512
		})
		g, p, shed := load(t.Context(), e, clients, 3*time.Second, 8*time.Second)
		t.Logf("sheba_inflight_limit at the end: %v", series(e.scrape(t), "sheba_inflight_limit")[""])
		return g, p, shed
	}
	g, p, _ := run(false, 8)
	t.Logf("8 clients, fixed limit 512: goodput G %.0f/s, p99 P %v", g, p)
	ga, pa, sa := run(true, 200)
	t.Logf("200 clients, adaptive: goodput %.0f/s (%.2f G), p99 %v (%.1f P), shed %d", ga, ga/g, pa, float64(pa)/float64(p), sa)
	gf, pf, sf := run(false, 200)
	t.Logf("200 clients, fixed limit 512: goodput %.0f/s (%.2f G), p99 %v (%.1f P), shed %d", gf, gf/g, pf, float64(pf)/float64(p), sf)
	if ga < 0.9*g {
		t.Errorf("goodput with the adaptive limit %.0f/s, want >= 0.9 G = %.0f/s", ga, 0.9*g)
	}
	if pa > 3*p {
		t.Errorf("p99 with the adaptive limit %v, want <= 3 P = %v", pa, 3*p)
	}
}

// TestAdaptiveLimitSheds starts the adaptive limit at its minimum of 2:
// with two slow calls running, a third is shed at once with 429 and
// Retry-After on both transports, health and operator endpoints still answer, and
// sheba_inflight_limit shows the limit.
func TestAdaptiveLimitSheds(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	e := newTestEnvWith(t, nil, []app.Option{withHandlerHook(func(ctx context.Context, method string) error {
		if method == getAccount {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	})}, func(c *config.Config) {
		c.Limits.Adaptive, c.Limits.MinInflight, c.Limits.MaxInflight = true, 2, 64
	})
	if got := series(e.scrape(t), "sheba_inflight_limit")[""]; got != 2 {
		t.Errorf("sheba_inflight_limit at start: got %v, want 2 (limits.min_inflight)", got)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if o := e.getAccountGRPC(t.Context()); o.httpCode != 404 {
				t.Errorf("held call: got %d, want 404", o.httpCode)
			}
		})
	}
	<-entered
	<-entered
	if o := e.getAccountGRPC(t.Context()); o.httpCode != 429 || o.retryAfter != "1" {
		t.Errorf("gRPC call over the limit: got %d retry-after %q, want 429 and 1", o.httpCode, o.retryAfter)
	}
	if o := e.getAccountREST(t); o.httpCode != 429 || o.retryAfter != "1" {
		t.Errorf("REST call over the limit: got %d Retry-After %q, want 429 and 1", o.httpCode, o.retryAfter)
	}
	if r := e.do(t, http.MethodGet, "/livez", ""); r.Code != http.StatusNoContent {
		t.Errorf("/livez with the limit full: %d, want 204", r.Code)
	}
	if _, err := e.health.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("gRPC health check with the limit full: %v", err)
	}
	close(release)
	wg.Wait()
}
