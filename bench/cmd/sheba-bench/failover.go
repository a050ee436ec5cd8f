package main

// failover: the switchover of e2e's TestFailoverSwitchover as a row of
// figures. sheba on the multi-host URL of a primary and its synchronous
// standby (copies of the bench's cluster), 4 clients creating
// subscriptions over REST with Idempotency-Keys; the primary stops (fast)
// and the standby is promoted. The figures: the longest time without a
// successful write, the writes acknowledged yet lost, and the duplicates
// left after every unanswered, 503 or 504 write is retried with its key
// (docs/operations.md#postgres-cluster).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

const scenFailover = "failover"

// clusterScenarios are the rows about a Postgres cluster, run after the
// webhook ones.
var clusterScenarios = []string{scenFailover}

const (
	// failoverWriters is how many clients write at once.
	failoverWriters = 4
	// failoverAccounts is how many accounts without a subscription the
	// writes may use: far more than the run makes at this machine's pace.
	failoverAccounts = 20000
	// failoverSettle is how long the writes run before the switchover and
	// at least after the promotion, and failoverMinWrites how many must
	// succeed in each.
	failoverSettle    = 2 * time.Second
	failoverMinWrites = 20
	// failoverRecovery bounds the first successful write after the
	// promotion (docs/operations.md#postgres-cluster: within 5 s of the new
	// primary accepting writes).
	failoverRecovery = 5 * time.Second
	// failoverBackoff is how long a writer waits after a write answered
	// 503, 504 or not at all before its next one, so that a long switchover
	// does not use up the accounts; Retry-After, in whole seconds, would
	// blur the time without a successful write.
	failoverBackoff = 50 * time.Millisecond
	// failoverRetries bounds the keyed retries of one write, failoverRetryPause apart.
	failoverRetries    = 20
	failoverRetryPause = 250 * time.Millisecond
)

// keyedWrite is one create of a subscription and how it was answered.
type keyedWrite struct {
	account, key string
	// code is the HTTP status, 0 when no answer came.
	code int
	body string
	// at is when the answer (or the error) came.
	at time.Time
}

// acknowledged reports whether the write was answered as made.
func (w keyedWrite) acknowledged() bool { return w.code == http.StatusOK }

// expected reports whether the answer is one a client may get during a
// failover: 200, 503 DATABASE_UNAVAILABLE, 504 or none; never a 500 or the
// driver's text.
func (w keyedWrite) expected() bool {
	if strings.Contains(w.body, "SQLSTATE") {
		return false
	}
	switch w.code {
	case http.StatusOK, http.StatusGatewayTimeout, 0:
		return true
	case http.StatusServiceUnavailable:
		return strings.Contains(w.body, "DATABASE_UNAVAILABLE")
	}
	return false
}

// retryable reports whether a client retries the write with its key: it
// was not answered, or answered 503 or 504.
func (w keyedWrite) retryable() bool {
	return w.code == 0 || w.code == http.StatusServiceUnavailable || w.code == http.StatusGatewayTimeout
}

// subscriptionID is the id in an acknowledged write's answer.
func (w keyedWrite) subscriptionID() (string, error) {
	var sub struct{ ID string }
	if err := json.Unmarshal([]byte(w.body), &sub); err != nil || sub.ID == "" {
		return "", fmt.Errorf("write %s: answer %q has no subscription id", w.key, w.body)
	}
	return sub.ID, nil
}

// writeClient creates subscriptions on one sheba.
type writeClient struct {
	baseURL, apiKey string
	client          *http.Client
}

// subscribe sends one keyed create of a subscription for account.
func (c writeClient) subscribe(ctx context.Context, account, key string) keyedWrite {
	w := keyedWrite{account: account, key: key}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL+"/v1/accounts/"+account+"/subscription", strings.NewReader(`{"plan":"pro"}`))
	req.Header.Set("Content-Type", "application/json")
	if c.apiKey != "" {
		req.Header.Set("X-Api-Key", c.apiKey)
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.client.Do(req)
	w.at = time.Now()
	if err != nil {
		return w
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	w.code, w.body = resp.StatusCode, string(b)
	return w
}

// writeLoad is failoverWriters clients creating a subscription for each
// account in turn, each write with a key of its own, until stopped or the
// accounts run out.
type writeLoad struct {
	c        writeClient
	accounts []string

	mu     sync.Mutex
	writes []keyedWrite
	// successes counts the writes answered 200.
	successes atomic.Int64
	// ranOut is set when every account was written to.
	ranOut atomic.Bool
}

// run writes until ctx ends.
func (l *writeLoad) run(ctx context.Context) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range failoverWriters {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(l.accounts) {
					l.ranOut.Store(true)
					return
				}
				w := l.c.subscribe(context.WithoutCancel(ctx), l.accounts[i], fmt.Sprintf(`"failover-%d"`, i))
				if w.acknowledged() {
					l.successes.Add(1)
				}
				l.mu.Lock()
				l.writes = append(l.writes, w)
				l.mu.Unlock()
				if w.retryable() && sleep(ctx, failoverBackoff) != nil {
					return
				}
			}
		})
	}
	wg.Wait()
}

// waitWrites waits at least d and until n more writes than now have
// succeeded, at most a minute.
func (l *writeLoad) waitWrites(ctx context.Context, d time.Duration, n int64, what string) error {
	want := l.successes.Load() + n
	start := time.Now()
	for time.Since(start) < d || l.successes.Load() < want {
		switch {
		case l.ranOut.Load():
			return fmt.Errorf("%s: the %d accounts ran out", what, len(l.accounts))
		case time.Since(start) > time.Minute:
			return fmt.Errorf("%s: %d successful writes in a minute, want %d", what, l.successes.Load()-want+n, n)
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// failoverOutcome is what a switchover under writes showed.
type failoverOutcome struct {
	writes []keyedWrite
	// The primary was told to stop at stopped, was down at down; the
	// standby accepted writes at promoted.
	stopped, down, promoted time.Time
	retried, unretried      int
	// From the new primary, after the retries: the acknowledged writes
	// missing there, the subscriptions and events beyond one per account
	// written to, and the accounts written to without a subscription or
	// its event.
	lost, duplicates, missing int
}

// failoverFigures are the row's figures.
func failoverFigures(o failoverOutcome) []figure {
	var first time.Time
	var acked []time.Time
	counts := map[string]int{}
	unexpected := 0
	for _, w := range o.writes {
		switch w.code {
		case http.StatusOK, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			counts[fmt.Sprint(w.code)]++
		case 0:
			counts["none"]++
		}
		if !w.expected() {
			unexpected++
		}
		if !w.acknowledged() {
			continue
		}
		acked = append(acked, w.at)
		if !w.at.Before(o.promoted) && (first.IsZero() || w.at.Before(first)) {
			first = w.at
		}
	}
	// The writers record their answers in about the order they came, not
	// exactly.
	slices.SortFunc(acked, time.Time.Compare)
	var gap time.Duration
	for i := 1; i < len(acked); i++ {
		gap = max(gap, acked[i].Sub(acked[i-1]))
	}
	// -1 and missed when no write succeeded after the promotion.
	recovery := goalFig("first successful write after the promotion", -1, " s", "<=", failoverRecovery.Seconds())
	recovery.Met = boolPtr(false)
	if !first.IsZero() {
		recovery = goalFig(recovery.Name, round2(first.Sub(o.promoted).Seconds()), " s", "<=", failoverRecovery.Seconds())
	}
	return []figure{
		fig("seconds without a successful write", round2(gap.Seconds()), " s"),
		recovery,
		goalFig("writes lost", float64(o.lost), "", "==", 0),
		goalFig("duplicates after keyed retries", float64(o.duplicates), "", "==", 0),
		goalFig("accounts without one subscription and one event", float64(o.missing), "", "==", 0),
		goalFig("answers other than 200, 503 DATABASE_UNAVAILABLE or 504", float64(unexpected), "", "==", 0),
		goalFig("writes not answered 200 after their retries", float64(o.unretried), "", "==", 0),
		fig("switchover: the primary's stop", round2(o.down.Sub(o.stopped).Seconds()), " s"),
		fig("the promotion", round2(o.promoted.Sub(o.down).Seconds()), " s"),
		fig("writes", float64(len(o.writes)), ""),
		fig("answered 200", float64(counts["200"]), ""),
		fig("503", float64(counts["503"]), ""),
		fig("504", float64(counts["504"]), ""),
		fig("no answer", float64(counts["none"]), ""),
		fig("retried with their keys", float64(o.retried), ""),
	}
}

// runClusterScenarios runs the selected rows about a Postgres cluster.
func (b *bench) runClusterScenarios(ctx context.Context, logf func(string, ...any)) ([]figureRow, error) {
	var rows []figureRow
	if slices.Contains(b.opts.scenarios, scenFailover) {
		start := time.Now()
		logf("%s: a switchover under writes on a primary and a synchronous standby", scenFailover)
		r, err := b.failover(ctx, logf)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", scenFailover, err)
		}
		r.Name, r.Seconds = scenFailover, time.Since(start).Seconds()
		logf("%s: %s", scenFailover, strings.Join(figureStrings(r.Figures), "; "))
		rows = append(rows, r)
	}
	return rows, nil
}

// failover runs the switchover row: the cluster, sheba, the writes, the
// switchover, the keyed retries and the checks on the new primary.
func (b *bench) failover(ctx context.Context, logf func(string, ...any)) (figureRow, error) {
	row := figureRow{About: fmt.Sprintf("sheba on the multi-host URL of a primary and a synchronous standby, %d clients creating subscriptions over REST with Idempotency-Keys; the primary stopped (fast), the standby promoted", failoverWriters)}
	defer b.stopCopies()
	// The primary: a copy of the bench's cluster, with accounts to write
	// for. Its standby commits synchronously: every acknowledged write is
	// on it.
	const primaryName, standbyName = "failover_primary", "failover_standby"
	primary, err := b.baseBackup(ctx, b.pg, primaryName, false)
	if err != nil {
		return row, err
	}
	if err := b.startCopy(ctx, primary); err != nil {
		return row, err
	}
	accounts, err := insertFailoverAccounts(ctx, primary.url("sheba"), failoverAccounts)
	if err != nil {
		return row, err
	}
	standby, err := b.baseBackup(ctx, primary, standbyName, true)
	if err != nil {
		return row, err
	}
	// Only now, as pgcluster does: the base backup copies
	// postgresql.auto.conf, and the standby once promoted would wait for a
	// synchronous standby of its own. scripts/pg.sh turns synchronous_commit
	// off; ALTER SYSTEM wins over postgresql.conf.
	if err := execSQL(ctx, primary.url("postgres"), "ALTER SYSTEM SET synchronous_commit = on",
		"ALTER SYSTEM SET synchronous_standby_names = '"+standbyName+"'", "SELECT pg_reload_conf()"); err != nil {
		return row, err
	}
	if err := b.startCopy(ctx, standby); err != nil {
		return row, err
	}
	if err := primary.waitStandby(ctx, standbyName, true); err != nil {
		return row, err
	}
	multi := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/sheba?sslmode=disable&target_session_attrs=read-write", primary.port, standby.port)
	srv, err := b.startSheba(ctx, "sheba-failover", shebaConfig{maxInflight: b.opts.inflightHigh, sampler: "always_off", databaseURL: multi})
	if err != nil {
		return row, err
	}
	defer srv.proc.stop(5 * time.Second)

	c := writeClient{baseURL: srv.httpURL, client: &http.Client{Timeout: 10 * time.Second}}
	if b.opts.auth {
		c.apiKey = b.key.key
	}
	load := &writeLoad{c: c, accounts: accounts}
	loadCtx, stopLoad := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		load.run(loadCtx)
	}()
	var o failoverOutcome
	err = load.waitWrites(ctx, failoverSettle, failoverMinWrites, "writes before the switchover")
	if err == nil {
		o.stopped = time.Now()
		if err = primary.stop(ctx, "fast"); err == nil {
			o.down = time.Now()
			err = standby.promote(ctx)
		}
		o.promoted = time.Now()
	}
	if err == nil {
		err = load.waitWrites(ctx, failoverSettle, failoverMinWrites, "writes after the promotion")
	}
	stopLoad()
	<-done
	if err != nil {
		return row, err
	}
	logf("  %d writes; retrying the unanswered ones with their keys", len(load.writes))
	o.writes = load.writes
	o.retried, o.unretried = retryUnanswered(ctx, c, o.writes)
	if err := checkWrites(ctx, standby.url("sheba"), &o); err != nil {
		return row, err
	}
	row.Figures = failoverFigures(o)
	return row, nil
}

// insertFailoverAccounts inserts n accounts without a subscription on url and
// returns their ids.
func insertFailoverAccounts(ctx context.Context, url string, n int) ([]string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `
		INSERT INTO accounts (username, password_hash)
		SELECT 'failover-' || g, 'no-login' FROM generate_series(1, $1::int) AS g
		RETURNING id::text`, n)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// retryUnanswered sends every write not answered 200 again with its key
// while it is answered 503, 504 or not at all, at most failoverRetries
// times each: the writes retried, and those not answered 200 in the end (a
// 409 says the key did not find the first write).
func retryUnanswered(ctx context.Context, c writeClient, writes []keyedWrite) (retried, unanswered int) {
	for _, w := range writes {
		if w.acknowledged() {
			continue
		}
		retried++
		r := w
		for range failoverRetries {
			if r = c.subscribe(ctx, w.account, w.key); !r.retryable() || sleep(ctx, failoverRetryPause) != nil {
				break
			}
		}
		if !r.acknowledged() {
			unanswered++
		}
	}
	return retried, unanswered
}

// checkWrites fills o's lost, duplicates and missing from the new primary.
func checkWrites(ctx context.Context, url string, o *failoverOutcome) error {
	var acked, accounts []string
	for _, w := range o.writes {
		// Each account is written to once.
		accounts = append(accounts, w.account)
		if !w.acknowledged() {
			continue
		}
		id, err := w.subscriptionID()
		if err != nil {
			return err
		}
		acked = append(acked, id)
	}
	var found, extraSubs, extraEvents, noSub, noEvent int
	// The events are matched by the subscription in their body's data
	// (docs/webhooks.md#the-request).
	err := queryRow(ctx, url, []any{&found, &extraSubs, &extraEvents, &noSub, &noEvent}, `
		WITH written AS (SELECT unnest($2::uuid[]) AS account_id),
		subs AS (SELECT s.id, s.account_id FROM subscriptions s JOIN written USING (account_id)),
		events AS (
			SELECT (convert_from(body, 'UTF8')::jsonb #>> '{data,id}')::uuid AS subscription_id, count(*) AS n
			FROM webhook_events WHERE type = 'subscription.created' GROUP BY 1)
		SELECT
			(SELECT count(*) FROM subscriptions WHERE id = ANY($1::uuid[]))::int,
			(SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM subs GROUP BY account_id) x)::int,
			(SELECT coalesce(sum(e.n - 1), 0) FROM events e JOIN subs s ON s.id = e.subscription_id)::int,
			(SELECT count(*) FROM written w WHERE NOT EXISTS (SELECT FROM subs s WHERE s.account_id = w.account_id))::int,
			(SELECT count(*) FROM subs s WHERE NOT EXISTS (SELECT FROM events e WHERE e.subscription_id = s.id))::int`,
		acked, accounts)
	if err != nil {
		return fmt.Errorf("check the writes on the new primary: %w", err)
	}
	o.lost, o.duplicates, o.missing = len(acked)-found, extraSubs+extraEvents, noSub+noEvent
	return nil
}
