package webhooks

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/webhooks/webhookstest"
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

// TestBadReceiversBlockNobody points endpoints at receivers that hang,
// reset, redirect, answer slowly and answer with a huge body, beside a good
// one: each bad one is retried with the reason recorded, and the good one
// gets every event meanwhile.
func TestBadReceiversBlockNobody(t *testing.T) {
	t.Parallel()
	const timeout = 500 * time.Millisecond
	b := newTestbed(t, func(o *Options) {
		o.Timeout = timeout
		o.PerEndpointConcurrency = 2
	})
	// The most one answer of the huge receiver got written (the kernel's
	// socket buffers take some MiB before the writer blocks).
	var hugeWritten atomic.Int64
	bad := map[string]string{
		"hang": badServer(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(3 * timeout): // far past the runner's patience
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
	types := []string{"subscription.created", "subscription.canceled"}
	ids := map[string]string{}
	for name, url := range bad {
		ids[name] = b.endpoint(t, url, types...).ID
	}
	// Slow but within the timeout: a success.
	slow := webhookstest.NewReceiver(t, func(int, http.ResponseWriter) int { time.Sleep(timeout / 3); return http.StatusOK })
	slowID := b.endpoint(t, slow.URL, types...).ID
	good := webhookstest.NewReceiver(t, webhookstest.Status(http.StatusOK))
	goodID := b.endpoint(t, good.URL, types...).ID
	run(t, b.r)

	const events = 10
	start := time.Now()
	b.churn(t, events)
	b.waitDeliveries(t, goodID, 60*time.Second, "the good endpoint served", all(events, store.DeliverySucceeded))
	t.Logf("good endpoint got %d events in %v beside five bad ones", events, time.Since(start))
	b.waitDeliveries(t, slowID, 60*time.Second, "the slow endpoint served", all(events, store.DeliverySucceeded))

	wantError := map[string]string{
		"hang":         "timeout",
		"reset":        "connection reset",
		"redirect":     "HTTP 302",
		"huge":         "HTTP 500",
		"slow-headers": "timeout",
	}
	for name, id := range ids {
		ds := b.waitDeliveries(t, id, 60*time.Second, name+" retried", func(ds []store.WebhookDelivery) bool {
			for _, d := range ds {
				if d.Attempts >= 2 {
					return true
				}
			}
			return false
		})
		for _, d := range ds {
			if d.State == store.DeliverySucceeded {
				t.Errorf("%s: got a succeeded delivery, want none", name)
			}
			// An attempt in flight has no outcome yet.
			if d.LastAttemptTime != nil && !strings.Contains(d.LastError, wantError[name]) {
				t.Errorf("%s: got last error %q, want it to say %q", name, d.LastError, wantError[name])
			}
			// The redirect was not followed: the 302 is the answer.
			if name == "redirect" && d.LastAttemptTime != nil && d.LastHTTPStatus != http.StatusFound {
				t.Errorf("redirect: got %+v, want the 302 recorded as the answer", d)
			}
		}
	}
	if n := hugeWritten.Load(); n >= 64<<20 {
		t.Errorf("the huge receiver wrote %d bytes of one answer, want it cut after a few KiB (and the socket buffers)", n)
	}
}

// TestOutage takes an endpoint down while 40 events arrive, then brings it
// back, with one replica and with three on the same database: at most
// per_endpoint_concurrency requests are ever in flight, from the replicas
// together; the throttle and the park hold most attempts back during the
// outage, three replicas sending no more than one is allowed (the throttle
// is each replica's, but the failures in a row, the park and its one probe
// at a time are shared in Postgres, as the cap is); and every event
// arrives after recovery, once.
func TestOutage(t *testing.T) {
	t.Parallel()
	for _, test := range []struct {
		name     string
		replicas int
	}{
		{"one replica", 1},
		{"three replicas", 3},
	} {
		t.Run(test.name, func(t *testing.T) {
			t.Parallel()
			const (
				events = 40
				outage = 5 * time.Second
				slots  = 2
			)
			adjust := func(o *Options) { o.PerEndpointConcurrency = slots }
			b := newTestbed(t, adjust)
			var down atomic.Bool
			down.Store(true)
			var outageRequests atomic.Int64
			rcv := webhookstest.NewReceiver(t, func(int, http.ResponseWriter) int {
				time.Sleep(20 * time.Millisecond) // long enough for requests to overlap
				if down.Load() {
					outageRequests.Add(1)
					return http.StatusServiceUnavailable
				}
				return http.StatusOK
			})
			ep := b.endpoint(t, rcv.URL, "subscription.created", "subscription.canceled")
			rs := b.replicas(t, test.replicas, adjust)
			for _, r := range rs {
				run(t, r)
			}
			start := time.Now()
			b.churn(t, events)
			time.Sleep(outage - time.Since(start))
			down.Store(false)
			recovered := time.Now()
			b.waitDeliveries(t, ep.ID, 2*time.Minute, "every event delivered", all(events, store.DeliverySucceeded))
			drain := time.Since(recovered)

			// Without the throttle, each event would be retried on its own
			// backoff (base 50ms, ceiling 400ms: one request per 200ms on
			// average, less the 20ms answer) all through the outage.
			unthrottled := float64(events) * outage.Seconds() / 0.22
			got := outageRequests.Load()
			var sent []float64
			for _, r := range rs {
				sent = append(sent, r.sent())
			}
			t.Logf("outage %v: %d requests (%.0f without the throttle; sent by each replica, outage and after: %v), drained in %v, max in flight %d",
				outage, got, unthrottled, sent, drain, rcv.Peak())
			if float64(got) > unthrottled/4 {
				t.Errorf("got %d requests during the outage, want under a quarter of the %.0f the backoff alone allows", got, unthrottled)
			}
			if peak := rcv.Peak(); peak > slots {
				t.Errorf("got %d requests in flight at once, want at most %d", peak, slots)
			}
			// With three, the park may come before any replica's throttle has
			// counted enough failures to hold one back.
			if held := testutil.ToFloat64(b.r.m.held.WithLabelValues("throttle")); test.replicas == 1 && held == 0 {
				t.Error("got sheba_webhook_held_total{reason=\"throttle\"} 0, want throttle holds")
			}
			// Every event succeeded exactly once.
			ok := map[string]int{}
			for _, req := range rcv.Requests() {
				if req.At.After(recovered) {
					ok[req.Header.Get("webhook-id")]++
				}
			}
			for id, n := range ok {
				if n != 1 {
					t.Errorf("event %s delivered %d times after recovery, want once", id, n)
				}
			}
		})
	}
}

// TestRestartLosesNothing stops the runner while a backlog is being
// delivered, in the middle of an attempt, and starts another over the same
// database, as a new replica would: every event arrives, the one whose
// attempt the stop cut short again.
func TestRestartLosesNothing(t *testing.T) {
	t.Parallel()
	b := newTestbed(t, func(o *Options) { o.PerEndpointConcurrency = 1 })
	// The fourth request is held until the runner has stopped.
	const held = 4
	arrived, resume := make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(resume) })
	rcv := webhookstest.NewReceiver(t, func(n int, _ http.ResponseWriter) int {
		if n == held {
			close(arrived)
			select {
			case <-resume:
			case <-time.After(time.Minute):
			}
		}
		time.Sleep(50 * time.Millisecond)
		return http.StatusOK
	})
	t.Cleanup(release)
	ep := b.endpoint(t, rcv.URL, "subscription.created", "subscription.canceled")
	stop := run(t, b.r)
	const events = 30
	b.churn(t, events)
	select {
	case <-arrived:
	case <-time.After(60 * time.Second):
		t.Fatalf("the receiver got %d requests, want %d", len(rcv.Requests()), held)
	}
	// Whether the stop waits for the attempt (up to its timeout) or cuts
	// it at once, Run may report that it had to cancel it.
	if err := stop(); err != nil {
		t.Logf("Run: %v", err)
	}
	release()
	cut := rcv.Requests()[held-1].Header.Get("webhook-id")
	before := len(rcv.IDs())
	if before >= events {
		t.Fatalf("all %d events were delivered before the stop; the test proves nothing", events)
	}

	o := testOptions()
	o.PerEndpointConcurrency = 1
	run(t, b.newRunner(t, o))
	ds := b.waitDeliveries(t, ep.ID, 60*time.Second, "every event delivered after the restart", all(events, store.DeliverySucceeded))
	if n := len(rcv.IDs()); n != events {
		t.Errorf("receiver got %d distinct events, want %d", n, events)
	}
	for _, d := range ds {
		if d.EventID == cut && d.Attempts != 2 {
			t.Errorf("the event whose attempt the stop cut: got %d attempts, want 2", d.Attempts)
		}
	}
	if n := rcv.IDs()[cut]; n != 2 {
		t.Errorf("the event whose attempt the stop cut: receiver got it %d times, want 2", n)
	}
	t.Logf("%d events reached the receiver before the stop, the rest after; %d requests in all", before, len(rcv.Requests()))
}

// TestCrashMidAttempt leaves the queue as a replica killed in the middle
// of an attempt leaves it (the job running, the attempt counted, no
// outcome, its leases of the endpoint's slots held) and starts a fresh
// runner: River rescues the job, and the event is delivered once the dead
// replica's leases have expired.
func TestCrashMidAttempt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// b.r is the replica that dies: it publishes and never runs.
	b := newTestbed(t, nil)
	rcv := webhookstest.NewReceiver(t, webhookstest.Status(http.StatusOK))
	ep := b.endpoint(t, rcv.URL, "account.created")
	b.publish(t, "account.created", &shebav1.Account{Id: uuid.NewString(), Username: "crash"})
	b.fanOut(t)
	job := b.publishedJob(t)
	// What the killed replica left: the job taken an hour ago, the attempt
	// counted, no outcome.
	if _, err := b.pool.Exec(ctx, `
		UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() - interval '1 hour',
		       attempted_by = ARRAY['killed-replica']
		WHERE id = $1`, job.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.StartDeliveryAttempt(ctx, ep.ID, b.deliveries(t, ep.ID)[0].EventID); err != nil {
		t.Fatal(err)
	}
	// Every slot of the endpoint, leased for 2 s more (a lease lasts longer
	// than a job may run; the crash came near its end).
	var expires time.Time
	if err := b.pool.QueryRow(ctx, `
		INSERT INTO webhook_leases (endpoint_id, slot, holder, expire_time)
		SELECT $1, slot, gen_random_uuid(), now() + interval '2 seconds'
		FROM generate_series(0, $2::integer - 1) AS slot
		RETURNING expire_time`, ep.ID, testOptions().PerEndpointConcurrency).Scan(&expires); err != nil {
		t.Fatal(err)
	}

	run(t, b.newRunner(t, testOptions()))
	ds := b.waitDeliveries(t, ep.ID, 90*time.Second, "the rescued delivery succeeded", all(1, store.DeliverySucceeded))
	if ds[0].Attempts != 2 {
		t.Errorf("got %d attempts, want 2: the one cut by the crash counts", ds[0].Attempts)
	}
	reqs := rcv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(reqs))
	}
	// The test's Postgres runs on this machine, on its clock.
	if reqs[0].At.Before(expires) {
		t.Errorf("the rescued attempt arrived %v before the dead replica's leases expired, want after", expires.Sub(reqs[0].At))
	}
}

// TestStopGivesAttemptsTheirTime stops a runner while an attempt is at
// the receiver: an attempt that fits in the stop timeout finishes (the
// delivery SUCCEEDED, one request), and one that does not is cancelled
// when the timeout runs out, its delivery left pending for a later run,
// and Run says so.
func TestStopGivesAttemptsTheirTime(t *testing.T) {
	t.Parallel()
	for _, test := range []struct {
		name        string
		answerAfter time.Duration // after the stop
		stopTimeout time.Duration
		want        store.DeliveryState
	}{
		{"fits", 300 * time.Millisecond, 10 * time.Second, store.DeliverySucceeded},
		{"does not fit", time.Minute, 300 * time.Millisecond, store.DeliveryPending},
	} {
		t.Run(test.name, func(t *testing.T) {
			t.Parallel()
			b := newTestbed(t, func(o *Options) { o.Timeout = 2 * time.Minute })
			arrived, stopped := make(chan struct{}), make(chan struct{})
			rcv := webhookstest.NewReceiver(t, func(int, http.ResponseWriter) int {
				close(arrived)
				<-stopped
				select {
				case <-time.After(test.answerAfter):
				case <-t.Context().Done():
				}
				return http.StatusNoContent
			})
			ep := b.endpoint(t, rcv.URL, "account.created")
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- b.r.Run(ctx, test.stopTimeout) }()
			b.publish(t, "account.created", &shebav1.Account{Id: uuid.NewString(), Username: "stop"})
			select {
			case <-arrived:
			case <-time.After(30 * time.Second):
				t.Fatal("no attempt at the receiver within 30s")
			}

			start := time.Now()
			cancel()
			close(stopped)
			var err error
			select {
			case err = <-done:
			case <-time.After(test.stopTimeout + 30*time.Second):
				t.Fatalf("Run still stopping %v after the stop (stop timeout %v)", time.Since(start), test.stopTimeout)
			}
			took := time.Since(start)
			t.Logf("Run returned %v after the stop: %v", took, err)
			ds := b.deliveries(t, ep.ID)
			if len(ds) != 1 || ds[0].State != test.want || ds[0].Attempts != 1 {
				t.Errorf("got deliveries %+v, want one %s after one attempt", ds, test.want)
			}
			if n := len(rcv.Requests()); n != 1 {
				t.Errorf("receiver got %d requests, want 1", n)
			}
			if test.want == store.DeliverySucceeded {
				if err != nil || took < test.answerAfter {
					t.Errorf("Run: got %v after %v, want nil once the attempt finished (%v)", err, took, test.answerAfter)
				}
				return
			}
			if err == nil || took < test.stopTimeout {
				t.Errorf("Run: got %v after %v, want an error once the stop timeout (%v) ran out", err, took, test.stopTimeout)
			}
		})
	}
}
