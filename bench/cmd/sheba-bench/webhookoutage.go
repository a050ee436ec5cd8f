package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// naiveOutage bounds the outage of the naive loop: it spins as fast as the
// machine lets it, so its rate is known after a few seconds, and a longer
// run would only heat the machine.
const naiveOutage = 10 * time.Second

// outage sends -webhook-rate events/s for down to two endpoints, one of
// which answers 503 all that time, then 2xx, and measures the attempts the
// failing one got while down, how long its backlog took to drain once it
// was back, the most attempts in flight to it, and the delay of every
// delivery to the healthy one; then, as the baseline, a naive loop that
// retries every event at once until it succeeds. On a copy of template.
func (e *webhookEnv) outage(ctx context.Context, template string, down time.Duration) (figureRow, error) {
	o := e.opts
	rep := figureRow{About: fmt.Sprintf("one endpoint down for %v under %d events/s, then back; a second, healthy one gets every event too", down, o.webhookRate)}
	d, err := e.database(ctx, template)
	if err != nil {
		return rep, err
	}
	defer d.close()
	rs := receivers(2, nil)
	defer closeReceivers(rs)
	failing, healthy := rs[0], rs[1]
	if err := createBenchEndpoints(ctx, d.st, "subscription.created", rs); err != nil {
		return rep, err
	}
	ro := runnerOptions()
	r, stop, err := startRunner(ctx, d.hooks, ro)
	if err != nil {
		return rep, err
	}
	failing.down.Store(true)
	events, err := steadyStream(ctx, down, o.webhookRate, func() error { return publish(ctx, d.st, r, "subscription.created") })
	downAttempts := failing.downReqs.Load()
	failing.down.Store(false)
	recovered := time.Now()
	var drain time.Duration
	if err == nil {
		failing.expect(events)
		healthy.expect(events)
		err = failing.wait(ctx, deliveryLimit(events))
		drain = time.Since(recovered)
	}
	if err == nil {
		err = healthy.wait(ctx, deliveryLimit(events))
	}
	if err := stopRunner(stop, err); err != nil {
		return rep, err
	}
	got, dups := deliveredAll(rs)
	naive := newBenchReceiver()
	defer naive.srv.Close()
	naive.down.Store(true)
	naiveDown := min(down, naiveOutage)
	naiveAttempts, err := naiveRetry(ctx, naive, naiveDown, o.webhookRate)
	if err != nil {
		return rep, err
	}
	rep.Figures = []figure{
		goalFig("attempts/s to the failing endpoint while down", round2(float64(downAttempts)/down.Seconds()), "", "<=", 1),
		fig("naive immediate retry's attempts/s while down", round1(float64(naiveAttempts)/naiveDown.Seconds()), ""),
		fig("events built up", float64(events), ""),
		fig("first delivery after recovery (its probe)", round1(failing.first().Sub(recovered).Seconds()), " s"),
		goalFig("drain after recovery", round1(drain.Seconds()), " s", "<=", 30),
		goalFig("most attempts in flight to it", float64(failing.maxInflight.Load()), "", "<=", float64(ro.PerEndpointConcurrency)),
		fig("healthy endpoint's delivery latency p50", round2(percentileMs(healthy.latencies(), 50)/1000), " s"),
		goalFig("p99", round2(percentileMs(healthy.latencies(), 99)/1000), " s", "<=", 2),
		goalFig("duplicates", float64(dups), "", "==", 0),
		goalFig("delivered", float64(got), "", "==", float64(2*events)),
	}
	return rep, nil
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
// for outage and POST each until it gets a 2xx, retrying at once; then the
// receiver comes back and the loops deliver what is left. It returns the
// requests made while the receiver was down.
func naiveRetry(ctx context.Context, rcv *benchReceiver, outage time.Duration, rate int) (int64, error) {
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
	seq := 0
	_, _ = steadyStream(ctx, outage, rate, func() error {
		seq++
		select {
		case queue <- seq:
		default:
		}
		return nil
	})
	down := rcv.requests.Load()
	rcv.down.Store(false)
	close(queue)
	wg.Wait()
	return down, loopCtx.Err()
}
