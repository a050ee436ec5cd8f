package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shebasvc/sheba/webhooks"
)

// fleet runs -webhook-replicas runners on one database, each on a pool of
// its own as a sheba replica would, and publishes -webhook-fleet-events
// events to one endpoint that answers after -webhook-slow: the most
// attempts in flight to it, against webhooks.per_endpoint_concurrency,
// which the cap must hold for the fleet as a whole
// (docs/webhooks.md, "Protecting a failing endpoint").
func (e *webhookEnv) fleet(ctx context.Context) (figureRow, error) {
	o := e.opts
	ro := runnerOptions()
	// Every replica gets ro.Limiter, nil: webhooks.NewSharedLimiter, the
	// endpoint's slots leased in the database the replicas share, as
	// sheba serve runs them.
	rep := figureRow{About: fmt.Sprintf("%d replicas (runners on one database), %d events to one endpoint answering after %v, per_endpoint_concurrency %d",
		o.webhookReplicas, o.webhookFleetEvents, o.webhookSlow, ro.PerEndpointConcurrency)}
	d, err := e.database(ctx, webhookTemplate)
	if err != nil {
		return rep, err
	}
	defer d.close()
	rs := receivers(1, func(r *benchReceiver) {
		r.slow = o.webhookSlow
		r.expect(o.webhookFleetEvents)
	})
	defer closeReceivers(rs)
	slow := rs[0]
	if err := createBenchEndpoints(ctx, d.st, "subscription.created", rs); err != nil {
		return rep, err
	}
	var runners []*webhooks.Runner
	var stops []func() error
	var pools []*pgxpool.Pool
	// Each replica's runner stops before its pool closes.
	stopFleet := func(err error) error {
		for _, stop := range stops {
			err = stopRunner(stop, err)
		}
		for _, p := range pools {
			p.Close()
		}
		stops, pools = nil, nil
		return err
	}
	defer stopFleet(nil) //nolint:errcheck // on the error paths only
	for range o.webhookReplicas {
		pool, err := e.hooksPool(ctx, d.url)
		if err != nil {
			return rep, err
		}
		pools = append(pools, pool)
		r, stop, err := startRunner(ctx, pool, ro)
		if err != nil {
			return rep, err
		}
		runners, stops = append(runners, r), append(stops, stop)
	}
	start := time.Now()
	var n atomic.Int64
	err = eightWays(o.webhookFleetEvents, func() error {
		// Each replica publishes its share, as API calls spread over them.
		return publish(ctx, d.st, runners[n.Add(1)%int64(len(runners))], "subscription.created")
	})
	if err == nil {
		err = slow.wait(ctx, deliveryLimit(o.webhookFleetEvents)+time.Duration(o.webhookFleetEvents)*o.webhookSlow)
	}
	took := time.Since(start)
	if err := stopFleet(err); err != nil {
		return rep, err
	}
	// The replicas that made attempts: River records, on each job, the
	// clients that worked it; one replica is one River client.
	var replicas int
	if err := d.api.QueryRow(ctx, `
		SELECT count(DISTINCT c) FROM river_job, unnest(attempted_by) AS c
		WHERE kind = 'sheba_webhook_delivery'`).Scan(&replicas); err != nil {
		return rep, err
	}
	got, dups := slow.delivered()
	rep.Figures = []figure{
		goalFig("most attempts in flight to the slow endpoint", float64(slow.maxInflight.Load()), "", "<=", float64(ro.PerEndpointConcurrency)),
		fig("replicas that made attempts", float64(replicas), ""),
		fig("delivered/s", round1(float64(o.webhookFleetEvents)/took.Seconds()), ""),
		fig("delivered/s the cap allows", round1(float64(ro.PerEndpointConcurrency)/o.webhookSlow.Seconds()), "/s"),
		goalFig("duplicates", float64(dups), "", "==", 0),
		goalFig("delivered", float64(got), "", "==", float64(o.webhookFleetEvents)),
	}
	return rep, nil
}
