package main

// failover: the switchover of e2e's TestFailoverSwitchover as a row of
// figures. sheba on the multi-host URL of a primary and its synchronous
// standby (copies of the bench's cluster), 4 clients creating
// subscriptions over REST with Idempotency-Keys (e2e/keyedwrites, the
// tests' careful client); the primary stops (fast) and the standby is
// promoted. The figures: the longest time without a successful write, the
// writes acknowledged yet lost, and the duplicates left after every
// unanswered, 503 or 504 write is retried with its key
// (docs/operations.md#postgres-cluster).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shebasvc/sheba/e2e/keyedwrites"
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
	// failoverPace is the least time between the starts of two writes of
	// one client: a 503 comes at once, and unpaced clients would spend
	// their writes in the moments without a primary.
	failoverPace = 10 * time.Millisecond
	// failoverSettle is how long the writes run before the switchover and
	// at least after the promotion, and failoverMinWrites how many must
	// succeed in each.
	failoverSettle    = 2 * time.Second
	failoverMinWrites = 20
	// failoverRecovery bounds the first successful write after the
	// promotion (docs/operations.md#postgres-cluster: within 5 s of the new
	// primary accepting writes).
	failoverRecovery = 5 * time.Second
)

// acknowledged reports whether a write was answered as made.
func acknowledged(a keyedwrites.Answer) bool { return a.Err == nil && a.Code == http.StatusOK }

// expected reports whether an answer is one a client may get during a
// failover: 200, 503 DATABASE_UNAVAILABLE, 504 or none; never a 500 or the
// driver's text (keyedwrites.CheckAnswers checks them closer, for a test).
func expected(a keyedwrites.Answer) bool {
	if a.Err != nil {
		return true
	}
	if bytes.Contains(a.Body, []byte("SQLSTATE")) {
		return false
	}
	switch a.Code {
	case http.StatusOK, http.StatusGatewayTimeout:
		return true
	case http.StatusServiceUnavailable:
		return bytes.Contains(a.Body, []byte("DATABASE_UNAVAILABLE"))
	}
	return false
}

// subscriptionID is the id in an acknowledged write's answer.
func subscriptionID(a keyedwrites.Answer) (string, error) {
	var sub struct{ ID string }
	if err := json.Unmarshal(a.Body, &sub); err != nil || sub.ID == "" {
		return "", fmt.Errorf("write %s: answer %q has no subscription id", a.Key, a.Body)
	}
	return sub.ID, nil
}

// failoverOutcome is what a switchover under writes showed.
type failoverOutcome struct {
	// answers are the load's, final the same after the keyed retries.
	answers, final []keyedwrites.Answer
	// The primary was told to stop at stopped, was down at down; the
	// standby accepted writes at promoted.
	stopped, down, promoted time.Time
	// From the new primary, after the retries: the acknowledged writes
	// missing there, the subscriptions and events beyond one per account
	// written to, and the accounts written to without a subscription or
	// its event.
	lost, duplicates, missing int
}

// failoverFigures are the row's figures.
func failoverFigures(o failoverOutcome) []figure {
	unexpected := 0
	for _, a := range o.answers {
		if !expected(a) {
			unexpected++
		}
	}
	first, gap := keyedwrites.Recovery(o.answers, o.promoted)
	// -1 and missed when no write succeeded after the promotion.
	recovery := goalFig("first successful write after the promotion", -1, " s", "<=", failoverRecovery.Seconds())
	recovery.Met = boolPtr(false)
	if first >= 0 {
		recovery = goalFig(recovery.Name, round2(first.Seconds()), " s", "<=", failoverRecovery.Seconds())
	}
	var retried, made, unsettled int
	for i, a := range o.final {
		if !acknowledged(a) {
			unsettled++
		}
		if i < len(o.answers) && !acknowledged(o.answers[i]) {
			retried++
			if a.Replayed {
				made++
			}
		}
	}
	tally := keyedwrites.Tally(o.answers)
	return []figure{
		fig("seconds without a successful write", round2(gap.Seconds()), " s"),
		recovery,
		goalFig("writes lost", float64(o.lost), "", "==", 0),
		goalFig("duplicates after keyed retries", float64(o.duplicates), "", "==", 0),
		goalFig("accounts without one subscription and one event", float64(o.missing), "", "==", 0),
		goalFig("answers other than 200, 503 DATABASE_UNAVAILABLE or 504", float64(unexpected), "", "==", 0),
		goalFig("writes not answered 200 after their retries", float64(unsettled), "", "==", 0),
		fig("switchover: the primary's stop", round2(o.down.Sub(o.stopped).Seconds()), " s"),
		fig("the promotion", round2(o.promoted.Sub(o.down).Seconds()), " s"),
		fig("writes", float64(len(o.answers)), ""),
		fig("answered 200", float64(tally["200"]), ""),
		fig("503", float64(tally["503"]), ""),
		fig("504", float64(tally["504"]), ""),
		fig("no answer", float64(tally["unanswered"]), ""),
		fig("retried with their keys", float64(retried), ""),
		fig("of which made before (the retry replayed them)", float64(made), ""),
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
	writes, err := failoverWrites(ctx, primary.url("sheba"), failoverAccounts)
	if err != nil {
		return row, err
	}
	standby, err := b.baseBackup(ctx, primary, standbyName, true)
	if err != nil {
		return row, err
	}
	// Once its primary is gone, a standby tries to stream again every
	// wal_retrieve_retry_interval (5 s), and a promotion may wait for the
	// next try: 200 ms, as in pgcluster, keeps that wait out of the figures.
	if err := standby.appendConf("wal_retrieve_retry_interval = '200ms'"); err != nil {
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
	srv, err := b.startSheba(ctx, "sheba-failover", shebaConfig{maxInflight: b.opts.inflightHigh, sampler: "always_off", databaseURL: multi,
		env: []string{"SHEBA_WEBHOOKS_ALLOW_PRIVATE_NETWORKS=true"}})
	if err != nil {
		return row, err
	}
	defer srv.proc.stop(5 * time.Second)

	var successes atomic.Int64
	c := keyedwrites.Client{BaseURL: srv.httpURL, HTTP: &http.Client{Timeout: 10 * time.Second}, Pace: failoverPace,
		Answered: func(a keyedwrites.Answer) {
			if acknowledged(a) {
				successes.Add(1)
			}
		}}
	if b.opts.auth {
		c.Key = b.key.key
	}
	// A receiver of the events' deliveries, as in production.
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()
	if err := createEndpoint(ctx, c, rcv.URL+"/hook", "subscription.created"); err != nil {
		return row, err
	}

	loadCtx, stopLoad := context.WithCancel(ctx)
	done := make(chan struct{})
	var o failoverOutcome
	go func() {
		defer close(done)
		o.answers = c.Load(loadCtx, failoverWriters, writes)
	}()
	// waitWrites waits at least failoverSettle and failoverMinWrites more
	// successes, at most a minute.
	waitWrites := func(what string) error {
		want, start := successes.Load()+failoverMinWrites, time.Now()
		for time.Since(start) < failoverSettle || successes.Load() < want {
			select {
			case <-done:
				return fmt.Errorf("%s: the %d accounts ran out", what, len(writes))
			default:
			}
			if time.Since(start) > time.Minute {
				return fmt.Errorf("%s: %d successful writes in a minute, want %d", what, successes.Load()-want+failoverMinWrites, failoverMinWrites)
			}
			if err := sleep(ctx, 10*time.Millisecond); err != nil {
				return err
			}
		}
		return nil
	}
	err = waitWrites("writes before the switchover")
	if err == nil {
		o.stopped = time.Now()
		if err = primary.stop(ctx, "fast"); err == nil {
			o.down = time.Now()
			err = standby.promote(ctx)
		}
		o.promoted = time.Now()
	}
	if err == nil {
		err = waitWrites("writes after the promotion")
	}
	stopLoad()
	<-done
	if err != nil {
		return row, err
	}
	logf("  %d writes; retrying the unanswered, 503 and 504 ones with their keys", len(o.answers))
	o.final = c.Retry(ctx, o.answers)
	if err := checkWrites(ctx, standby.url("sheba"), &o); err != nil {
		return row, err
	}
	row.Figures = failoverFigures(o)
	return row, nil
}

// failoverWrites inserts n accounts without a subscription on url and
// returns a keyed write for each.
func failoverWrites(ctx context.Context, url string, n int) ([]keyedwrites.Write, error) {
	var ids []string
	err := withConn(ctx, url, func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `
			INSERT INTO accounts (username, password_hash)
			SELECT 'failover-' || g, 'no-login' FROM generate_series(1, $1::int) AS g
			RETURNING id::text`, n)
		if err == nil {
			ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("insert the accounts: %w", err)
	}
	writes := make([]keyedwrites.Write, len(ids))
	for i, id := range ids {
		writes[i] = keyedwrites.Write{Key: fmt.Sprintf("failover-%d", i), AccountID: id}
	}
	return writes, nil
}

// createEndpoint registers url as a webhook endpoint of eventType with c's
// key.
func createEndpoint(ctx context.Context, c keyedwrites.Client, url, eventType string) error {
	body, _ := json.Marshal(map[string]any{"url": url, "eventTypes": []string{eventType}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/v1/webhookEndpoints", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", c.Key)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("create a webhook endpoint: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		answer, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("create a webhook endpoint: HTTP %d %s", resp.StatusCode, answer)
	}
	return nil
}

// checkWrites fills o's lost, duplicates and missing from the new primary.
func checkWrites(ctx context.Context, url string, o *failoverOutcome) error {
	var acked, accounts []string
	for _, a := range o.answers {
		// Each account is written to once.
		accounts = append(accounts, a.AccountID)
		if !acknowledged(a) {
			continue
		}
		id, err := subscriptionID(a)
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
