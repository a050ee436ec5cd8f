package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/internal/app"
	"github.com/shebasvc/sheba/store/storetest/pgcluster"
	"github.com/shebasvc/sheba/webhooks/webhookstest"
)

// Failover (docs/operations.md#postgres-cluster): sheba on a real primary
// and a real synchronous standby, on the multi-host URL, while 4 clients
// create subscriptions over REST with Idempotency-Keys.

// failoverWriters is how many clients write at once.
const failoverWriters = 4

// recoveryBound is how soon after the new primary accepts writes sheba
// must write again (docs/operations.md#postgres-cluster).
const recoveryBound = 5 * time.Second

// keyedWrite is one create of a subscription and how it was answered.
type keyedWrite struct {
	account, key string
	// code is the HTTP status, 0 when no answer came.
	code int
	body string
	// retryAfter is the answer's Retry-After header.
	retryAfter string
	at         time.Time
}

// answered reports whether the write is known to have been made.
func (w keyedWrite) answered() bool { return w.code == http.StatusOK }

// failoverLoad creates subscriptions for accounts, failoverWriters at a
// time, each with an Idempotency-Key of its own, until stop is closed or
// the accounts run out.
type failoverLoad struct {
	e      *testEnv
	client *http.Client

	mu     sync.Mutex
	writes []keyedWrite
	// successes counts the writes answered 200.
	successes atomic.Int64
}

// newFailoverLoad returns a load on e.
func newFailoverLoad(t *testing.T, e *testEnv) *failoverLoad {
	return &failoverLoad{e: e, client: &http.Client{Timeout: 10 * time.Second}}
}

// subscribe sends one keyed create of a subscription for account.
func (l *failoverLoad) subscribe(account, key string) keyedWrite {
	w := keyedWrite{account: account, key: key}
	req, _ := http.NewRequest(http.MethodPost, l.e.baseURL+subscribePath(account), strings.NewReader(`{"plan":"pro"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", testKey)
	req.Header.Set("Idempotency-Key", key)
	resp, err := l.client.Do(req)
	w.at = time.Now()
	if err != nil {
		return w
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	w.code, w.body, w.retryAfter = resp.StatusCode, string(b), resp.Header.Get("Retry-After")
	return w
}

// start writes for accounts, every account at most once, until they run
// out or the returned function is called, which waits for the writers; the
// test's end calls it too.
func (l *failoverLoad) start(t *testing.T, accounts []string) (stopLoad func()) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		l.run(accounts, stop)
	}()
	stopLoad = sync.OnceFunc(func() {
		close(stop)
		<-done
	})
	t.Cleanup(stopLoad)
	return stopLoad
}

// run writes for accounts until stop is closed, every account at most once.
func (l *failoverLoad) run(accounts []string, stop <-chan struct{}) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range failoverWriters {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := int(next.Add(1)) - 1
				if i >= len(accounts) {
					return
				}
				w := l.subscribe(accounts[i], fmt.Sprintf(`"failover-%d"`, i))
				if w.answered() {
					l.successes.Add(1)
				}
				l.mu.Lock()
				l.writes = append(l.writes, w)
				l.mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// waitSuccesses waits until n more writes than now have succeeded.
func (l *failoverLoad) waitSuccesses(t *testing.T, n int64, what string) {
	t.Helper()
	want := l.successes.Load() + n
	waitFor(t, 60*time.Second, what, func() bool { return l.successes.Load() >= want })
}

// report checks every answer: 200, or 503 DATABASE_UNAVAILABLE with a
// Retry-After, or 504, or none; never 500, never a driver's text. It
// returns the first success at or after since and the longest time
// without a success while writes failed.
func (l *failoverLoad) report(t *testing.T, since time.Time) (first time.Time, gap time.Duration, counts map[int]int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	counts = map[int]int{}
	var last time.Time
	for _, w := range l.writes {
		counts[w.code]++
		switch w.code {
		case http.StatusOK:
			if !last.IsZero() && w.at.Sub(last) > gap {
				gap = w.at.Sub(last)
			}
			if w.at.After(last) {
				last = w.at
			}
			if !w.at.Before(since) && (first.IsZero() || w.at.Before(first)) {
				first = w.at
			}
		case http.StatusServiceUnavailable:
			if !strings.Contains(w.body, "DATABASE_UNAVAILABLE") || w.retryAfter == "" {
				t.Errorf("write %s: 503 %q with Retry-After %q, want reason DATABASE_UNAVAILABLE and a Retry-After", w.key, w.body, w.retryAfter)
			}
		case http.StatusGatewayTimeout, 0:
		default:
			t.Errorf("write %s: HTTP %d %s, want 200, 503 or 504", w.key, w.code, w.body)
		}
		if strings.Contains(w.body, "SQLSTATE") || strings.Contains(w.body, "pgx") {
			t.Errorf("write %s: the answer shows the driver's text: %s", w.key, w.body)
		}
	}
	return first, gap, counts
}

// retryUnanswered sends every write not answered 200 again with its key,
// until it is.
func (l *failoverLoad) retryUnanswered(t *testing.T) (retried int) {
	t.Helper()
	l.mu.Lock()
	writes := append([]keyedWrite(nil), l.writes...)
	l.mu.Unlock()
	for _, w := range writes {
		if w.answered() {
			continue
		}
		retried++
		for attempt := 0; ; attempt++ {
			r := l.subscribe(w.account, w.key)
			if r.answered() {
				break
			}
			if attempt == 20 {
				t.Fatalf("write %s still answers %d %s after 20 retries", w.key, r.code, r.body)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	return retried
}

// checkOnce checks, on the server that is primary now, that every write
// answered 200 made its subscription, and that after the retries every
// account written to has exactly one subscription and each subscription
// exactly one event.
func (l *failoverLoad) checkOnce(t *testing.T, primary *pgcluster.Server) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	accounts := map[string]bool{}
	var acked []string
	for _, w := range l.writes {
		accounts[w.account] = true
		if !w.answered() {
			continue
		}
		var sub struct{ ID string }
		if err := json.Unmarshal([]byte(w.body), &sub); err != nil || sub.ID == "" {
			t.Fatalf("write %s: answer %s has no subscription id", w.key, w.body)
		}
		acked = append(acked, sub.ID)
	}
	var found int
	primary.QueryRow(t, `SELECT count(*) FROM subscriptions WHERE id = ANY($1::uuid[])`, acked).Scan(&found)
	if found != len(acked) {
		t.Errorf("%d writes were answered 200, and the new primary has %d of their subscriptions: %d lost", len(acked), found, len(acked)-found)
	}
	var subs, events, wrong int
	primary.QueryRow(t, `SELECT count(*) FROM subscriptions`).Scan(&subs)
	primary.QueryRow(t, `SELECT count(*) FROM webhook_events WHERE type = 'subscription.created'`).Scan(&events)
	primary.QueryRow(t, `
		SELECT count(*) FROM subscriptions s
		WHERE (SELECT count(*) FROM webhook_events e
		       WHERE e.type = 'subscription.created' AND position(s.id::text IN convert_from(e.body, 'UTF8')) > 0) <> 1`).Scan(&wrong)
	if subs != len(accounts) || events != len(accounts) || wrong != 0 {
		t.Errorf("after keyed retries: %d subscriptions and %d events for %d accounts written to, %d subscriptions without exactly one event; want one each", subs, events, len(accounts), wrong)
	}
}

// newFailoverEnv starts a cluster with synchronous replication and sheba on
// its multi-host URL, and makes n accounts to subscribe.
func newFailoverEnv(t *testing.T, n int, mutate ...func(*config.Config)) (*pgcluster.Cluster, *testEnv, []string) {
	t.Helper()
	c := pgcluster.Start(t, pgcluster.Sync())
	e := startTestEnv(t, envSetup{
		database: c.URL(),
		opts:     []app.Option{app.WithWebhookOptions(fastRunner)},
		mutate:   append([]func(*config.Config){fastWebhooks}, mutate...),
	})
	rows, err := e.pool.Query(t.Context(), `
		INSERT INTO accounts (username, password_hash)
		SELECT 'failover' || i, 'no-login' FROM generate_series(1, $1) AS i
		RETURNING id::text`, n)
	if err != nil {
		t.Fatal(err)
	}
	accounts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return c, e, accounts
}

// TestFailoverSwitchover stops the primary (fast) under writes and
// promotes the standby: no 500, writes again within recoveryBound of the
// promotion, every acknowledged write on the new primary, and keyed
// retries of the rest leave one subscription and one event each. sheba
// counts one failover.
func TestFailoverSwitchover(t *testing.T) {
	t.Parallel()
	c, e, accounts := newFailoverEnv(t, 2000)
	load := newFailoverLoad(t, e)
	stopLoad := load.start(t, accounts)

	load.waitSuccesses(t, 20, "writes before the switchover")
	stopped := time.Now()
	c.Primary.Stop(t, pgcluster.Fast)
	c.Standby.Promote(t)
	promoted := time.Now()
	load.waitSuccesses(t, 20, "writes after the promotion")
	stopLoad()

	first, gap, counts := load.report(t, promoted)
	t.Logf("switchover: primary stopped, standby promoted %v later; first write %v after the promotion; longest time without a successful write %v; answers by HTTP status (0: none) %v",
		promoted.Sub(stopped).Round(time.Millisecond), first.Sub(promoted).Round(time.Millisecond), gap.Round(time.Millisecond), counts)
	if first.Sub(promoted) > recoveryBound {
		t.Errorf("first successful write %v after the promotion, want within %v", first.Sub(promoted), recoveryBound)
	}
	retried := load.retryUnanswered(t)
	t.Logf("%d writes retried with their keys", retried)
	load.checkOnce(t, c.Standby)
	if got := series(e.scrape(t), "sheba_db_failovers_total")[""]; got != 1 {
		t.Errorf("sheba_db_failovers_total: got %v, want 1", got)
	}
}

// TestFailoverDemotedPrimary makes the primary read-only while it stays up
// (SQLSTATE 25006 to every write, as a demoted primary answers) and
// promotes the standby: writes recover within recoveryBound of the
// promotion, and so do webhook deliveries.
func TestFailoverDemotedPrimary(t *testing.T) {
	t.Parallel()
	c, e, accounts := newFailoverEnv(t, 2000)
	rcv := webhookstest.NewReceiver(t, webhookstest.Status(http.StatusNoContent))
	e.createEndpoint(t, rcv.URL+"/hook", "subscription.created")
	load := newFailoverLoad(t, e)
	stopLoad := load.start(t, accounts)

	load.waitSuccesses(t, 20, "writes before the demotion")
	demoted := time.Now()
	c.Primary.SetReadOnly(t, true)
	// Writes fail while no server accepts them.
	time.Sleep(500 * time.Millisecond)
	c.Standby.Promote(t)
	promoted := time.Now()
	load.waitSuccesses(t, 20, "writes after the promotion")
	stopLoad()

	first, gap, counts := load.report(t, promoted)
	t.Logf("demoted primary: read-only, standby promoted %v later; first write %v after the promotion; longest time without a successful write %v; answers by HTTP status (0: none) %v",
		promoted.Sub(demoted).Round(time.Millisecond), first.Sub(promoted).Round(time.Millisecond), gap.Round(time.Millisecond), counts)
	if first.Sub(promoted) > recoveryBound {
		t.Errorf("first successful write %v after the promotion, want within %v", first.Sub(promoted), recoveryBound)
	}
	if counts[http.StatusServiceUnavailable] == 0 {
		t.Errorf("no write answered 503 while the primary was read-only: the test did not catch the switch (answers %v)", counts)
	}
	load.retryUnanswered(t)
	load.checkOnce(t, c.Standby)

	// Deliveries recover: a subscription made after the promotion reaches
	// the receiver.
	var extra string
	c.Standby.QueryRow(t, `INSERT INTO accounts (username, password_hash) VALUES ('after-promotion', 'no-login') RETURNING id::text`).Scan(&extra)
	w := load.subscribe(extra, `"after-promotion"`)
	if !w.answered() {
		t.Fatalf("a write after the promotion: HTTP %d %s", w.code, w.body)
	}
	var sub struct{ ID string }
	_ = json.Unmarshal([]byte(w.body), &sub)
	delivered := waitFor(t, 60*time.Second, "the delivery of a subscription made after the promotion", func() bool {
		for _, r := range rcv.Requests() {
			if bytes.Contains(r.Body, []byte(sub.ID)) {
				return true
			}
		}
		return false
	})
	t.Logf("the event of a write after the promotion was delivered %v after it", delivered.Round(time.Millisecond))
}
