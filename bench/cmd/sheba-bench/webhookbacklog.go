package main

import (
	"context"
	"fmt"
	"time"
)

// backlogTemplate is webhookTemplate with a backlog: -webhook-backlog
// deliveries pending to backlogEndpoints endpoints that keep failing.
const backlogTemplate = "sheba_webhooks_backlog"

// backlogEndpoints are the failing endpoints that hold the backlog.
const backlogEndpoints = 10

// backlog builds a backlog of -webhook-backlog pending deliveries through
// sheba's own path (account.created events to endpoints that answer 503,
// fanned out, attempted until parked), then runs, each on a copy of it,
// webhook-intermittent, webhook-outage (with -webhook-backlog-outage) and
// webhook-write-cost, with the backlog's endpoints still failing. The row
// holds their figures, and the attempts the backlog's endpoints got
// meanwhile.
func (e *webhookEnv) backlog(ctx context.Context) (figureRow, error) {
	o := e.opts
	rep := figureRow{About: fmt.Sprintf("webhook-intermittent, webhook-outage (down %v) and webhook-write-cost with %s deliveries pending to %d failing endpoints",
		o.webhookBacklogOutage, commas(int64(o.webhookBacklog)), backlogEndpoints)}
	failing := receivers(backlogEndpoints, func(r *benchReceiver) { r.down.Store(true) })
	defer closeReceivers(failing)
	pending, err := e.seedBacklog(ctx, failing)
	if err != nil {
		return rep, err
	}
	rep.Figures = append(rep.Figures, fig("pending", float64(pending), ""))
	attempts := func() (n int64) {
		for _, r := range failing {
			n += r.downReqs.Load()
		}
		return n
	}
	before, start := attempts(), time.Now()
	for _, phase := range []struct {
		name string
		run  func() (figureRow, error)
	}{
		{"intermittent", func() (figureRow, error) { return e.intermittent(ctx, backlogTemplate) }},
		{"outage", func() (figureRow, error) { return e.outage(ctx, backlogTemplate, o.webhookBacklogOutage) }},
	} {
		e.logf("%s: %s with the backlog", scenWebhookBacklog, phase.name)
		r, err := phase.run()
		if err != nil {
			return rep, fmt.Errorf("%s: %w", phase.name, err)
		}
		for _, f := range r.Figures {
			f.Name = phase.name + ": " + f.Name
			rep.Figures = append(rep.Figures, f)
		}
	}
	// Per endpoint, while a runner worked (the write cost runs none).
	perEndpoint := float64(attempts()-before) / time.Since(start).Seconds() / backlogEndpoints
	rep.Figures = append(rep.Figures, goalFig("attempts/s to each backlog endpoint meanwhile", round2(perEndpoint), "", "<=", 1))
	e.logf("%s: write-cost with the backlog", scenWebhookBacklog)
	wc, err := e.writeCost(ctx, backlogTemplate)
	if err != nil {
		return rep, fmt.Errorf("write-cost: %w", err)
	}
	for _, f := range wc.Figures {
		f.Name = "write cost: " + f.Name
		rep.Figures = append(rep.Figures, f)
	}
	return rep, nil
}

// seedBacklog makes backlogTemplate: on a copy of webhookTemplate, an
// endpoint per failing receiver gets -webhook-backlog/backlogEndpoints
// account.created events, which the runner fans out and attempts until
// every endpoint is parked. It returns the pending deliveries.
func (e *webhookEnv) seedBacklog(ctx context.Context, failing []*benchReceiver) (int, error) {
	o := e.opts
	e.logf("%s: building %s pending deliveries", scenWebhookBacklog, commas(int64(o.webhookBacklog)))
	d, err := e.database(ctx, webhookTemplate)
	if err != nil {
		return 0, err
	}
	defer d.close()
	if err := createBenchEndpoints(ctx, d.st, "account.created", failing); err != nil {
		return 0, err
	}
	r, stop, err := startRunner(ctx, d.hooks, runnerOptions())
	if err != nil {
		return 0, err
	}
	events := o.webhookBacklog / backlogEndpoints
	err = eightWays(events, func() error { return publish(ctx, d.st, r, "account.created") })
	limit := deliveryLimit(events * backlogEndpoints)
	deadline := time.Now().Add(limit)
	var deliveries, pending, unparked int
	for err == nil {
		err = d.api.QueryRow(ctx, `
			SELECT (SELECT count(*) FROM webhook_deliveries),
			       (SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'),
			       (SELECT count(*) FROM webhook_endpoints WHERE parked_until IS NULL)`).Scan(&deliveries, &pending, &unparked)
		if err != nil || deliveries == events*backlogEndpoints && unparked == 0 {
			break
		}
		if time.Now().After(deadline) {
			err = fmt.Errorf("after %v: %d deliveries of %d, %d endpoints not parked", limit, deliveries, events*backlogEndpoints, unparked)
			break
		}
		err = sleep(ctx, 200*time.Millisecond)
	}
	if err := stopRunner(stop, err); err != nil {
		return 0, err
	}
	d.close()
	return pending, e.recreate(ctx, backlogTemplate, scenarioDatabase)
}
