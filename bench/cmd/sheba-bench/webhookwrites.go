package main

import (
	"context"
	"fmt"
	"net"
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
// 1,000 of 1,000 endpoints subscribed to subscription.created: -webhook-writes
// calls at each count, the counts alternated -pairs times so that drift
// cancels. The runner does not work meanwhile: what is timed is the write
// itself, the fan-out's work being the delivery scenarios' to measure. On a
// copy of template.
func (e *webhookEnv) writeCost(ctx context.Context, template string) (webhookReport, error) {
	o := e.opts
	rep := webhookReport{About: fmt.Sprintf("CreateSubscription over loopback gRPC with %v endpoints subscribed, %s calls each, alternated %d times",
		writeCostCounts, commas(int64(o.webhookWrites)), o.pairs)}
	d, err := e.database(ctx, template)
	if err != nil {
		return rep, err
	}
	defer d.close()
	for i := range writeCostCounts[len(writeCostCounts)-1] {
		if _, err := createBenchEndpoint(ctx, d.st, fmt.Sprintf("%s%d", writeCostURL, i), "account.created"); err != nil {
			return rep, err
		}
	}
	r, err := webhooks.New(d.hooks, store.New(d.hooks), runnerOptions())
	if err != nil {
		return rep, err
	}
	svc, err := shebaserver.New(d.st, shebaserver.Options{Events: r})
	if err != nil {
		return rep, err
	}
	gs := grpc.NewServer()
	svc.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return rep, err
	}
	go gs.Serve(lis) //nolint:errcheck // ends with Stop
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return rep, err
	}
	defer conn.Close()
	client := shebav1.NewSubscriptionServiceClient(conn)

	account := 0
	write := func() (time.Duration, error) {
		account++
		start := time.Now()
		_, err := client.CreateSubscription(ctx, &shebav1.CreateSubscriptionRequest{AccountId: accountID(account), Plan: "pro"})
		return time.Since(start), err
	}
	times := func(subscribed, n int, into *[]time.Duration) error {
		if err := subscribe(ctx, d, subscribed); err != nil {
			return err
		}
		for range n {
			t, err := write()
			if err != nil {
				return fmt.Errorf("CreateSubscription with %d endpoints subscribed: %w", subscribed, err)
			}
			if into != nil {
				*into = append(*into, t)
			}
		}
		return nil
	}
	for _, n := range writeCostCounts {
		if err := times(n, webhookWarmupWrites, nil); err != nil {
			return rep, err
		}
	}
	// lat[k][i]: the calls of pair k at the i-th count.
	lat := make([][][]time.Duration, o.pairs)
	for k := range lat {
		lat[k] = make([][]time.Duration, len(writeCostCounts))
		for i, n := range writeCostCounts {
			if err := times(n, o.webhookWrites, &lat[k][i]); err != nil {
				return rep, err
			}
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
	// The ratios are taken pair by pair, and their median kept, as the
	// main table's: a pause of the machine or of Postgres (a checkpoint, an
	// autovacuum) in one count's calls moves its p99 over the pooled calls
	// more than any difference of the writes, and the spread shows it.
	last := len(writeCostCounts) - 1
	for _, p := range []float64{50, 99} {
		ratios := make([]float64, len(lat))
		for k := range lat {
			ratios[k] = percentileMs(lat[k][last], p) / percentileMs(lat[k][0], p)
		}
		rep.Figures = append(rep.Figures, goalFig(
			fmt.Sprintf("p%.0f with %d over p%.0f with 0, median of %d pairs (%s)", p, writeCostCounts[last], p, len(lat), spread(ratios)),
			round2(median(ratios)), "×", "<=", 1.2))
	}
	return rep, nil
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
