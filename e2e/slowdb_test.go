package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/internal/app"
)

// A slow or saturated database is not a down one (docs/operations.md#slow-database).

// TestSlowDatabase puts 150 ms each way between sheba and Postgres and
// runs 2 × max_conns GetAccount loops (half REST, half gRPC) for 10 s:
// readiness stays 200 throughout (the health check has a connection of its
// own), and every answer is 200, 429 or 504, never 503 (a pool wait or a
// query that outlives its deadline is a timeout, not an outage). Timed-out
// queries are cancelled, not torn down, so the pool opens few connections.
// Once the latency is gone, a GetAccount answers 200 within two health
// intervals; and a database that stops answering altogether still turns
// readiness 503.
func TestSlowDatabase(t *testing.T) {
	t.Parallel()
	const (
		interval = time.Second
		maxConns = 4
		latency  = 150 * time.Millisecond
		load     = 10 * time.Second
	)
	rewrite, proxy := viaProxy(t)
	e := startTestEnv(t, envSetup{
		opts:    []app.Option{app.WithHealthInterval(interval)},
		poolURL: rewrite,
		mutate: []func(*config.Config){func(c *config.Config) {
			c.Database.MaxConns = maxConns
			c.Limits.Timeout = time.Second
		}},
	})
	waitFor(t, 10*time.Second, "ready at start", func() bool { return e.readiness(t).ready() })
	id := e.insertAccount(t, "slowdb")

	(*proxy).setLatency(latency)
	before := e.pool.Stat().NewConnsCount()
	ctx, stop := context.WithTimeout(t.Context(), load)
	defer stop()

	var (
		mu      sync.Mutex
		answers = map[string]int{} // "REST 200", "gRPC DeadlineExceeded", ...
	)
	count := func(what string) {
		mu.Lock()
		answers[what]++
		mu.Unlock()
	}
	client := &http.Client{Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	// Twice as many callers as connections: a call waits about as long for
	// a connection as its query takes, so some calls time out and some
	// succeed on both transports. With four times as many, successes were
	// rare enough (12 of 149 once, all gRPC) that a transport could get
	// none by chance.
	for i := range 2 * maxConns {
		wg.Go(func() {
			for ctx.Err() == nil {
				if i%2 == 0 {
					_, err := e.account.GetAccount(t.Context(), &shebav1.GetAccountRequest{AccountId: id})
					count("gRPC " + status.Code(err).String())
					continue
				}
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, e.baseURL+"/v1/accounts/"+id, nil)
				req.Header.Set("X-Api-Key", testKey)
				resp, err := client.Do(req)
				if err != nil {
					count("REST error " + err.Error())
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				count(fmt.Sprintf("REST %d", resp.StatusCode))
			}
		})
	}
	// Readiness is polled throughout, on both transports.
	polls, notReady := 0, 0
	for ctx.Err() == nil {
		if rd := e.readiness(t); !rd.ready() {
			notReady++
			t.Errorf("not ready under the slow database: %+v", rd)
		}
		polls++
		time.Sleep(200 * time.Millisecond)
	}
	wg.Wait()
	opened := e.pool.Stat().NewConnsCount() - before

	for _, k := range slices.Sorted(maps.Keys(answers)) {
		t.Logf("%6d %s", answers[k], k)
		switch k {
		case "REST 200", "REST 429", "REST 504", "gRPC OK", "gRPC ResourceExhausted", "gRPC DeadlineExceeded":
		default:
			t.Errorf("%d answers %q under the slow database, want only 200, 429 or 504", answers[k], k)
		}
	}
	if answers["REST 200"] == 0 || answers["gRPC OK"] == 0 {
		t.Errorf("no call succeeded under the slow database: %v", answers)
	}
	t.Logf("readiness: %d polls, %d not ready; pool opened %d connections under load (max_conns %d)", polls, notReady, opened, maxConns)
	// Each timed-out query would cost a connection if timeouts closed
	// them; cancelled ones keep theirs.
	if opened > 2*maxConns {
		t.Errorf("pool opened %d connections under load, want at most %d: timeouts tear connections down", opened, 2*maxConns)
	}

	(*proxy).setLatency(0)
	removed := time.Now()
	waitFor(t, 2*interval, "GetAccount 200 within two health intervals of the latency's removal", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		_, err := e.account.GetAccount(ctx, &shebav1.GetAccountRequest{AccountId: id})
		return err == nil && e.readiness(t).ready()
	})
	t.Logf("back to normal %v after the latency was removed", time.Since(removed))

	// A database that stops answering (connections open, nothing comes
	// back) is down.
	(*proxy).setLatency(time.Hour)
	// Each ping then fails after its interval plus the 2 s given to its
	// cancel request; two must fail.
	took := waitFor(t, 2*(interval+2*time.Second)+2*time.Second, "/readyz 503 once the database stops answering", func() bool { return e.readiness(t).notReady() })
	t.Logf("not ready %v after the database stopped answering", took)
	// Cut the held connections, so that the pools close at once.
	(*proxy).cut()
}
