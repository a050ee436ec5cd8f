package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/e2e/keyedwrites"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/internal/app"
	"github.com/shebasvc/sheba/store/storetest/pgcluster"
	"github.com/shebasvc/sheba/webhooks/webhookstest"
)

// Failover (docs/operations.md#postgres-cluster): sheba on a real primary
// and a real synchronous standby, on the multi-host URL, while
// failoverWriters clients create subscriptions over REST with
// Idempotency-Keys (package keyedwrites).

// failoverWriters is how many clients write at once.
const failoverWriters = 4

// recoveryBound is how soon after the new primary accepts writes sheba
// must write again (docs/operations.md#postgres-cluster).
const recoveryBound = 5 * time.Second

// failoverLoad is a keyed load that a test follows while it switches the
// primary.
type failoverLoad struct {
	client keyedwrites.Client
	// successes counts the writes answered 200 so far.
	successes atomic.Int64
	answers   []keyedwrites.Answer
	stop      func()
}

// startFailoverLoad starts sheba on a new cluster with synchronous
// replication, a webhook endpoint for the events, and the load.
func startFailoverLoad(t *testing.T) (*pgcluster.Cluster, *testEnv, *webhookstest.Receiver, *failoverLoad) {
	t.Helper()
	c := pgcluster.Start(t, pgcluster.Sync())
	e := startTestEnv(t, envSetup{
		database: c.URL(),
		opts:     []app.Option{app.WithWebhookOptions(fastRunner)},
		mutate:   []func(*config.Config){fastWebhooks},
	})
	rcv := webhookstest.NewReceiver(t, webhookstest.Status(http.StatusNoContent))
	l := &failoverLoad{client: keyedwrites.Client{
		BaseURL: e.baseURL, Key: testKey, HTTP: &http.Client{Timeout: 10 * time.Second},
		// A 503 comes at once: unpaced, the clients would spend their
		// writes in the moments without a primary.
		Pace: 5 * time.Millisecond,
	}}
	l.client.Answered = func(a keyedwrites.Answer) {
		if a.Err == nil && a.Code == http.StatusOK {
			l.successes.Add(1)
		}
	}
	l.client.Subscribe(t, rcv.URL+"/hook")
	writes := keyedwrites.NewWrites(t, e.pool, 5000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.answers = l.client.Load(ctx, failoverWriters, writes)
	}()
	l.stop = sync.OnceFunc(func() {
		cancel()
		<-done
	})
	t.Cleanup(l.stop)
	return c, e, rcv, l
}

// waitSuccesses waits until n more writes than now have succeeded.
func (l *failoverLoad) waitSuccesses(t *testing.T, n int64, what string) {
	t.Helper()
	want := l.successes.Load() + n
	waitFor(t, 60*time.Second, what, func() bool { return l.successes.Load() >= want })
}

// finish stops the load and checks its answers (CheckAnswers: never a 500
// nor a driver's text), that writes came back within recoveryBound of
// promoted, and, after keyed retries of every write not answered 200, the
// database of the new primary (CheckDatabase: every write answered 200
// there, one subscription and one event per write). It logs the figures.
func (l *failoverLoad) finish(t *testing.T, what string, switched, promoted time.Time, primary *pgcluster.Server) {
	t.Helper()
	l.stop()
	keyedwrites.CheckAnswers(t, l.answers)
	first, gap := keyedwrites.Recovery(l.answers, promoted)
	t.Logf("%s: standby promoted %v after the switch began; first successful write %v after the promotion; longest time without a successful write %v",
		what, promoted.Sub(switched).Round(time.Millisecond), first.Round(time.Millisecond), gap.Round(time.Millisecond))
	if first < 0 || first > recoveryBound {
		t.Errorf("%s: first successful write %v after the promotion, want within %v", what, first, recoveryBound)
	}
	final := l.client.Retry(t.Context(), l.answers)
	t.Log(keyedwrites.Summary(l.answers, final))
	pool, err := pgxpool.New(t.Context(), primary.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	keyedwrites.CheckDatabase(t, pool, final)
}

// wantDelivered checks that deliveries work after the promotion: the event
// of a subscription made then reaches rcv. On failure the test logs
// the queue's jobs, the deliveries, River's leader and sheba's log lines
// but the requests'.
func wantDelivered(t *testing.T, c *pgcluster.Cluster, e *testEnv, rcv *webhookstest.Receiver, load *failoverLoad) {
	t.Helper()
	var account string
	c.Standby.QueryRow(t, `INSERT INTO accounts (username, password_hash) VALUES ('after-promotion', 'no-login') RETURNING id::text`).Scan(&account)
	a := load.client.Send(t.Context(), keyedwrites.Write{Key: "after-promotion", AccountID: account})
	if a.Err != nil || a.Code != http.StatusOK {
		t.Fatalf("a write after the promotion: %s %s (%v)", a.Outcome(), a.Body, a.Err)
	}
	var sub struct{ ID string }
	if err := json.Unmarshal(a.Body, &sub); err != nil {
		t.Fatal(err)
	}
	// Should the wait fail, what the queue holds and what sheba logged.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var jobs, deliveries, leader string
		c.Standby.QueryRow(t, `SELECT coalesce(string_agg(state || ' ' || kind || ' ' || n || ' ' || attempts, '; '), '') FROM (SELECT state::text, kind, count(*) AS n, max(attempt) AS attempts FROM river_job GROUP BY 1, 2) AS j`).Scan(&jobs)
		c.Standby.QueryRow(t, `SELECT coalesce(string_agg(state || ' ' || n, '; '), '') FROM (SELECT state, count(*) AS n FROM webhook_deliveries GROUP BY 1) AS d`).Scan(&deliveries)
		c.Standby.QueryRow(t, `SELECT coalesce(string_agg(leader_id || ' until ' || expires_at::text, '; '), 'none') FROM river_leader`).Scan(&leader)
		t.Logf("river jobs: %s; deliveries: %s; leader: %s", jobs, deliveries, leader)
		for _, l := range strings.Split(e.logs.String(), "\n") {
			if !strings.Contains(l, `"msg":"request"`) {
				t.Log(l)
			}
		}
	})
	delivered := waitFor(t, 60*time.Second, "the delivery of a subscription made after the promotion", func() bool {
		return slices.ContainsFunc(rcv.Requests(), func(r webhookstest.Request) bool { return bytes.Contains(r.Body, []byte(sub.ID)) })
	})
	t.Logf("the event of a write after the promotion was delivered %v after it", delivered.Round(time.Millisecond))
}

// TestFailoverSwitchover stops the primary (fast) under writes and
// promotes the standby: no 500, writes again within recoveryBound of the
// promotion, every acknowledged write on the new primary, and keyed
// retries of the rest leave one subscription and one event each. sheba
// counts one failover, and deliveries go on. The switch comes while River
// may still be starting, which left its queue's producer stopped in most
// runs before the runner's watchdog (webhooks/watchdog.go).
func TestFailoverSwitchover(t *testing.T) {
	t.Parallel()
	c, e, rcv, load := startFailoverLoad(t)

	load.waitSuccesses(t, 20, "writes before the switchover")
	stopped := time.Now()
	c.Primary.Stop(t, pgcluster.Fast)
	c.Standby.Promote(t)
	promoted := time.Now()
	load.waitSuccesses(t, 20, "writes after the promotion")
	load.finish(t, "switchover", stopped, promoted, c.Standby)

	if got := series(e.scrape(t), "sheba_db_failovers_total")[""]; got != 1 {
		t.Errorf("sheba_db_failovers_total: got %v, want 1", got)
	}
	wantDelivered(t, c, e, rcv, load)
}

// TestFailoverDemotedPrimary makes the primary read-only while it stays up
// (SQLSTATE 25006 to every write, as a demoted primary answers) and
// promotes the standby: writes recover within recoveryBound of the
// promotion, and so do webhook deliveries. Between the demotion and the
// promotion a write answers UNAVAILABLE DATABASE_UNAVAILABLE with
// RetryInfo on gRPC and the browser protocols too (REST: the load).
func TestFailoverDemotedPrimary(t *testing.T) {
	t.Parallel()
	c, e, rcv, load := startFailoverLoad(t)

	load.waitSuccesses(t, 20, "writes before the demotion")
	demoted := time.Now()
	c.Primary.SetReadOnly(t, true)
	// Writes fail while no server accepts them.
	waitFor(t, 30*time.Second, "a write refused by the read-only primary", func() bool {
		return strings.Contains(e.logs.String(), "SQLSTATE 25006")
	})
	// No server accepts writes now, until the promotion: a write answers
	// alike on gRPC and the browser protocols.
	var spare []string
	c.Primary.QueryRow(t, `SELECT array_agg(id::text) FROM (SELECT id FROM accounts WHERE username LIKE 'writer-%' ORDER BY substr(username, 8)::int DESC LIMIT 2) AS a`).Scan(&spare)
	var header metadata.MD
	_, err := e.sub.CreateSubscription(t.Context(), &shebav1.CreateSubscriptionRequest{AccountId: spare[0], Plan: "pro"}, grpc.Header(&header))
	wantGRPCDetails(t, "gRPC write without a primary", err, header, codes.Unavailable, reason.DatabaseUnavailable)
	for _, p := range browserProtocols {
		a := browserCall[shebav1.CreateSubscriptionRequest, shebav1.CreateSubscriptionResponse](t, e, p, shebav1.SubscriptionService_CreateSubscription_FullMethodName,
			&shebav1.CreateSubscriptionRequest{AccountId: spare[1], Plan: "pro"}, testKey)
		wantBrowserError(t, a, codes.Unavailable, reason.DatabaseUnavailable, "")
	}

	c.Standby.Promote(t)
	promoted := time.Now()
	load.waitSuccesses(t, 20, "writes after the promotion")
	load.finish(t, "demoted primary", demoted, promoted, c.Standby)
	if _, err := e.sub.CreateSubscription(t.Context(), &shebav1.CreateSubscriptionRequest{AccountId: spare[0], Plan: "pro"}); err != nil {
		t.Errorf("gRPC write after the promotion: %v", err)
	}

	wantDelivered(t, c, e, rcv, load)
}
