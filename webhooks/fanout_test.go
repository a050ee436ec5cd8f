package webhooks

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/webhooks/throttle"
	"github.com/shebasvc/sheba/webhooks/webhookstest"
)

// addEndpoints registers n endpoints of the test owner for eventTypes at
// once, with URLs on a port nobody listens on, and returns their ids in id
// order.
func (b *testbed) addEndpoints(t *testing.T, n int, eventTypes ...string) []string {
	t.Helper()
	rows, _ := b.pool.Query(t.Context(), `
		INSERT INTO webhook_endpoints (owner, url, event_types, secret)
		SELECT $1, 'http://127.0.0.1:1/' || gen_random_uuid(), $2, 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'
		FROM generate_series(1, $3)
		RETURNING id`, testOwner, eventTypes, n)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("add %d endpoints: %v", n, err)
	}
	// Postgres orders uuids as their lowercase text sorts.
	slices.Sort(ids)
	return ids
}

// rowsWritten returns, by table, the rows the connection of the
// transaction of ctx has inserted, updated and deleted and not yet reported
// to the server's statistics (pg_stat_xact_user_tables): within one
// transaction, the difference of two calls is what it wrote between them.
func rowsWritten(t *testing.T, ctx context.Context) map[string]int64 {
	t.Helper()
	tx, ok := store.TxFromContext(ctx)
	if !ok {
		t.Fatal("no transaction in ctx")
	}
	rows, _ := tx.Query(ctx, `
		SELECT relname, n_tup_ins + n_tup_upd + n_tup_del
		FROM pg_stat_xact_user_tables
		WHERE n_tup_ins + n_tup_upd + n_tup_del > 0`)
	written := map[string]int64{}
	var table string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&table, &n}, func() error {
		written[table] = n
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return written
}

// TestPublishCostsTheSameWhateverTheEndpoints publishes an event in the
// transaction of a change with 0, 50 and 1,000 endpoints subscribed to its
// type: inside that transaction, Publish writes one event and one job
// (River's, the fan-out's) each time, nothing per endpoint.
func TestPublishCostsTheSameWhateverTheEndpoints(t *testing.T) {
	t.Parallel()
	b := newTestbed(t, nil)
	want := map[string]int64{"webhook_events": 1, "river_job": 1}
	subscribed := 0
	for _, n := range []int{0, 50, 1000} {
		b.addEndpoints(t, n-subscribed, "subscription.created")
		subscribed = n
		var got map[string]int64
		errRollback := fmt.Errorf("leave nothing behind")
		err := b.st.InTx(t.Context(), func(ctx context.Context) error {
			before := rowsWritten(t, ctx)
			err := b.r.Publish(ctx, "subscription.created", &shebav1.Subscription{Id: uuid.NewString(), Plan: "pro"})
			if err != nil {
				return err
			}
			got = rowsWritten(t, ctx)
			for table, n := range before {
				if got[table] -= n; got[table] == 0 {
					delete(got, table)
				}
			}
			return errRollback
		})
		if err != errRollback {
			t.Fatalf("%d endpoints: Publish: %v", n, err)
		}
		t.Logf("%d endpoints: rows written in the change's transaction: %v", n, got)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%d endpoints: rows written in the change's transaction (-want +got):\n%s", n, diff)
		}
	}
}

// countJobs returns the delivery jobs in the queue and the endpoints they
// are for.
func (b *testbed) countJobs(t *testing.T) (jobs, endpoints int) {
	t.Helper()
	err := b.pool.QueryRow(t.Context(), `
		SELECT count(*), count(DISTINCT args->>'endpoint_id') FROM river_job WHERE kind = $1`,
		deliveryArgs{}.Kind()).Scan(&jobs, &endpoints)
	if err != nil {
		t.Fatal(err)
	}
	return jobs, endpoints
}

// countDeliveries returns the deliveries of the event and the endpoints
// they are to.
func (b *testbed) countDeliveries(t *testing.T, eventID string) (deliveries, endpoints int) {
	t.Helper()
	err := b.pool.QueryRow(t.Context(), `
		SELECT count(*), count(DISTINCT endpoint_id) FROM webhook_deliveries WHERE event_id = $1`,
		eventID).Scan(&deliveries, &endpoints)
	if err != nil {
		t.Fatal(err)
	}
	return deliveries, endpoints
}

// TestFanOutCutShort fans an event out to 35 endpoints, 10 a batch, with
// the database refusing the delivery to the 15th: the run fails after the
// first batch, which stays written; River's next run, the refusal gone,
// writes the rest. Every endpoint gets exactly one delivery and one job,
// and so it stays when the fan-out runs again, twice at once.
func TestFanOutCutShort(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newTestbed(t, func(o *Options) {
		o.ExpandBatch = 10
		o.QueueShare = 100
	})
	ids := b.addEndpoints(t, 35, "account.created")
	if _, err := b.pool.Exec(ctx, fmt.Sprintf(`
		CREATE FUNCTION refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.endpoint_id = '%s' THEN RAISE EXCEPTION 'injected failure'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_one BEFORE INSERT ON webhook_deliveries
			FOR EACH ROW EXECUTE FUNCTION refuse_one();`, ids[14])); err != nil {
		t.Fatal(err)
	}
	b.publish(t, "account.created", &shebav1.Account{Id: uuid.NewString(), Username: "fan"})
	job := rivertest.RequireInserted(ctx, t, riverpgxv5.New(b.pool), eventArgs{}, nil)
	w := rivertest.NewWorker(t, riverpgxv5.New(b.pool), &river.Config{}, river.Worker[eventArgs](&eventWorker{r: b.r}))
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))

	res, err := w.WorkJob(ctx, t, tx, job.JobRow)
	if err == nil || res.EventKind != river.EventKindJobFailed {
		t.Fatalf("first run: got %s, %v; want it failed by the injected failure", res.EventKind, err)
	}
	t.Logf("first run: %v", err)
	eventID := job.Args.EventID
	if n, _ := b.countDeliveries(t, eventID); n != 10 {
		t.Errorf("after the failed run: got %d deliveries, want the first batch's 10", n)
	}
	if n, _ := b.countJobs(t); n != 10 {
		t.Errorf("after the failed run: got %d delivery jobs, want the first batch's 10", n)
	}

	if _, err := b.pool.Exec(ctx, `DROP TRIGGER refuse_one ON webhook_deliveries`); err != nil {
		t.Fatal(err)
	}
	if res, err := w.WorkJob(ctx, t, tx, res.Job); err != nil || res.EventKind != river.EventKindJobCompleted {
		t.Fatalf("second run: got %s, %v; want it completed", res.EventKind, err)
	}
	check := func(when string) {
		t.Helper()
		if n, endpoints := b.countDeliveries(t, eventID); n != len(ids) || endpoints != len(ids) {
			t.Errorf("%s: got %d deliveries to %d endpoints, want one to each of %d", when, n, endpoints, len(ids))
		}
		if n, endpoints := b.countJobs(t); n != len(ids) || endpoints != len(ids) {
			t.Errorf("%s: got %d delivery jobs for %d endpoints, want one for each of %d", when, n, endpoints, len(ids))
		}
	}
	check("after the second run")

	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if err := b.r.expand(ctx, eventID); err != nil {
				t.Errorf("expand again: %v", err)
			}
		})
	}
	wg.Wait()
	check("after two more runs at once")
}

// TestEndpointCreatedAfterTheEvent registers an endpoint after an event was
// published but before it was fanned out: it does not receive it.
func TestEndpointCreatedAfterTheEvent(t *testing.T) {
	t.Parallel()
	b := newTestbed(t, nil)
	before := b.endpoint(t, "http://127.0.0.1:1/before", "account.created")
	b.publish(t, "account.created", &shebav1.Account{Id: uuid.NewString(), Username: "early"})
	after := b.endpoint(t, "http://127.0.0.1:1/after", "account.created")
	b.fanOut(t)
	if n := len(b.deliveries(t, before.ID)); n != 1 {
		t.Errorf("endpoint created before the event: got %d deliveries, want 1", n)
	}
	if n := len(b.deliveries(t, after.ID)); n != 0 {
		t.Errorf("endpoint created after the event: got %d deliveries, want 0", n)
	}
}

// noSlot is a Limiter whose endpoints are always busy.
type noSlot struct{}

func (noSlot) Acquire(context.Context, string) (func(), bool, error) { return nil, false, nil }

// TestHeldAttemptsDoNotCount works a delivery job whose attempt is held
// back, by the concurrency cap, the adaptive throttle or the endpoint's
// park: River puts the job back without counting an attempt (its snooze),
// the delivery counts none either, and no request is sent.
func TestHeldAttemptsDoNotCount(t *testing.T) {
	t.Parallel()
	for _, test := range []struct {
		reason string
		adjust func(*Options)
		// hold makes the attempt to endpointID held back.
		hold func(t *testing.T, b *testbed, endpointID string)
	}{
		{
			reason: "concurrency",
			adjust: func(o *Options) { o.Limiter = noSlot{} },
		},
		{
			reason: "throttle",
			hold: func(t *testing.T, b *testbed, endpointID string) {
				// Three requests the endpoint did not take: the next is held
				// with probability 3/4, and the random draw says held.
				b.r.throttles = throttle.NewGroup(throttle.WithRandom(func() float64 { return 0 }))
				th := b.r.throttles.Get(endpointID)
				for range 3 {
					th.Allow()
				}
			},
		},
		{
			reason: "parked",
			hold: func(t *testing.T, b *testbed, endpointID string) {
				if _, err := b.pool.Exec(t.Context(), `
					UPDATE webhook_endpoints SET failures = $2, parked_until = now() + interval '1 hour' WHERE id = $1`,
					endpointID, parkAfter); err != nil {
					t.Fatal(err)
				}
			},
		},
	} {
		t.Run(test.reason, func(t *testing.T) {
			t.Parallel()
			b := newTestbed(t, test.adjust)
			rcv := webhookstest.NewReceiver(t, webhookstest.Status(http.StatusOK))
			ep := b.endpoint(t, rcv.URL, "account.created")
			b.publish(t, "account.created", &shebav1.Account{Id: uuid.NewString(), Username: "held"})
			b.fanOut(t)
			w := b.jobWorker(t)
			if test.hold != nil {
				test.hold(t, b, ep.ID)
			}
			kind, job := w.work(t, b.publishedJob(t))
			if kind != river.EventKindJobSnoozed || job.Attempt != 0 {
				t.Errorf("got %s at River's attempt %d, want it snoozed with no attempt counted", kind, job.Attempt)
			}
			d := b.deliveries(t, ep.ID)[0]
			if d.State != store.DeliveryPending || d.Attempts != 0 {
				t.Errorf("got delivery %+v, want it pending with no attempt", d)
			}
			if n := len(rcv.Requests()); n != 0 {
				t.Errorf("receiver got %d requests, want none", n)
			}
			if n := testutil.ToFloat64(b.r.m.held.WithLabelValues(test.reason)); n != 1 {
				t.Errorf("got sheba_webhook_held_total{reason=%q} %v, want 1", test.reason, n)
			}
		})
	}
}

// TestBacklogDelaysNobody gives an endpoint that refuses connections 2,000
// pending deliveries, then publishes an event for a healthy endpoint: it
// arrives within seconds (15 s at most, for a loaded machine; it is about
// not waiting behind the backlog). The failing endpoint is parked, and its
// backlog takes little of the workers meanwhile: a few jobs a second, not
// one per delivery.
func TestBacklogDelaysNobody(t *testing.T) {
	t.Parallel()
	const backlog = 2000
	b := newTestbed(t, nil)
	failing := b.endpoint(t, "http://127.0.0.1:"+closedPort(t)+"/", "subscription.created", "subscription.canceled")
	rcv := webhookstest.NewReceiver(t, webhookstest.Status(http.StatusNoContent))
	healthy := b.endpoint(t, rcv.URL, "account.created")
	run(t, b.r)

	start := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { b.churn(t, backlog/4) })
	}
	wg.Wait()
	var pending int
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if err := b.pool.QueryRow(t.Context(), `
			SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND state = 'pending'`, failing.ID).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if pending == backlog {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failing endpoint has %d deliveries pending, want %d", pending, backlog)
		}
	}
	t.Logf("%d deliveries pending to the failing endpoint after %v", pending, time.Since(start))

	runs := func() float64 {
		n := testutil.ToFloat64(b.r.m.attempts.WithLabelValues("network_error"))
		for _, reason := range []string{"throttle", "concurrency", "parked"} {
			n += testutil.ToFloat64(b.r.m.held.WithLabelValues(reason))
		}
		return n
	}
	runsBefore := runs()
	sent := time.Now()
	b.publish(t, "account.created", &shebav1.Account{Id: uuid.NewString(), Username: "healthy"})
	b.waitDeliveries(t, healthy.ID, 15*time.Second, "the healthy endpoint's event", all(1, store.DeliverySucceeded))
	took := time.Since(sent)
	// Long enough to see the failing endpoint's jobs come back.
	time.Sleep(max(0, 3*time.Second-took))
	window := time.Since(sent)
	failingRuns := runs() - runsBefore
	t.Logf("the healthy endpoint's event arrived %v after it was published; meanwhile the failing endpoint's jobs ran %.0f times in %v",
		took, failingRuns, window.Round(time.Millisecond))
	if perSecond := failingRuns / window.Seconds(); perSecond > backlog/20 {
		t.Errorf("the failing endpoint's jobs ran %.0f times a second, want its backlog to take few workers (at most %d runs a second)", perSecond, backlog/20)
	}
	if n := testutil.ToFloat64(b.r.m.held.WithLabelValues("parked")); n == 0 {
		t.Error("got sheba_webhook_held_total{reason=\"parked\"} 0, want the failing endpoint parked")
	}
}

// TestProbeWakesTheBacklog parks an endpoint for 10 s (as 5 failures in a
// row would) while 40 events arrive for it: its jobs are held by the park,
// each asleep past its end for a while of up to 8 minutes (a throttle
// window of a minute, 32 of them queued: parkedWait). The first to wake
// probes, the endpoint takes it, and the probe wakes the others: every
// delivery arrives within two minutes, where the jobs waking by themselves
// would take up to 8.
func TestProbeWakesTheBacklog(t *testing.T) {
	t.Parallel()
	const events = 40
	b := newTestbed(t, func(o *Options) { o.ThrottleWindow = time.Minute })
	rcv := webhookstest.NewReceiver(t, webhookstest.Status(http.StatusOK))
	ep := b.endpoint(t, rcv.URL, "subscription.created", "subscription.canceled")
	if _, err := b.pool.Exec(t.Context(), `
		UPDATE webhook_endpoints SET failures = $2, parked_until = now() + interval '10 seconds' WHERE id = $1`,
		ep.ID, parkAfter); err != nil {
		t.Fatal(err)
	}
	run(t, b.r)
	start := time.Now()
	b.churn(t, events)
	b.waitDeliveries(t, ep.ID, 2*time.Minute, "every event delivered after the park", all(events, store.DeliverySucceeded))
	held := testutil.ToFloat64(b.r.m.held.WithLabelValues("parked"))
	t.Logf("%v attempts held by the park; every delivery arrived %v after the events", held, time.Since(start).Round(time.Millisecond))
	if held == 0 {
		t.Error("got sheba_webhook_held_total{reason=\"parked\"} 0, want the jobs held by the park")
	}
}

// TestRetention runs two replicas with a retention of an hour, checked
// every second: the event whose deliveries ended more than an hour ago is
// deleted with its deliveries by River's periodic job, the old event still
// pending and the recent ended one are kept, and the job is enqueued once a
// period for the cluster, not once per replica.
func TestRetention(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const every = time.Second
	retain := func(o *Options) {
		o.Retention = time.Hour
		o.RetentionInterval = every
	}
	b := newTestbed(t, retain)
	ep := b.endpoint(t, "http://127.0.0.1:1/", "subscription.created", "subscription.canceled")
	b.churn(t, 3)
	b.fanOut(t)
	ds := b.deliveries(t, ep.ID)
	oldEnded, oldPending, recentEnded := ds[0].EventID, ds[1].EventID, ds[2].EventID
	if _, err := b.pool.Exec(ctx, `
		UPDATE webhook_deliveries SET state = 'succeeded', next_attempt_time = NULL WHERE event_id = ANY ($1)`,
		[]string{oldEnded, recentEnded}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `
		UPDATE webhook_events SET create_time = now() - interval '2 hours' WHERE id = ANY ($1)`,
		[]string{oldEnded, oldPending}); err != nil {
		t.Fatal(err)
	}
	// No delivery is worked: the endpoint's jobs are gone.
	if _, err := b.pool.Exec(ctx, `DELETE FROM river_job WHERE kind <> $1`, retentionArgs{}.Kind()); err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	retain(&o)
	start := time.Now()
	run(t, b.r)
	run(t, b.newRunner(t, o))
	b.waitDeliveries(t, ep.ID, 30*time.Second, "the old ended event deleted", func(ds []store.WebhookDelivery) bool {
		return len(ds) == 2
	})
	// A few more periods, to count the jobs.
	time.Sleep(3 * every)
	var jobs int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1`, retentionArgs{}.Kind()).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	periods := int(time.Since(start)/every) + 1
	t.Logf("%d retention jobs in %d periods of %v, two replicas", jobs, periods, every)
	if jobs > periods {
		t.Errorf("got %d retention jobs in %d periods, want at most one a period for the cluster", jobs, periods)
	}
	var got []string
	for _, d := range b.deliveries(t, ep.ID) {
		got = append(got, d.EventID)
	}
	if diff := cmp.Diff([]string{oldPending, recentEnded}, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("deliveries kept (-want +got):\n%s", diff)
	}
}
