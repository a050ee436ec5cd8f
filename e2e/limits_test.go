package e2e

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/internal/app"
)

const getAccount = "/sheba.v1.AccountService/GetAccount"

// gauge counts the calls inside a handler and remembers the peak.
type gauge struct {
	inside, peak atomic.Int64
}

func (g *gauge) enter() {
	n := g.inside.Add(1)
	for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
	}
}

func (g *gauge) leave() { g.inside.Add(-1) }

// slowHook makes GetAccount take d and counts the calls inside it.
func slowHook(g *gauge, d time.Duration) app.Option {
	return withHandlerHook(func(ctx context.Context, method string) error {
		if method != getAccount {
			return nil
		}
		g.enter()
		defer g.leave()
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		return nil
	})
}

// outcome is what one call got: an HTTP status (REST and gRPC alike, gRPC
// codes mapped) and its retry-after.
type outcome struct {
	httpCode   int
	retryAfter string
}

func (e *testEnv) getAccountGRPC(ctx context.Context) outcome {
	var header metadata.MD
	_, err := e.account.GetAccount(ctx, &shebav1.GetAccountRequest{AccountId: unknownID}, grpc.Header(&header))
	code := map[codes.Code]int{codes.NotFound: 404, codes.ResourceExhausted: 429}[status.Code(err)]
	if code == 0 {
		code = 500 + int(status.Code(err)) // anything else is a failure
	}
	return outcome{code, strings.Join(header.Get("retry-after"), ",")}
}

func (e *testEnv) getAccountREST(t *testing.T) outcome {
	r := e.do(t, http.MethodGet, "/v1/accounts/"+unknownID, "")
	return outcome{r.Code, r.Header.Get("Retry-After")}
}

// TestConcurrencyLimitSheds sends 200 concurrent slow requests at
// max_inflight 10, on gRPC, on REST and on both at once: never more than 10
// run, the rest are shed with 429 and Retry-After, and nothing fails.
func TestConcurrencyLimitSheds(t *testing.T) {
	for _, transport := range []string{"gRPC", "REST", "both"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			g := &gauge{}
			e := newTestEnvWith(t, nil, []app.Option{slowHook(g, time.Second)}, func(c *config.Config) {
				c.Limits.MaxInflight = 10
			})
			const n = 200
			outcomes := make([]outcome, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					if transport == "gRPC" || (transport == "both" && i%2 == 0) {
						outcomes[i] = e.getAccountGRPC(t.Context())
					} else {
						outcomes[i] = e.getAccountREST(t)
					}
				})
			}
			wg.Wait()

			count := map[int]int{}
			for _, o := range outcomes {
				count[o.httpCode]++
				if o.httpCode == 429 {
					if secs, err := strconv.Atoi(o.retryAfter); err != nil || secs < 1 {
						t.Errorf("429 with retry-after %q, want whole seconds >= 1", o.retryAfter)
					}
				}
			}
			if count[404]+count[429] != n {
				t.Errorf("outcomes by status: %v; want only 404 (ran) and 429 (shed)", count)
			}
			if peak := g.peak.Load(); peak > 10 || peak < 1 {
				t.Errorf("peak in the handler: %d, want 1..10", peak)
			}
			if count[429] == 0 {
				t.Errorf("none of %d shed at max_inflight 10: %v", n, count)
			}
			t.Logf("outcomes %v, peak %d", count, g.peak.Load())
		})
	}
}

// TestPerKeyRateLimit hammers two keys for 3 s at 50/s with burst 50: each
// gets about burst + 50/s × elapsed, independently of the other.
func TestPerKeyRateLimit(t *testing.T) {
	t.Parallel()
	const keyA, keyB = "key-a-0123456789abcdefghijkl", "key-b-0123456789abcdefghijkl"
	e := newTestEnv(t, func(c *config.Config) {
		c.Auth.Keys = append(c.Auth.Keys, keyEntry("a", keyA), keyEntry("b", keyB))
		c.Limits.PerKeyRate = 50
		c.Limits.PerKeyBurst = 50
	})
	type tally struct {
		accepted, limited atomic.Int64
		badRetry          atomic.Int64
	}
	tallies := map[string]*tally{keyA: {}, keyB: {}}
	start := time.Now()
	deadline := start.Add(3 * time.Second)
	var wg sync.WaitGroup
	for key, tl := range tallies {
		for range 4 {
			wg.Go(func() {
				ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", key)
				for time.Now().Before(deadline) {
					o := e.getAccountGRPC(ctx)
					switch o.httpCode {
					case 404:
						tl.accepted.Add(1)
					case 429:
						tl.limited.Add(1)
						if secs, err := strconv.Atoi(o.retryAfter); err != nil || secs < 1 || secs > 1 {
							tl.badRetry.Add(1)
						}
					default:
						t.Errorf("unexpected outcome %+v", o)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	want := 50 + 50*elapsed
	for key, tl := range tallies {
		got := float64(tl.accepted.Load())
		t.Logf("key %s: accepted %v, limited %d in %.2fs (expected %.0f)", key[:5], got, tl.limited.Load(), elapsed, want)
		if got < want*0.85 || got > want*1.15 {
			t.Errorf("key %s: accepted %v in %.2fs, want %.0f ±15%%", key[:5], got, elapsed, want)
		}
		if tl.limited.Load() == 0 {
			t.Errorf("key %s: never limited", key[:5])
		}
		if n := tl.badRetry.Load(); n > 0 {
			t.Errorf("key %s: %d rejections without retry-after 1 (a token comes every 20 ms)", key[:5], n)
		}
	}

	// REST shares the buckets and says Retry-After too. Tokens came back
	// since the hammering stopped, so spend them first.
	var r restResponse
	for range 100 {
		if r = e.do(t, http.MethodGet, "/v1/accounts/"+unknownID, "", "X-Api-Key", keyA); r.Code != http.StatusNotFound {
			break
		}
	}
	wantRESTError(t, r, http.StatusTooManyRequests, codes.ResourceExhausted, "")
	if got := r.Header.Get("Retry-After"); got != "1" {
		t.Errorf("REST Retry-After: got %q, want 1", got)
	}
	// The test key has no per-key budget drawn: it still passes.
	wantCode(t, e.do(t, http.MethodGet, "/v1/accounts/"+unknownID, ""), http.StatusNotFound)
}

func TestGlobalRateLimit(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(c *config.Config) {
		c.Limits.Rate = 0.2 // one token each 5 s
		c.Limits.Burst = 3
	})
	var got []int
	for range 3 {
		got = append(got, e.getAccountGRPC(t.Context()).httpCode)
	}
	r := e.do(t, http.MethodGet, "/v1/ping", "")
	got = append(got, r.Code)
	if diff := cmp.Diff([]int{404, 404, 404, 429}, got); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	// Not earlier than the RateLimit header's t: the 3-token bucket at 0.2/s
	// is whole again in at most 15 s (docs/api.md#rate-limit-headers).
	if secs, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || secs < 1 || secs > 15 {
		t.Errorf("Retry-After: got %q, want 1..15", r.Header.Get("Retry-After"))
	}
}

// TestDeadlineCancelsQuery makes the insert of CreateSubscription sleep in
// Postgres: under a 200 ms deadline the call answers DeadlineExceeded / 504,
// and the backend query is cancelled, not left running.
func TestDeadlineCancelsQuery(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(c *config.Config) { c.Limits.Timeout = 200 * time.Millisecond })
	// Made in SQL: with a 200 ms limit even an argon2 hash may time out on a
	// loaded machine.
	id := e.insertAccount(t, "kim")
	if _, err := e.pool.Exec(t.Context(), `
		CREATE FUNCTION slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_sleep(30); RETURN NEW; END $$;
		CREATE TRIGGER slow BEFORE INSERT ON subscriptions FOR EACH ROW EXECUTE FUNCTION slow_insert();`); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	_, err := e.sub.CreateSubscription(t.Context(), &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"})
	wantGRPCError(t, err, codes.DeadlineExceeded, "")
	r := e.do(t, http.MethodPost, "/v1/accounts/"+id+"/subscription", `{"plan":"pro"}`)
	wantRESTError(t, r, http.StatusGatewayTimeout, codes.DeadlineExceeded, "")
	// A client deadline shorter than limits.timeout wins (Grpc-Timeout on REST).
	r = e.do(t, http.MethodPost, "/v1/accounts/"+id+"/subscription", `{"plan":"pro"}`, "Grpc-Timeout", "50m")
	wantRESTError(t, r, http.StatusGatewayTimeout, codes.DeadlineExceeded, "")
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("three calls took %v: the 30 s sleeps were waited out", took)
	}

	// Cancellation reaches the server a moment after the client gives up.
	running := -1
	for deadline := time.Now().Add(5 * time.Second); running != 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		running = e.count(t, `
			SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active' AND query LIKE '%INSERT INTO subscriptions%'`)
	}
	if running != 0 {
		t.Errorf("%d inserts still running in Postgres after their deadline", running)
	}
	n := e.count(t, `SELECT count(*) FROM subscriptions`)
	if n != 0 {
		t.Errorf("got %d subscriptions after timed-out creates, want 0", n)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	path := "/v1/accounts/" + unknownID
	for _, test := range []struct {
		name   string
		header []string
		want   int
	}{
		{"missing", []string{"X-Api-Key", ""}, 401},
		{"wrong", []string{"X-Api-Key", "not-the-key"}, 401},
		{"malformed authorization", []string{"X-Api-Key", "", "Authorization", "Token " + testKey}, 401},
		{"bearer without key", []string{"X-Api-Key", "", "Authorization", "Bearer"}, 401},
		{"bearer", []string{"X-Api-Key", "", "Authorization", "Bearer " + testKey}, 404},
		{"x-api-key", nil, 404},
	} {
		t.Run(test.name, func(t *testing.T) {
			r := e.do(t, http.MethodGet, path, "", test.header...)
			wantCode(t, r, test.want)
			if test.want == 401 {
				wantRESTError(t, r, 401, codes.Unauthenticated, "")
			}
		})
	}

	anonAccount := shebav1.NewAccountServiceClient(e.anon)
	_, err := anonAccount.GetAccount(t.Context(), &shebav1.GetAccountRequest{AccountId: unknownID})
	wantGRPCError(t, err, codes.Unauthenticated, "")
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "wrong")
	_, err = anonAccount.GetAccount(ctx, &shebav1.GetAccountRequest{AccountId: unknownID})
	wantGRPCError(t, err, codes.Unauthenticated, "")
	ctx = metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+testKey)
	_, err = anonAccount.GetAccount(ctx, &shebav1.GetAccountRequest{AccountId: unknownID})
	wantGRPCError(t, err, codes.NotFound, "")

	// gRPC health answers without a key, as grpc_health_probe asks.
	if _, err := healthpb.NewHealthClient(e.anon).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health Check without key: %v", err)
	}
	// Ping is public; operator endpoints need no key either.
	if _, err := shebav1.NewPingServiceClient(e.anon).Ping(t.Context(), &shebav1.PingRequest{}); err != nil {
		t.Errorf("public Ping without key: %v", err)
	}
	for _, path := range []string{"/v1/ping", "/livez", "/openapi.json", "/openapi.v3.json", "/docs"} {
		if r := e.do(t, http.MethodGet, path, "", "X-Api-Key", ""); r.Code/100 != 2 {
			t.Errorf("GET %s without key: got %d", path, r.Code)
		}
	}
	if strings.Contains(e.logs.String(), testKey) {
		t.Error("the API key appears in the log")
	}
}

func TestPanicIsInternalAndServerLives(t *testing.T) {
	t.Parallel()
	e := newTestEnvWith(t, nil, []app.Option{withHandlerHook(func(ctx context.Context, method string) error {
		if method == getAccount {
			panic("handler bug")
		}
		return nil
	})})
	_, err := e.account.GetAccount(t.Context(), &shebav1.GetAccountRequest{AccountId: unknownID})
	wantGRPCError(t, err, codes.Internal, "")
	r := e.do(t, http.MethodGet, "/v1/accounts/"+unknownID, "")
	st := wantRESTError(t, r, http.StatusInternalServerError, codes.Internal, "")
	if st.GetMessage() != "internal error" {
		t.Errorf("message: got %q, want %q", st.GetMessage(), "internal error")
	}
	if _, err := e.ping.Ping(t.Context(), &shebav1.PingRequest{}); err != nil {
		t.Errorf("Ping after the panics: %v", err)
	}
	wantCode(t, e.do(t, http.MethodGet, "/v1/ping", ""), http.StatusOK)
	if logs := e.logs.String(); !strings.Contains(logs, "handler bug") || !strings.Contains(logs, "goroutine") {
		t.Errorf("the panic and its stack are not in the log:\n%s", logs)
	}
}

// TestOperatorEndpointsUnderRejection fills every in-flight slot and drains
// the global bucket: business calls are refused, operator endpoints answer.
func TestOperatorEndpointsUnderRejection(t *testing.T) {
	t.Parallel()
	g := &gauge{}
	e := newTestEnvWith(t, nil, []app.Option{slowHook(g, 2*time.Second)}, func(c *config.Config) {
		c.Limits.MaxInflight = 2
	})
	waitReady(t, e)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { e.getAccountGRPC(t.Context()) })
	}
	for g.inside.Load() < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	if o := e.getAccountGRPC(t.Context()); o.httpCode != 429 {
		t.Errorf("business call with all slots taken: got %d, want 429", o.httpCode)
	}
	for path, want := range map[string]int{"/livez": 204, "/readyz": 200, "/openapi.json": 200, "/openapi.v3.json": 200, "/docs": 200, "/metrics": 200} {
		if r := e.do(t, http.MethodGet, path, ""); r.Code != want {
			t.Errorf("GET %s while shedding: got %d, want %d", path, r.Code, want)
		}
	}
	if resp, err := healthpb.NewHealthClient(e.anon).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health Check while shedding: got %v, %v; want SERVING", resp, err)
	}
	f := e.scrape(t)
	if got := series(f, "sheba_rejected_total", "reason")["reason=inflight"]; got != 1 {
		t.Errorf("sheba_rejected_total{reason=inflight}: got %v, want 1", got)
	}
	if got := series(f, "sheba_inflight_requests")[""]; got != 2 {
		t.Errorf("sheba_inflight_requests: got %v, want 2", got)
	}
	wg.Wait()
}

// waitReady waits for the first database ping to mark the server ready.
func waitReady(t *testing.T, e *testEnv) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if e.do(t, http.MethodGet, "/readyz", "").Code == http.StatusOK {
			return
		}
	}
	t.Fatal(errors.New("not ready within 10 s"))
}
