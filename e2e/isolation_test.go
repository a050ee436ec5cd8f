package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// Callers are isolated: a request that waits for a scarce resource (a
// password hash slot) holds no database connection or transaction while
// it waits (docs/operations.md#password-hashing).

// restCode sends a REST request with testKey and a JSON body (none if "")
// and returns the status code; header holds name, value pairs. Unlike
// e.do it reports a failure to send as an error, so that goroutines may
// call it.
func (e *testEnv) restCode(ctx context.Context, method, path, body string, header ...string) (int, error) {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.baseURL+path, r)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", testKey)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// grpcHTTPCode is the REST status of a gRPC error, for counting the
// answers of both transports alike.
func grpcHTTPCode(err error) int {
	return runtime.HTTPStatusFromCode(status.Code(err))
}

// codeCount counts answers by transport and HTTP status.
type codeCount struct {
	mu     sync.Mutex
	counts map[string]int
}

func (t *codeCount) add(transport string, code int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.counts == nil {
		t.counts = map[string]int{}
	}
	t.counts[fmt.Sprintf("%s %d", transport, code)]++
}

func (t *codeCount) get(transport string, code int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts[fmt.Sprintf("%s %d", transport, code)]
}

func (t *codeCount) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprint(t.counts)
}

// idleInTx samples, every few milliseconds until ctx ends, the sessions of
// the server's database that are idle in a transaction, and returns the
// most seen at once and the session time they add up to.
func (e *testEnv) idleInTx(ctx context.Context) (peak int, total time.Duration, samples int) {
	const every = 5 * time.Millisecond
	tick := time.NewTicker(every)
	defer tick.Stop()
	last := time.Now()
	for {
		var n int
		err := e.pool.QueryRow(ctx, `
			SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'idle in transaction'`).Scan(&n)
		if err != nil {
			return peak, total, samples
		}
		now := time.Now()
		samples++
		peak = max(peak, n)
		total += time.Duration(n) * now.Sub(last)
		last = now
		select {
		case <-ctx.Done():
			return peak, total, samples
		case <-tick.C:
		}
	}
}

// TestKeyedSignupsIsolated sends 32 concurrent sign-ups with idempotency
// keys, on a pool of 4 connections, while GetAccount is called on both
// transports: the sign-ups wait for a hash slot (about one per core)
// holding no connection, so GetAccount never waits behind their hashing
// until its deadline. The answers of both, and the sessions Postgres saw
// idle in a transaction meanwhile, are logged.
//
// Not parallel: hashing takes every core it is allowed, which would
// starve the other tests of this package of their deadlines.
func TestKeyedSignupsIsolated(t *testing.T) {
	e := newTestEnv(t, func(c *config.Config) { c.Database.MaxConns = 4 })
	id := e.insertAccount(t, "reader")
	const signups = 32

	// The readers' deadline is measured against one sign-up on this
	// machine, so that a slow machine lengthens it with the hashing: far
	// above what a read takes (the slowest read was 2 to 5 sign-ups long
	// on a loaded 2-core machine), below the sign-ups' hashing in all (16
	// hashes one after another on two cores), which the first reads
	// waited for when the sign-ups held the pool's connections while they
	// waited (over 10 sign-ups long).
	t0 := time.Now()
	if _, err := e.account.CreateAccount(withIdemKey(t.Context(), "probe"), &shebav1.CreateAccountRequest{Username: "probe", Password: "correct horse"}); err != nil {
		t.Fatalf("CreateAccount: %v", err)
	}
	deadline := max(8*time.Since(t0), 250*time.Millisecond)

	sampled := make(chan [3]int64, 1)
	sampling, stopSampling := context.WithCancel(t.Context())
	go func() {
		peak, total, n := e.idleInTx(sampling)
		sampled <- [3]int64{int64(peak), int64(total), int64(n)}
	}()

	readersDone := make(chan struct{})
	var reads codeCount
	var slowest maxDuration
	var readers sync.WaitGroup
	for i := range 4 {
		readers.Go(func() {
			for {
				select {
				case <-readersDone:
					return
				default:
				}
				t0 := time.Now()
				if i%2 == 0 {
					ctx, cancel := context.WithTimeout(t.Context(), deadline)
					_, err := e.account.GetAccount(ctx, &shebav1.GetAccountRequest{AccountId: id})
					cancel()
					reads.add("grpc", grpcHTTPCode(err))
					slowest.note(time.Since(t0))
					continue
				}
				code, err := e.restCode(t.Context(), http.MethodGet, "/v1/accounts/"+id, "",
					"Grpc-Timeout", fmt.Sprintf("%dm", deadline.Milliseconds()))
				if err != nil {
					t.Errorf("REST GetAccount: %v", err)
					return
				}
				reads.add("rest", code)
				slowest.note(time.Since(t0))
			}
		})
	}

	var writes codeCount
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range signups {
		wg.Go(func() {
			<-start
			user, key := fmt.Sprintf("signup%d", i), fmt.Sprintf("signup-key-%d", i)
			if i%2 == 0 {
				_, err := e.account.CreateAccount(withIdemKey(t.Context(), key), &shebav1.CreateAccountRequest{Username: user, Password: "correct horse"})
				writes.add("grpc", grpcHTTPCode(err))
				return
			}
			code, err := e.restCode(t.Context(), http.MethodPost, "/v1/accounts",
				fmt.Sprintf(`{"username":%q,"password":"correct horse"}`, user), "Idempotency-Key", key)
			if err != nil {
				t.Errorf("REST CreateAccount: %v", err)
				return
			}
			writes.add("rest", code)
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	took := time.Since(began)
	close(readersDone)
	readers.Wait()
	stopSampling()
	s := <-sampled

	t.Logf("%d keyed sign-ups on a pool of 4 took %v; answers by code: %v", signups, took, &writes)
	t.Logf("GetAccount answers meanwhile (deadline %v), by code: %v; slowest %v", deadline, &reads, slowest.get())
	t.Logf("sessions idle in a transaction: at most %d at once over %d samples; %.1f ms of session time in all, %.1f ms per sign-up",
		s[0], s[2], float64(s[1])/1e6, float64(s[1])/1e6/signups)
	for _, transport := range []string{"grpc", "rest"} {
		if n := reads.get(transport, http.StatusGatewayTimeout); n > 0 {
			t.Errorf("%s GetAccount: %d answered 504 while the sign-ups waited to hash, want none", transport, n)
		}
		if reads.get(transport, http.StatusOK) == 0 {
			t.Errorf("%s GetAccount: none answered 200: %v", transport, &reads)
		}
	}
}

// maxDuration is the longest of the durations noted.
type maxDuration struct {
	mu sync.Mutex
	d  time.Duration
}

func (m *maxDuration) note(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.d = max(m.d, d)
}

func (m *maxDuration) get() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.d
}
