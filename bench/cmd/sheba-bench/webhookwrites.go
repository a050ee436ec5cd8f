package main

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	shebaserver "github.com/shebasvc/sheba/server"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/webhooks"
)

// writeCostCounts are the numbers of endpoints subscribed to the writes'
// event that webhook-write-cost compares, the first being the baseline.
var writeCostCounts = []int{0, 50, 1000}

// webhookWarmupWrites are the writes at each count before the measured
// ones: pgx's statement cache and the server's plans warm up.
const webhookWarmupWrites = 100

// writeCost times CreateSubscription, called over loopback gRPC on sheba's
// services (without the interceptor chain) by one client, with 0, 50 and
// 1,000 of 1,000 endpoints subscribed to subscription.created. Each count
// has a database of its own (a copy of template) and a server on it, and
// the calls go to the three in turn, call by call: a pause of the machine
// or of Postgres (a checkpoint, an autovacuum) falls on all three alike
// instead of on one count's calls. -pairs rounds of -webhook-writes calls to each,
// after 100 warm-up calls each. The runners do not work
// meanwhile: what is timed is the write itself, the fan-out's work being
// the delivery scenarios' to measure.
func (e *webhookEnv) writeCost(ctx context.Context, template string) (figureRow, error) {
	o := e.opts
	rep := figureRow{About: fmt.Sprintf("CreateSubscription over loopback gRPC with %v endpoints subscribed (a database each, called in turn), %d rounds of %s calls each",
		writeCostCounts, o.pairs, commas(int64(o.webhookWrites)))}
	writes := make([]func() (time.Duration, error), len(writeCostCounts))
	for i, n := range writeCostCounts {
		write, closeWrite, err := e.writeTarget(ctx, fmt.Sprintf("%s_%d", scenarioDatabase, i), template, n)
		if err != nil {
			return rep, err
		}
		defer closeWrite()
		writes[i] = write
	}
	round := func(calls int, lat [][]time.Duration) error {
		for range calls {
			for i, write := range writes {
				t, err := write()
				if err != nil {
					return fmt.Errorf("CreateSubscription with %d endpoints subscribed: %w", writeCostCounts[i], err)
				}
				if lat != nil {
					lat[i] = append(lat[i], t)
				}
			}
		}
		return nil
	}
	if err := round(webhookWarmupWrites, nil); err != nil {
		return rep, err
	}
	// lat[k][i]: the calls of round k at the i-th count.
	lat := make([][][]time.Duration, o.pairs)
	for k := range lat {
		lat[k] = make([][]time.Duration, len(writeCostCounts))
		if err := round(o.webhookWrites, lat[k]); err != nil {
			return rep, err
		}
	}
	for i, n := range writeCostCounts {
		var all []time.Duration
		for k := range lat {
			all = append(all, lat[k][i]...)
		}
		rep.Figures = append(rep.Figures,
			fig(fmt.Sprintf("p50 with %d", n), round2(percentileMs(all, 50)), " ms"),
			fig(fmt.Sprintf("p99 with %d", n), round2(percentileMs(all, 99)), " ms"))
	}
	// The ratios are taken round by round, and their median kept, as the
	// main table's pairs.
	last := len(writeCostCounts) - 1
	for _, p := range []float64{50, 99} {
		ratios := make([]float64, len(lat))
		for k := range lat {
			ratios[k] = percentileMs(lat[k][last], p) / percentileMs(lat[k][0], p)
		}
		rep.Figures = append(rep.Figures, goalFig(
			fmt.Sprintf("p%.0f with %d over p%.0f with 0, median of %d rounds (%s)", p, writeCostCounts[last], p, len(lat), span(ratios)),
			round2(median(ratios)), "×", "<=", 1.2))
	}
	return rep, nil
}

// writeTarget makes database name, a copy of template, hold the 1,000
// endpoints of webhook-write-cost, subscribed of them to
// subscription.created, and serves sheba's services on it over loopback
// gRPC; write makes one CreateSubscription call and returns its time.
func (e *webhookEnv) writeTarget(ctx context.Context, name, template string, subscribed int) (write func() (time.Duration, error), closeAll func(), err error) {
	d, err := e.databaseNamed(ctx, name, template)
	if err != nil {
		return nil, nil, err
	}
	var closers []func()
	closeAll = func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}
	closers = append(closers, d.close)
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	for i := range writeCostCounts[len(writeCostCounts)-1] {
		if _, err := createBenchEndpoint(ctx, d.st, fmt.Sprintf("%s%d", writeCostURL, i), "account.created"); err != nil {
			return nil, nil, err
		}
	}
	if err := subscribe(ctx, d, subscribed); err != nil {
		return nil, nil, err
	}
	r, err := webhooks.New(d.hooks, store.New(d.hooks), runnerOptions())
	if err != nil {
		return nil, nil, err
	}
	svc, err := shebaserver.New(d.st, shebaserver.Options{Events: r})
	if err != nil {
		return nil, nil, err
	}
	gs := grpc.NewServer()
	svc.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	go gs.Serve(lis) //nolint:errcheck // ends with Stop
	closers = append(closers, gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, func() { conn.Close() })
	client := shebav1.NewSubscriptionServiceClient(conn)
	account := 0
	write = func() (time.Duration, error) {
		account++
		start := time.Now()
		_, err := client.CreateSubscription(ctx, &shebav1.CreateSubscriptionRequest{AccountId: accountID(account), Plan: "pro"})
		return time.Since(start), err
	}
	return write, closeAll, nil
}

// writeCostURL starts the URL of every endpoint of webhook-write-cost:
// they receive nothing, the runner being stopped.
const writeCostURL = "https://hooks.example.com/"

// subscribe makes the first n endpoints of webhook-write-cost by id receive
// subscription.created and the others account.created only.
func subscribe(ctx context.Context, d *webhookDB, n int) error {
	_, err := d.api.Exec(ctx, `
		UPDATE webhook_endpoints ep
		SET event_types = CASE WHEN r.n <= $1 THEN ARRAY['subscription.created'] ELSE ARRAY['account.created'] END
		FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM webhook_endpoints WHERE starts_with(url, $2)) r
		WHERE ep.id = r.id`, n, writeCostURL)
	return err
}
