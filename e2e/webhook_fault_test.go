package e2e

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/webhooks"
)

// badServer starts a receiver that misbehaves with h.
func badServer(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(func() {
		s.CloseClientConnections()
		s.Close()
	})
	return s.URL
}

// TestWebhookBadReceiversBlockNobody points endpoints at receivers that
// hang, reset, redirect, answer slowly and answer with a huge body, beside
// a good one: each bad one is retried with the reason recorded, and the
// good one gets every event meanwhile.
func TestWebhookBadReceiversBlockNobody(t *testing.T) {
	t.Parallel()
	const timeout = 500 * time.Millisecond
	e := newWebhookEnv(t, nil, func(c *config.Config) {
		c.Webhooks.Timeout = timeout
		c.Webhooks.PerEndpointConcurrency = 2
	})
	// The most one answer of the huge receiver got written (the kernel's
	// socket buffers take some MiB before the writer blocks).
	var hugeWritten atomic.Int64
	bad := map[string]string{
		"hang": badServer(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(3 * timeout): // far past sheba's patience
			}
		}),
		"reset": badServer(t, func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.(*net.TCPConn).SetLinger(0) // RST, not FIN
				conn.Close()
			}
		}),
		"redirect": badServer(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://127.0.0.1:1/elsewhere", http.StatusFound)
		}),
		"huge": badServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			chunk := []byte(strings.Repeat("x", 64<<10))
			var written int64
			defer func() {
				for old := hugeWritten.Load(); written > old && !hugeWritten.CompareAndSwap(old, written); old = hugeWritten.Load() {
				}
			}()
			for range 4096 { // 256 MiB if anyone read it all
				n, err := w.Write(chunk)
				written += int64(n)
				if err != nil {
					return
				}
			}
		}),
		"slow-headers": badServer(t, func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(2 * timeout)
			w.WriteHeader(http.StatusOK)
		}),
	}
	ids := map[string]string{}
	for name, url := range bad {
		ids[name], _ = e.createEndpoint(t, url, "subscription.created", "subscription.canceled")
	}
	// Slow but within the timeout: a success.
	slow := newReceiver(t, func(int, http.ResponseWriter) int { time.Sleep(timeout / 3); return http.StatusOK })
	slowID, _ := e.createEndpoint(t, slow.URL, "subscription.created", "subscription.canceled")
	good := newReceiver(t, func(int, http.ResponseWriter) int { return http.StatusOK })
	goodID, _ := e.createEndpoint(t, good.URL, "subscription.created", "subscription.canceled")

	const events = 10
	start := time.Now()
	e.churn(t, "bad", events)
	waitFor(t, 15*time.Second, "the good endpoint served", func() bool { return e.allSucceeded(t, goodID, events) })
	t.Logf("good endpoint got %d events in %v beside five bad ones", events, time.Since(start))
	waitFor(t, 15*time.Second, "the slow endpoint served", func() bool { return e.allSucceeded(t, slowID, events) })

	wantError := map[string]string{
		"hang":         "timeout",
		"reset":        "connection reset",
		"redirect":     "HTTP 302",
		"huge":         "HTTP 500",
		"slow-headers": "timeout",
	}
	for name, id := range ids {
		waitFor(t, 15*time.Second, name+" retried", func() bool {
			ds := e.deliveries(t, id)
			for _, d := range ds {
				if d["attempts"].(float64) >= 2 {
					return true
				}
			}
			return false
		})
		for _, d := range e.deliveries(t, id) {
			if d["state"] == "SUCCEEDED" {
				t.Errorf("%s: got a SUCCEEDED delivery, want none", name)
			}
			// An attempt in flight has no outcome yet.
			if d["lastAttemptTime"] != nil && !strings.Contains(d["lastError"].(string), wantError[name]) {
				t.Errorf("%s: got last error %q, want it to say %q", name, d["lastError"], wantError[name])
			}
		}
	}
	if n := hugeWritten.Load(); n >= 64<<20 {
		t.Errorf("the huge receiver wrote %d bytes of one answer, want it cut after a few KiB (and the socket buffers)", n)
	}
	// The redirect was not followed: the 302 is the answer.
	for _, d := range e.deliveries(t, ids["redirect"]) {
		if d["lastHttpStatus"] != float64(302) && d["lastAttemptTime"] != nil {
			t.Errorf("redirect: got %v, want the 302 recorded as the answer", d)
		}
	}
	// Stop retrying before the receivers close, or their Close waits for
	// sheba's next attempts.
	if err := e.stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
}

// TestWebhookOutage takes an endpoint down while 40 events arrive, then
// brings it back: at most per_endpoint_concurrency requests are ever in
// flight, the throttle holds most attempts back during the outage, and
// every event arrives after recovery, once.
func TestWebhookOutage(t *testing.T) {
	t.Parallel()
	const (
		events = 40
		outage = 5 * time.Second
		cap    = 2
	)
	e := newWebhookEnv(t, nil, func(c *config.Config) { c.Webhooks.PerEndpointConcurrency = cap })
	var down atomic.Bool
	down.Store(true)
	var outageRequests atomic.Int64
	rcv := newReceiver(t, func(int, http.ResponseWriter) int {
		time.Sleep(20 * time.Millisecond) // long enough for requests to overlap
		if down.Load() {
			outageRequests.Add(1)
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	endpointID, _ := e.createEndpoint(t, rcv.URL, "subscription.created", "subscription.canceled")
	start := time.Now()
	e.churn(t, "outage", events)
	time.Sleep(outage - time.Since(start))
	down.Store(false)
	recovered := time.Now()
	waitFor(t, 30*time.Second, "every event delivered", func() bool { return e.allSucceeded(t, endpointID, events) })
	drain := time.Since(recovered)

	// Without the throttle, each event would be retried on its own backoff
	// (base 50ms, ceiling 400ms: one request per 200ms on average, less the
	// 20ms answer) all through the outage.
	unthrottled := float64(events) * outage.Seconds() / 0.22
	got := outageRequests.Load()
	t.Logf("outage %v: %d requests (%.0f without the throttle), drained in %v, max in flight %d", outage, got, unthrottled, drain, rcv.peak())
	if float64(got) > unthrottled/4 {
		t.Errorf("got %d requests during the outage, want under a quarter of the %.0f the backoff alone allows", got, unthrottled)
	}
	if peak := rcv.peak(); peak > cap {
		t.Errorf("got %d requests in flight at once, want at most %d", peak, cap)
	}
	held := series(e.scrape(t), "sheba_webhook_held_total", "reason")
	if held["reason=throttle"] == 0 {
		t.Errorf("got sheba_webhook_held_total %v, want throttle holds", held)
	}
	// Every event succeeded exactly once.
	ok := map[string]int{}
	for _, d := range rcv.requests() {
		if d.at.After(recovered) {
			ok[d.header.Get("webhook-id")]++
		}
	}
	for id, n := range ok {
		if n != 1 {
			t.Errorf("event %s delivered %d times after recovery, want once", id, n)
		}
	}
}

// bareOptions are the options of a webhook runner started by a test, as
// another replica (or sheba after a restart).
var bareOptions = webhooks.Options{
	Timeout: 2 * time.Second, MaxAttempts: 20, BackoffBase: 50 * time.Millisecond, BackoffMax: 400 * time.Millisecond,
	PerEndpointConcurrency: 1, AllowPrivateNetworks: true, PollInterval: 50 * time.Millisecond,
}

// startRunner runs a webhook runner over pool until the test ends.
func startRunner(t *testing.T, pool *pgxpool.Pool, o webhooks.Options) {
	t.Helper()
	r, err := webhooks.New(pool, store.New(pool), o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, 5*time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// TestWebhookRestartLosesNothing stops sheba while a backlog is being
// delivered and starts the deliveries again, as a new replica would: every
// event arrives.
func TestWebhookRestartLosesNothing(t *testing.T) {
	t.Parallel()
	e := newWebhookEnv(t, nil, func(c *config.Config) { c.Webhooks.PerEndpointConcurrency = 1 })
	rcv := newReceiver(t, func(int, http.ResponseWriter) int {
		time.Sleep(50 * time.Millisecond)
		return http.StatusOK
	})
	endpointID, _ := e.createEndpoint(t, rcv.URL, "subscription.created", "subscription.canceled")
	const events = 30
	e.churn(t, "restart", events)
	waitFor(t, 10*time.Second, "a few deliveries", func() bool { return len(rcv.requests()) >= 3 })
	if err := e.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	before := len(rcv.ids())
	if before >= events {
		t.Fatalf("all %d events were delivered before the stop; the test proves nothing", events)
	}

	startRunner(t, e.pool, bareOptions)
	waitFor(t, 20*time.Second, "every event delivered after the restart", func() bool {
		var pending int
		if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND state <> 'succeeded'`, endpointID).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		return pending == 0
	})
	ids := rcv.ids()
	if len(ids) != events {
		t.Errorf("receiver got %d distinct events, want %d", len(ids), events)
	}
	t.Logf("%d events delivered before the stop, the rest after; %d requests in all", before, len(rcv.requests()))
}

// TestWebhookCrashMidAttempt leaves the queue as a replica killed in the
// middle of an attempt leaves it (the job running, the attempt counted, no
// outcome) and starts a fresh runner: River rescues the job and the event
// is delivered.
func TestWebhookCrashMidAttempt(t *testing.T) {
	t.Parallel()
	e := newWebhookEnv(t, nil)
	rcv := newReceiver(t, func(int, http.ResponseWriter) int { return http.StatusOK })
	endpointID, _ := e.createEndpoint(t, rcv.URL, "account.created")
	// The first sheba goes away before it works anything.
	if err := e.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	st := store.New(e.pool)
	dead, err := webhooks.New(e.pool, st, bareOptions)
	if err != nil {
		t.Fatal(err)
	}
	account := &shebav1.Account{Id: unknownID, Username: "crash"}
	if err := st.InTx(t.Context(), func(ctx context.Context) error { return dead.Publish(ctx, "account.created", account) }); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	// What the killed replica left: the job taken an hour ago, the attempt
	// counted, no outcome.
	if _, err := e.pool.Exec(t.Context(), `
		UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() - interval '1 hour',
		       attempted_by = ARRAY['killed-replica']`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(t.Context(), `UPDATE webhook_deliveries SET attempts = 1`); err != nil {
		t.Fatal(err)
	}

	startRunner(t, e.pool, bareOptions)
	waitFor(t, 30*time.Second, "the rescued delivery", func() bool { return len(rcv.requests()) == 1 })
	var state string
	var attempts int
	waitFor(t, 5*time.Second, "the delivery recorded", func() bool {
		if err := e.pool.QueryRow(t.Context(), `SELECT state, attempts FROM webhook_deliveries WHERE endpoint_id = $1`, endpointID).Scan(&state, &attempts); err != nil {
			t.Fatal(err)
		}
		return state == "succeeded"
	})
	if attempts != 2 {
		t.Errorf("got %d attempts, want 2: the one cut by the crash counts", attempts)
	}
}
