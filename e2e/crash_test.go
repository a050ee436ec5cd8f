package e2e

import (
	"context"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shebasvc/sheba/e2e/keyedwrites"
	"github.com/shebasvc/sheba/e2e/shebaproc"
	"github.com/shebasvc/sheba/store/storetest"
	"github.com/shebasvc/sheba/webhooks/webhookstest"
)

// TestCrashDuringWrites kills sheba (SIGKILL: no drain, no rollback of its
// own) while 4 clients send keyed creates over REST and webhook attempts
// are in flight, once 40 writes have committed and 8 deliveries have
// reached the receiver, and starts it again on the same database
// (docs/operations.md#postgres-cluster, docs/webhooks.md#guarantees):
//
//   - every answer was 200, or none came (the connection died with the
//     process); every write answered 200 is in the database;
//   - retrying each unanswered write with its Idempotency-Key leaves one
//     subscription per key, with one event;
//   - the webhook endpoint, a receiver on 127.0.0.1, gets every committed
//     subscription's event at least once, signed, under one webhook-id
//     (that of the event) however often it comes, and nothing of a change
//     that did not commit.
//
// A delivery whose attempt the kill cut short is taken over after
// webhooks.timeout (2 s here) plus a minute, so the test may wait that
// long for the last events.
func TestCrashDuringWrites(t *testing.T) {
	t.Parallel()
	const (
		clients = 4
		writes  = 400
		// The kill comes once this many writes have committed and this
		// many deliveries have reached the receiver.
		killAt, deliveredAt = 40, 8
	)
	bin, err := shebaBinary()
	if err != nil {
		t.Fatal(err)
	}
	// Before sheba, so that it is killed before the receiver closes. It
	// takes its time, so that the kill finds attempts in flight.
	receiver := webhookstest.NewReceiver(t, func(int, http.ResponseWriter) int {
		time.Sleep(100 * time.Millisecond)
		return http.StatusNoContent
	})
	dbURL := storetest.NewDatabase(t)
	p := shebaproc.New(t, bin, "DATABASE_URL="+dbURL, keyEnv(),
		"SHEBA_WEBHOOKS_ALLOW_PRIVATE_NETWORKS=true", "SHEBA_WEBHOOKS_TIMEOUT=2s",
		"SHEBA_WEBHOOKS_BACKOFF_BASE=50ms", "SHEBA_WEBHOOKS_BACKOFF_MAX=400ms")
	p.Args = []string{"serve", "--migrate"}
	p.Start(t)
	p.WaitReady(t, 20*time.Second)
	pool, err := pgxpool.New(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	client := keyedwrites.Client{
		BaseURL: "http://" + p.HTTPAddr,
		Key:     testKey,
		HTTP:    &http.Client{Timeout: 30 * time.Second},
		// The writes sent between the kill and the end of the load fail
		// at once: few of them.
		Pace: 10 * time.Millisecond,
	}
	secret := client.Subscribe(t, receiver.URL)
	ws := keyedwrites.NewWrites(t, pool, writes)

	// One write first, alone, until its event is delivered: the deliveries
	// of the load then follow its writes closely.
	warm := client.Send(t.Context(), ws[0])
	for deadline := time.Now().Add(time.Minute); len(receiver.Requests()) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("first write %s %s: no delivery within a minute; log:\n%s", warm.Outcome(), warm.Body, p.Logs())
		}
	}

	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	loaded := make(chan []keyedwrites.Answer, 1)
	go func() { loaded <- client.Load(ctx, clients, ws[1:]) }()
	committed := func() int { return count(t, pool, `SELECT count(*) FROM subscriptions`) }
	for deadline := time.Now().Add(30 * time.Second); committed() < killAt || len(receiver.Requests()) < deliveredAt; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("within 30s: %d writes committed, %d deliveries, want %d and %d; log:\n%s",
				committed(), len(receiver.Requests()), killAt, deliveredAt, p.Logs())
		}
	}
	p.Signal(t, syscall.SIGKILL)
	if code := p.Wait(t, time.Minute); code != -1 {
		t.Fatalf("sheba exited with status %d, want killed", code)
	}
	stop()
	first := append([]keyedwrites.Answer{warm}, <-loaded...)
	restart := time.Now()
	p.Start(t)
	p.WaitReady(t, 30*time.Second)

	keyedwrites.CheckAnswers(t, first)
	if tally := keyedwrites.Tally(first); tally["200"]+tally["unanswered"] != len(first) || tally["unanswered"] == 0 {
		t.Errorf("got %v, want 200s and some unanswered writes, nothing else", tally)
	}
	retryCtx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	final := client.Retry(retryCtx, first)
	t.Log(keyedwrites.Summary(first, final))
	keyedwrites.CheckDatabase(t, pool, final)
	if t.Failed() {
		t.FailNow()
	}

	// The event of each subscription, as the database has it.
	events := map[string]string{} // subscription id -> event id
	rows, err := pool.Query(t.Context(), `
		SELECT convert_from(body, 'UTF8')::jsonb -> 'data' ->> 'id', id::text FROM webhook_events
		WHERE type = 'subscription.created'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var sub, event string
		if err := rows.Scan(&sub, &event); err != nil {
			t.Fatal(err)
		}
		events[sub] = event
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	delivered := func() map[string]map[string]bool { // subscription id -> webhook-ids
		got := map[string]map[string]bool{}
		for _, req := range receiver.Requests() {
			ev, err := req.Verify(secret)
			if err != nil {
				t.Fatalf("delivery: %v", err)
			}
			sub, _ := ev.Data["id"].(string)
			if got[sub] == nil {
				got[sub] = map[string]bool{}
			}
			got[sub][req.Header.Get("webhook-id")] = true
		}
		return got
	}
	all := func() bool {
		got := delivered()
		for sub := range events {
			if len(got[sub]) == 0 {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(3 * time.Minute); !all(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events delivered within 3 minutes of the restart; log:\n%s", len(delivered()), len(events), p.Logs())
		}
	}
	t.Logf("every event delivered %v after the restart; %d requests for %d events", time.Since(restart).Round(time.Second), len(receiver.Requests()), len(events))
	for sub, ids := range delivered() {
		event, ok := events[sub]
		if !ok {
			t.Errorf("got a delivery of subscription %q, which was never committed", sub)
			continue
		}
		if len(ids) != 1 || !ids[event] {
			t.Errorf("subscription %s: got webhook-ids %v, want only its event's, %s", sub, ids, event)
		}
	}
}

// count runs a SELECT count(*) query on pool.
func count(t *testing.T, pool *pgxpool.Pool, query string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}
