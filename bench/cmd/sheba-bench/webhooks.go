package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/webhooks"
)

// The webhook scenarios run in this process, on a database of their own in
// the same Postgres: sheba's webhook runner (package webhooks) against local
// receivers, beside River alone and a naive retry loop (docs/webhooks.md).
const (
	scenWebhookThroughput = "webhook-throughput"
	scenWebhookOutage     = "webhook-outage"
)

// webhookRow is one row of the webhook table.
type webhookRow struct {
	name, value, baseline, note string
}

// runWebhookScenarios runs the selected webhook scenarios and returns their
// rows as a markdown table.
func (b *bench) runWebhookScenarios(ctx context.Context, throughput, outage bool, logf func(string, ...any)) (string, error) {
	admin, err := pgx.Connect(ctx, b.pg.url("postgres"))
	if err != nil {
		return "", err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	if _, err := admin.Exec(ctx, `DROP DATABASE IF EXISTS sheba_webhooks WITH (FORCE)`); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, `CREATE DATABASE sheba_webhooks`); err != nil {
		return "", err
	}
	dbURL := b.pg.url("sheba_webhooks")
	if err := store.MigrateUp(ctx, dbURL); err != nil {
		return "", err
	}
	pool, err := pgxpool.New(ctx, dbURL+"&pool_max_conns=32")
	if err != nil {
		return "", err
	}
	defer pool.Close()

	var rows []webhookRow
	if throughput {
		logf("%s: delivery to a fast local receiver against River's own no-op jobs", scenWebhookThroughput)
		r, err := webhookThroughput(ctx, pool, b.opts.webhookEvents)
		if err != nil {
			return "", fmt.Errorf("%s: %w", scenWebhookThroughput, err)
		}
		rows = append(rows, r...)
		for _, row := range r {
			logf("%s: %s (baseline %s; %s)", row.name, row.value, row.baseline, row.note)
		}
	}
	if outage {
		logf("%s: receiver down for %v under %d events/s, against a naive immediate-retry loop", scenWebhookOutage, b.opts.webhookOutage, b.opts.webhookRate)
		r, err := webhookOutage(ctx, pool, b.opts.webhookOutage, b.opts.webhookRate)
		if err != nil {
			return "", fmt.Errorf("%s: %w", scenWebhookOutage, err)
		}
		rows = append(rows, r...)
		for _, row := range r {
			logf("%s: %s (baseline %s; %s)", row.name, row.value, row.baseline, row.note)
		}
	}
	var sb strings.Builder
	sb.WriteString("\n| webhook scenario | sheba | baseline | note |\n|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&sb, "| %s | %s | %s | %s |\n", r.name, r.value, r.baseline, r.note)
	}
	return sb.String(), nil
}

// benchReceiver is a local endpoint that answers 200, or 503 while down,
// and counts what it gets.
type benchReceiver struct {
	srv         *httptest.Server
	down        atomic.Bool
	requests    atomic.Int64
	inflight    atomic.Int64
	maxInflight atomic.Int64

	mu sync.Mutex
	ok map[string]int // 2xx per webhook-id
}

func newBenchReceiver() *benchReceiver {
	r := &benchReceiver{ok: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n := r.inflight.Add(1)
		defer r.inflight.Add(-1)
		for old := r.maxInflight.Load(); n > old && !r.maxInflight.CompareAndSwap(old, n); old = r.maxInflight.Load() {
		}
		r.requests.Add(1)
		_, _ = io.Copy(io.Discard, req.Body)
		if r.down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		r.mu.Lock()
		r.ok[req.Header.Get("webhook-id")]++
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	return r
}

// delivered returns the events that got a 2xx and those that got more than
// one.
func (r *benchReceiver) delivered() (events, duplicates int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.ok {
		if n > 1 {
			duplicates++
		}
	}
	return len(r.ok), duplicates
}

func benchRunner(pool *pgxpool.Pool, o webhooks.Options) (*webhooks.Runner, *store.Store, error) {
	o.AllowPrivateNetworks = true
	o.Log = slog.New(slog.DiscardHandler)
	st := store.New(pool)
	r, err := webhooks.New(pool, st, o)
	return r, st, err
}

// publishN publishes n subscription events from 8 goroutines, each in its
// own transaction, as 8 concurrent API calls would.
func publishN(ctx context.Context, st *store.Store, r *webhooks.Runner, n int) error {
	sub := &shebav1.Subscription{Id: "00000000-0000-4000-8000-000000000001", Plan: "pro", Status: shebav1.SubscriptionStatus_SUBSCRIPTION_STATUS_ACTIVE}
	return eightWays(n, func() error {
		return st.InTx(ctx, func(ctx context.Context) error { return r.Publish(ctx, "subscription.created", sub) })
	})
}

// eightWays calls fn n times from 8 goroutines and returns the first error.
func eightWays(n int, fn func() error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := fn(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func createBenchEndpoint(ctx context.Context, st *store.Store, url string) error {
	_, err := st.CreateWebhookEndpoint(ctx, store.WebhookEndpoint{
		Owner: "bench", URL: url, EventTypes: []string{"subscription.created"},
		Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	}, config.Default().Webhooks.MaxEndpoints)
	return err
}

// waitPending waits until no delivery is pending, or limit passes.
func waitPending(ctx context.Context, pool *pgxpool.Pool, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'`).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d deliveries still pending after %v", n, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// webhookThroughput delivers n events to a fast receiver (published while
// the runner works) and, as the baseline, inserts and works n no-op River
// jobs the same way.
func webhookThroughput(ctx context.Context, pool *pgxpool.Pool, n int) ([]webhookRow, error) {
	rcv := newBenchReceiver()
	defer rcv.srv.Close()
	r, st, err := benchRunner(pool, webhooks.Options{
		Timeout: 10 * time.Second, MaxAttempts: 20, BackoffBase: time.Second, BackoffMax: time.Hour,
		PerEndpointConcurrency: 16, PollInterval: 100 * time.Millisecond,
	})
	if err != nil {
		return nil, err
	}
	if err := createBenchEndpoint(ctx, st, rcv.srv.URL); err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx, 10*time.Second) }()
	start := time.Now()
	if err := publishN(ctx, st, r, n); err != nil {
		stop()
		return nil, err
	}
	err = waitPending(ctx, pool, 5*time.Minute)
	sheba := time.Since(start)
	stop()
	if err != nil {
		return nil, err
	}
	if err := <-done; err != nil {
		return nil, err
	}
	got, dups := rcv.delivered()

	river, err := riverNoop(ctx, pool, n)
	if err != nil {
		return nil, err
	}
	shebaRate := float64(n) / sheba.Seconds()
	riverRate := float64(n) / river.Seconds()
	return []webhookRow{{
		name:     fmt.Sprintf("throughput, %d events to a fast receiver", n),
		value:    fmt.Sprintf("%.0f events/s", shebaRate),
		baseline: fmt.Sprintf("%.0f jobs/s (River, no-op jobs)", riverRate),
		note:     fmt.Sprintf("ratio %.2f; %d delivered, %d duplicates", shebaRate/riverRate, got, dups),
	}}, nil
}

type noopArgs struct{}

func (noopArgs) Kind() string { return "bench_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	done *atomic.Int64
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	w.done.Add(1)
	return nil
}

// riverNoop inserts n no-op jobs from 8 goroutines, each in its own
// transaction, while a River client with as many workers as sheba's works
// them, and returns the time until the last is done.
func riverNoop(ctx context.Context, pool *pgxpool.Pool, n int) (time.Duration, error) {
	var done atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{done: &done})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{"bench": {MaxWorkers: 50}},
		Workers:           workers,
		FetchPollInterval: 100 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return 0, err
	}
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	defer client.Stop(context.WithoutCancel(ctx)) //nolint:errcheck // the result is measured
	start := time.Now()
	err = eightWays(n, func() error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := client.InsertTx(ctx, tx, noopArgs{}, &river.InsertOpts{Queue: "bench"})
			return err
		})
	})
	if err != nil {
		return 0, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for done.Load() < int64(n) {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("River worked %d of %d jobs in 5 minutes", done.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start), nil
}

// webhookOutage sends rate events/s to a receiver that is down for outage,
// then up, and measures the attempts it took while down, how long the
// backlog took to drain after it came back, the most requests in flight and
// the duplicates; then the same for a naive loop that retries every event
// at once until it succeeds.
func webhookOutage(ctx context.Context, pool *pgxpool.Pool, outage time.Duration, rate int) ([]webhookRow, error) {
	if _, err := pool.Exec(ctx, `TRUNCATE webhook_endpoints, webhook_events, webhook_deliveries CASCADE`); err != nil {
		return nil, err
	}
	rcv := newBenchReceiver()
	defer rcv.srv.Close()
	const concurrency = 4
	r, st, err := benchRunner(pool, webhooks.Options{
		// The defaults of the webhooks section.
		Timeout: 10 * time.Second, MaxAttempts: 20, BackoffBase: time.Second, BackoffMax: time.Hour,
		PerEndpointConcurrency: concurrency,
	})
	if err != nil {
		return nil, err
	}
	if err := createBenchEndpoint(ctx, st, rcv.srv.URL); err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx, 10*time.Second) }()

	rcv.down.Store(true)
	events, err := steadyStream(ctx, outage, rate, func() error {
		sub := &shebav1.Subscription{Id: "00000000-0000-4000-8000-000000000001", Plan: "pro"}
		return st.InTx(ctx, func(ctx context.Context) error { return r.Publish(ctx, "subscription.created", sub) })
	})
	if err != nil {
		return nil, err
	}
	downRequests := rcv.requests.Load()
	rcv.down.Store(false)
	recovered := time.Now()
	if err := waitPending(ctx, pool, 30*time.Minute); err != nil {
		return nil, err
	}
	drain := time.Since(recovered)
	stop()
	if err := <-done; err != nil {
		return nil, err
	}
	got, dups := rcv.delivered()

	naive := newBenchReceiver()
	defer naive.srv.Close()
	naive.down.Store(true)
	naiveEvents, naiveDown, naiveDrain, err := naiveRetry(ctx, naive, outage, rate)
	if err != nil {
		return nil, err
	}
	nGot, nDups := naive.delivered()
	return []webhookRow{
		{
			name:     fmt.Sprintf("outage %v at %d events/s: attempts/s while down", outage, rate),
			value:    fmt.Sprintf("%.1f", float64(downRequests)/outage.Seconds()),
			baseline: fmt.Sprintf("%.1f (naive immediate retry, 50 loops)", float64(naiveDown)/outage.Seconds()),
			note:     fmt.Sprintf("%d events published", events),
		},
		{
			name:     "outage: drain after recovery",
			value:    drain.Round(100 * time.Millisecond).String(),
			baseline: naiveDrain.Round(100 * time.Millisecond).String(),
			note:     fmt.Sprintf("sheba %d of %d delivered; naive %d of %d", got, events, nGot, naiveEvents),
		},
		{
			name:     "outage: peak requests in flight",
			value:    fmt.Sprint(rcv.maxInflight.Load()),
			baseline: fmt.Sprint(naive.maxInflight.Load()),
			note:     fmt.Sprintf("per_endpoint_concurrency %d", concurrency),
		},
		{
			name:     "outage: duplicates",
			value:    fmt.Sprint(dups),
			baseline: fmt.Sprint(nDups),
			note:     "events with more than one 2xx",
		},
	}, nil
}

// steadyStream calls publish rate times a second for d and returns how
// many calls it made.
func steadyStream(ctx context.Context, d time.Duration, rate int, publish func() error) (int, error) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.Now().Add(d)
	n := 0
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-tick.C:
		}
		if err := publish(); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// naiveRetry is the baseline: 50 loops take events from a queue fed at rate
// for outage and POST each until it gets a 2xx, retrying at once. It
// returns the events, the requests made while the receiver was down and the
// time to deliver every event after it came back.
func naiveRetry(ctx context.Context, rcv *benchReceiver, outage time.Duration, rate int) (int, int64, time.Duration, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	queue := make(chan int, rate*int(outage/time.Second)+rate)
	var wg sync.WaitGroup
	loopCtx, cancel := context.WithTimeout(ctx, outage+10*time.Minute) // bounded in time
	defer cancel()
	for range 50 {
		wg.Go(func() {
			for id := range queue {
				for loopCtx.Err() == nil {
					req, _ := http.NewRequestWithContext(loopCtx, http.MethodPost, rcv.srv.URL, strings.NewReader("{}"))
					req.Header.Set("webhook-id", fmt.Sprint(id))
					resp, err := client.Do(req)
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode/100 == 2 {
							break
						}
					}
				}
			}
		})
	}
	events, _ := steadyStream(ctx, outage, rate, func() error {
		select {
		case queue <- nextEventID():
		default:
		}
		return nil
	})
	down := rcv.requests.Load()
	rcv.down.Store(false)
	recovered := time.Now()
	close(queue)
	wg.Wait()
	return events, down, time.Since(recovered), loopCtx.Err()
}

var eventSeq atomic.Int64

// nextEventID numbers the naive loop's events.
func nextEventID() int { return int(eventSeq.Add(1)) }
