// Package keyedwrites sends keyed creates to sheba over REST as a careful
// client does, and checks what sheba promises of them when something
// breaks between the client and the database
// (docs/operations.md#postgres-cluster, docs/api.md#idempotency-keys):
// every answer is a success or one worth retrying, never a 500 nor a
// driver's text; every write answered 200 is in the database; and a
// client that retries each unanswered, 503 or 504 write with its
// Idempotency-Key ends with exactly one resource and one event per key.
//
// The write is CreateSubscription, for an account of its own (an account
// holds one active subscription, so a second create for it would be a
// second resource, refused). The tests of faults on the link to Postgres
// (e2e/faults, a module of its own) and of a killed process (e2e) share
// it. Everything here is safe for concurrent use.
package keyedwrites

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// Write is one keyed create: a subscription for AccountID, sent with
// Idempotency-Key Key.
type Write struct {
	Key       string
	AccountID string
}

// path is the REST path of a write, body its body.
func (w Write) path() string { return "/v1/accounts/" + w.AccountID + "/subscription" }

const body = `{"plan":"pro"}`

// Answer is what a client got for a write.
type Answer struct {
	Write
	// Code is the HTTP status, 0 when no answer came (Err says why).
	Code int
	Body []byte
	// Replayed is the Idempotent-Replayed header: the answer is the one
	// recorded by an earlier call with the key.
	Replayed bool
	Err      error
	// At is when the answer came (or the write failed).
	At time.Time
}

// Outcome names the answer for counts: "200", "503", … or "unanswered".
func (a Answer) Outcome() string {
	if a.Err != nil {
		return "unanswered"
	}
	return fmt.Sprint(a.Code)
}

// NewWrites inserts n accounts into the database of pool, and returns a
// write for each, with keys that name the test.
func NewWrites(tb testing.TB, pool *pgxpool.Pool, n int) []Write {
	tb.Helper()
	rows, err := pool.Query(tb.Context(), `
		INSERT INTO accounts (username, password_hash)
		SELECT 'writer-' || i, 'no-login' FROM generate_series(1, $1) AS i
		RETURNING id::text`, n)
	if err != nil {
		tb.Fatalf("insert accounts: %v", err)
	}
	defer rows.Close()
	writes := make([]Write, 0, n)
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			tb.Fatalf("insert accounts: %v", err)
		}
		writes = append(writes, Write{Key: fmt.Sprintf("%s-%d", tb.Name(), len(writes)), AccountID: id})
	}
	if err := rows.Err(); err != nil {
		tb.Fatalf("insert accounts: %v", err)
	}
	return writes
}

// Client sends writes to sheba's REST address BaseURL with API key Key.
type Client struct {
	BaseURL, Key string
	// HTTP sends the requests; its Timeout bounds each (it must be set: a
	// request the server never answers would wait for ever).
	HTTP *http.Client
	// Pace is the least time between the starts of two writes of one
	// client of Load: without it, answers of a few microseconds (a 503 at
	// once) would use up the writes of a load before the fault is gone.
	Pace time.Duration
	// Answered, if set, is called with each answer of Load as it comes,
	// from the client's goroutine: a test follows the load with it.
	Answered func(Answer)
}

// Subscribe registers url as a webhook endpoint of subscription.created
// events and returns its secret.
func (c Client) Subscribe(tb testing.TB, url string) (secret string) {
	tb.Helper()
	b, err := json.Marshal(map[string]any{"url": url, "eventTypes": []string{"subscription.created"}})
	if err != nil {
		tb.Fatal(err)
	}
	req, err := http.NewRequestWithContext(tb.Context(), http.MethodPost, c.BaseURL+"/v1/webhookEndpoints", bytes.NewReader(b))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", c.Key)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		tb.Fatalf("create webhook endpoint: %v", err)
	}
	defer resp.Body.Close()
	var endpoint struct{ Secret string }
	answer, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode == http.StatusOK {
		err = json.Unmarshal(answer, &endpoint)
	}
	if err != nil || resp.StatusCode != http.StatusOK || endpoint.Secret == "" {
		tb.Fatalf("create webhook endpoint: HTTP %d %s (%v), want 200 with a secret", resp.StatusCode, answer, err)
	}
	return endpoint.Secret
}

// Send sends w once.
func (c Client) Send(ctx context.Context, w Write) (a Answer) {
	a.Write = w
	defer func() { a.At = time.Now() }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+w.path(), strings.NewReader(body))
	if err != nil {
		a.Err = err
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", c.Key)
	req.Header.Set("Idempotency-Key", w.Key)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		a.Err = err
		return a
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		// The status came, the answer did not: a client cannot act on
		// half an answer.
		a.Err = fmt.Errorf("HTTP %d, then reading the body: %w", resp.StatusCode, err)
		return a
	}
	a.Code, a.Body, a.Replayed = resp.StatusCode, b, resp.Header.Get("Idempotent-Replayed") == "true"
	return a
}

// Load sends writes from clients goroutines at once, each taking the next
// write once its last one is answered and c.Pace has passed since it was
// sent, until the writes run out or ctx ends, and returns the answers of
// those sent, in the order of writes. A write already sent when ctx ends
// runs to its answer: ctx bounds the load, c.HTTP's timeout each write.
func (c Client) Load(ctx context.Context, clients int, writes []Write) []Answer {
	answers := make([]Answer, len(writes))
	var taken atomic.Int64 // writes taken by the clients
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(taken.Add(1)) - 1
				if i >= len(writes) {
					return
				}
				due := time.Now().Add(c.Pace)
				answers[i] = c.Send(context.WithoutCancel(ctx), writes[i])
				if c.Answered != nil {
					c.Answered(answers[i])
				}
				sleep(ctx, time.Until(due))
			}
		})
	}
	wg.Wait()
	return answers[:min(int(taken.Load()), len(writes))]
}

// Tally counts answers by outcome.
func Tally(answers []Answer) map[string]int {
	n := map[string]int{}
	for _, a := range answers {
		n[a.Outcome()]++
	}
	return n
}

// driverText is text of the driver, the network or Postgres that must
// never reach a client (docs/api.md#errors).
var driverText = []string{"pgx", "pgconn", "postgres", "sqlstate", "sql", "eof", "dial", "tcp", "broken pipe",
	"connection reset", "reset by peer", "i/o timeout", "127.0.0.1", "context deadline", "read-only", "terminating"}

// CheckAnswers checks that each answer is a success or one a client should
// retry, as a Postgres link that breaks may cause: 200 with the account's
// subscription; 503 UNAVAILABLE, reason DATABASE_UNAVAILABLE, with
// RetryInfo; 504 DEADLINE_EXCEEDED; or no answer at all. Never 500, and no
// error that names anything of the driver.
func CheckAnswers(tb testing.TB, answers []Answer) {
	tb.Helper()
	for _, a := range answers {
		if err := checkAnswer(a); err != nil {
			tb.Errorf("write %s: %v", a.Key, err)
		}
	}
}

func checkAnswer(a Answer) error {
	switch {
	case a.Err != nil:
		return nil
	case a.Code == http.StatusOK:
		return checkCreated(a)
	case a.Code == http.StatusServiceUnavailable:
		return checkError(a, codes.Unavailable, "DATABASE_UNAVAILABLE", "database unavailable", true)
	case a.Code == http.StatusGatewayTimeout:
		return checkError(a, codes.DeadlineExceeded, "DEADLINE_EXCEEDED", "deadline exceeded", false)
	}
	return fmt.Errorf("got HTTP %d %s, want 200, 503, 504 or no answer", a.Code, a.Body)
}

// checkCreated checks a 200: the subscription of the write's account.
func checkCreated(a Answer) error {
	var sub struct{ ID, AccountID, Status string }
	if err := json.Unmarshal(a.Body, &sub); err != nil {
		return fmt.Errorf("200 body %s: %v", a.Body, err)
	}
	if sub.ID == "" || sub.AccountID != a.AccountID || sub.Status != "SUBSCRIPTION_STATUS_ACTIVE" {
		return fmt.Errorf("200 body %s: want an active subscription of account %s", a.Body, a.AccountID)
	}
	return nil
}

// checkError checks an error answer: its google.rpc.Status, sheba's
// ErrorInfo, a RetryInfo if retry says so, and no driver text anywhere in
// it.
func checkError(a Answer, code codes.Code, reason, message string, retry bool) error {
	var p spb.Status
	if err := protojson.Unmarshal(a.Body, &p); err != nil {
		return fmt.Errorf("HTTP %d body %s is not a google.rpc.Status: %v", a.Code, a.Body, err)
	}
	st := status.FromProto(&p)
	var gotReason string
	var gotRetry bool
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() == "sheba" {
				gotReason = d.GetReason()
			}
		case *errdetails.RetryInfo:
			gotRetry = d.GetRetryDelay().AsDuration() > 0
		}
	}
	lower := strings.ToLower(string(a.Body))
	for _, s := range driverText {
		if strings.Contains(lower, s) {
			return fmt.Errorf("HTTP %d body %s names %q", a.Code, a.Body, s)
		}
	}
	if st.Code() != code || st.Message() != message || gotReason != reason || retry && !gotRetry {
		return fmt.Errorf("HTTP %d body %s: want code %v, message %q, reason %s (and RetryInfo: %v)", a.Code, a.Body, code, message, reason, retry)
	}
	return nil
}

// Retry sends each write that was not answered 200 again, with its key,
// until it is answered 200, as a client does: 8 writes at a time, each
// waiting retryWait between tries, given up after attempts tries, when
// ctx ends, or at an answer no retry can change. Answers that say "not
// now" (503, 504, 409 IDEMPOTENCY_KEY_IN_USE, 429, none) are retried. It
// returns answers with each retried write's last answer in place of its
// first.
func (c Client) Retry(ctx context.Context, answers []Answer) []Answer {
	const retriers = 8
	final := slices.Clone(answers)
	todo := make(chan int)
	var wg sync.WaitGroup
	for range retriers {
		wg.Go(func() {
			for i := range todo {
				final[i] = c.retry(ctx, final[i])
			}
		})
	}
	for i, a := range final {
		if a.Err != nil || a.Code != http.StatusOK {
			todo <- i
		}
	}
	close(todo)
	wg.Wait()
	return final
}

// retry sends a.Write until its answer is not one to retry.
func (c Client) retry(ctx context.Context, a Answer) Answer {
	const (
		attempts  = 40
		retryWait = 250 * time.Millisecond
	)
	for try := 0; try < attempts && ctx.Err() == nil; try++ {
		if try > 0 {
			sleep(ctx, retryWait)
		}
		if a = c.Send(ctx, a.Write); !retryable(a) {
			break
		}
	}
	return a
}

func retryable(a Answer) bool {
	if a.Err != nil {
		return !errors.Is(a.Err, context.Canceled)
	}
	switch a.Code {
	case http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusTooManyRequests:
		return true
	case http.StatusConflict:
		return bytes.Contains(a.Body, []byte("IDEMPOTENCY_KEY_IN_USE"))
	}
	return false
}

// CheckDatabase checks the database of pool against the last answer of
// each write sent (Retry's), all of which must be 200: each write's
// account has one subscription, the one answered; that subscription has
// one subscription.created event; and nothing else was created, no
// subscription nor event (the accounts of writes never sent have none).
// The events are kept only if an endpoint receives them (Subscribe).
func CheckDatabase(tb testing.TB, pool *pgxpool.Pool, final []Answer) {
	tb.Helper()
	want := map[string]string{} // account id -> subscription id answered
	for _, a := range final {
		if a.Err != nil || a.Code != http.StatusOK {
			tb.Errorf("write %s: last answer %s %s (%v), want 200", a.Key, a.Outcome(), a.Body, a.Err)
			continue
		}
		var sub struct{ ID string }
		if err := json.Unmarshal(a.Body, &sub); err != nil {
			tb.Errorf("write %s: body %s: %v", a.Key, a.Body, err)
			continue
		}
		want[a.AccountID] = sub.ID
	}
	// Each subscription with the number of its events; the events of no
	// subscription, under the id "".
	rows, err := pool.Query(tb.Context(), `
		SELECT s.account_id::text, s.id::text, count(e.id)
		FROM subscriptions s
		LEFT JOIN webhook_events e
		  ON e.type = 'subscription.created'
		 AND convert_from(e.body, 'UTF8')::jsonb -> 'data' ->> 'id' = s.id::text
		GROUP BY s.account_id, s.id
		UNION ALL
		SELECT '', '', count(*) FROM webhook_events e
		WHERE NOT EXISTS (SELECT FROM subscriptions s WHERE s.id::text = convert_from(e.body, 'UTF8')::jsonb -> 'data' ->> 'id')`)
	if err != nil {
		tb.Fatalf("read subscriptions: %v", err)
	}
	defer rows.Close()
	got := map[string][]string{} // account id -> its subscriptions
	for rows.Next() {
		var account, sub string
		var events int
		if err := rows.Scan(&account, &sub, &events); err != nil {
			tb.Fatalf("read subscriptions: %v", err)
		}
		if account == "" {
			if events != 0 {
				tb.Errorf("got %d events of no subscription, want none", events)
			}
			continue
		}
		got[account] = append(got[account], sub)
		if events != 1 {
			tb.Errorf("subscription %s of account %s: got %d subscription.created events, want 1", sub, account, events)
		}
	}
	if err := rows.Err(); err != nil {
		tb.Fatalf("read subscriptions: %v", err)
	}
	for account, subs := range got {
		if len(subs) != 1 || subs[0] != want[account] {
			tb.Errorf("account %s: got subscriptions %v, want the one answered (%q)", account, subs, want[account])
		}
	}
	for account, sub := range want {
		if len(got[account]) == 0 {
			tb.Errorf("account %s: subscription %s answered 200 is not in the database", account, sub)
		}
	}
}

// Recovery returns how long after promoted the first write answered 200
// came (negative if none did), and the longest time between two writes
// answered 200 in a row. Load records answers in the order of the
// writes, not of their answers: they are put in time order first.
func Recovery(answers []Answer, promoted time.Time) (first, gap time.Duration) {
	var oks []time.Time
	for _, a := range answers {
		if a.Err == nil && a.Code == http.StatusOK {
			oks = append(oks, a.At)
		}
	}
	slices.SortFunc(oks, time.Time.Compare)
	first = -1
	for i, at := range oks {
		if first < 0 && !at.Before(promoted) {
			first = at.Sub(promoted)
		}
		if i > 0 {
			gap = max(gap, at.Sub(oks[i-1]))
		}
	}
	return first, gap
}

// Summary says how the answers of a load and of its retries came out, for
// a test's log: the outcomes of the load, and how many of the writes it
// left unsettled (unanswered, 503, 504) had in fact been made, as the
// retry's replay showed.
func Summary(first, final []Answer) string {
	var made, retried int
	for i, a := range final {
		if first[i].Err == nil && first[i].Code == http.StatusOK {
			continue
		}
		retried++
		if a.Replayed {
			made++
		}
	}
	return fmt.Sprintf("%d writes: %v; %d retried, of which %d had been made (the retry replayed them)", len(first), Tally(first), retried, made)
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
