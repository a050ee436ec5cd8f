package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

// envPlans names the variable that, set to a path, makes TestHotQueryPlans
// write every plan it checked there (make bench writes them beside its
// results, bench/README.md).
const envPlans = "SHEBA_PLANS"

// planSeed is the shape of the webhook tables a plan is checked against.
type planSeed struct {
	name string
	// down is how many of the big endpoints have been failing for window:
	// their deliveries of that time are pending, parked, and all but a
	// queue share waiting.
	down   int
	window time.Duration
}

// planSeeds are a service in its steady state, where nearly every delivery
// has ended, and one with a backlog of 100k pending deliveries.
var planSeeds = []planSeed{
	{name: "steady", down: 1, window: 2 * 24 * time.Hour},
	{name: "backlog", down: 4, window: 7 * 24 * time.Hour},
}

// TestHotQueryPlans runs every query of the webhook delivery path
// (docs/webhooks.md#how-delivery-works) through the store, against 180,000
// deliveries of 30,000 events to 1,000 endpoints, with the planner's custom
// plans and its generic ones (pgx prepares every statement, so a connection
// may switch to the generic plan after five runs). It fails if any plan,
// the statements of foreign keys and cascades included (auto_explain's
// nested statements), reads webhook_deliveries or webhook_events whole: each
// must find its rows through an index.
func TestHotQueryPlans(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	report := map[string]string{}
	for _, seed := range planSeeds {
		t.Run(seed.name, func(t *testing.T) {
			t.Parallel()
			dbURL := storetest.NewDatabase(t)
			ids := seedPlanTables(t, dbURL, seed)
			var log explainLog
			s := store.New(explainPool(t, dbURL, &log))
			var out strings.Builder
			fmt.Fprintf(&out, "### %s: %s\n", seed.name, ids.shape)
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				for _, q := range hotQueries(ids) {
					plans, err := explainQuery(t.Context(), s, &log, mode, q.run)
					if err != nil {
						t.Errorf("%s: %v", q.name, err)
						continue
					}
					fmt.Fprintf(&out, "\n## %s (%s)\n", q.name, mode)
					for _, p := range plans {
						fmt.Fprintf(&out, "\n%s\n", p)
						if m := wholeTableScan.FindAllString(p, -1); m != nil {
							t.Errorf("%s, %s: %q in the plan of\n%s", q.name, mode, m, p)
						}
					}
				}
			}
			mu.Lock()
			report[seed.name] = out.String()
			mu.Unlock()
		})
	}
	t.Cleanup(func() {
		path := os.Getenv(envPlans)
		if path == "" || len(report) < len(planSeeds) {
			return
		}
		var b strings.Builder
		b.WriteString("# Plans of the webhook delivery path's queries (store TestHotQueryPlans)\n\n")
		for _, seed := range planSeeds {
			b.WriteString(report[seed.name] + "\n")
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Errorf("write the plans: %v", err)
		}
	})
}

// wholeTableScan matches a plan node that reads a big webhook table whole.
// webhook_endpoints may be read whole: a key holds at most
// webhooks.max_endpoints of them, and the planner reads a table of a few
// pages faster than through an index.
var wholeTableScan = regexp.MustCompile(`Seq Scan on webhook_(deliveries|events)\b`)

// planIDs are the rows of the seed the queries run on.
type planIDs struct {
	shape string // what the seed holds, in a few words
	// down is an endpoint that has been failing: parked, its deliveries
	// pending, most waiting for a place in the queue.
	down string
	// downEvent is one of its deliveries that has a place in the queue.
	downEvent string
	// healthy is a big endpoint that takes everything.
	healthy string
}

// hotQuery is one step of the delivery path.
type hotQuery struct {
	name string
	run  func(context.Context, *store.Store) error
}

// hotQueries are the steps of the delivery path, each as the runner calls
// the store (webhooks: Publish, expand, deliver, record and the retention
// job); each runs in a transaction that is rolled back.
func hotQueries(ids planIDs) []hotQuery {
	newEvent := func(ctx context.Context, s *store.Store) (string, error) {
		id := uuid.NewString()
		return id, s.CreateWebhookEvent(ctx, store.WebhookEvent{ID: id, Type: "subscription.created", Body: []byte(`{}`), CreateTime: time.Now()})
	}
	const queueShare = 32
	return []hotQuery{
		{"the change's event: CreateWebhookEvent", func(ctx context.Context, s *store.Store) error {
			_, err := newEvent(ctx, s)
			return err
		}},
		{"fan-out, two batches of 500 endpoints with their queue share: ExpandWebhookEvent", func(ctx context.Context, s *store.Store) error {
			id, err := newEvent(ctx, s)
			if err != nil {
				return err
			}
			b, err := s.ExpandWebhookEvent(ctx, id, "", 500, queueShare)
			if err != nil {
				return err
			}
			_, err = s.ExpandWebhookEvent(ctx, id, b.Last, 500, queueShare)
			return err
		}},
		{"the delivery's read: GetDeliveryAttempt", func(ctx context.Context, s *store.Store) error {
			_, err := s.GetDeliveryAttempt(ctx, ids.down, ids.downEvent)
			return err
		}},
		{"the probe of a parked endpoint: ClaimWebhookProbe", func(ctx context.Context, s *store.Store) error {
			_, err := s.ClaimWebhookProbe(ctx, ids.down, 15*time.Second)
			return err
		}},
		{"a slot of the endpoint's cap, taken and given back: AcquireWebhookLease, ReleaseWebhookLease", func(ctx context.Context, s *store.Store) error {
			lease, ok, err := s.AcquireWebhookLease(ctx, ids.healthy, 8, time.Minute)
			if err != nil || !ok {
				return errors.Join(err, errors.New("no slot free"))
			}
			return s.ReleaseWebhookLease(ctx, lease)
		}},
		{"the leases of a replica that died: DeleteExpiredWebhookLeases", func(ctx context.Context, s *store.Store) error {
			_, err := s.DeleteExpiredWebhookLeases(ctx)
			return err
		}},
		{"a throttled attempt: PostponeDelivery", func(ctx context.Context, s *store.Store) error {
			return s.PostponeDelivery(ctx, ids.down, ids.downEvent, time.Now().Add(time.Second))
		}},
		{"the attempt counted: StartDeliveryAttempt", func(ctx context.Context, s *store.Store) error {
			_, err := s.StartDeliveryAttempt(ctx, ids.down, ids.downEvent)
			return err
		}},
		{"the outcome, ending the delivery, its place given to the oldest waiting one, the endpoint's health: LockWebhookEndpointHealth, FinishDeliveryAttempt, QueueWaitingDelivery, UpdateWebhookEndpointHealth", func(ctx context.Context, s *store.Store) error {
			if _, err := s.LockWebhookEndpointHealth(ctx, ids.down); err != nil {
				return err
			}
			if _, err := s.FinishDeliveryAttempt(ctx, ids.down, ids.downEvent, store.DeliveryResult{State: store.DeliverySucceeded, HTTPStatus: 200, At: time.Now()}); err != nil {
				return err
			}
			if _, ok, err := s.QueueWaitingDelivery(ctx, ids.down); err != nil || !ok {
				return errors.Join(err, errors.New("no delivery waits"))
			}
			return s.UpdateWebhookEndpointHealth(ctx, ids.down, store.EndpointHealth{})
		}},
		{"a failed attempt parking the endpoint: FinishDeliveryAttempt, UpdateWebhookEndpointHealth", func(ctx context.Context, s *store.Store) error {
			next := time.Now().Add(time.Minute)
			if _, err := s.FinishDeliveryAttempt(ctx, ids.down, ids.downEvent, store.DeliveryResult{State: store.DeliveryPending, HTTPStatus: 503, Error: "HTTP 503", Next: &next, At: time.Now()}); err != nil {
				return err
			}
			return s.UpdateWebhookEndpointHealth(ctx, ids.down, store.EndpointHealth{Failures: 26, ParkFor: time.Minute, EndProbe: true})
		}},
		{"ListWebhookDeliveries, first and second page of the failing endpoint", func(ctx context.Context, s *store.Store) error {
			page, err := s.ListWebhookDeliveries(ctx, ids.down, 50, nil)
			if err != nil || len(page) == 0 {
				return errors.Join(err, errors.New("empty page"))
			}
			last := page[len(page)-1]
			_, err = s.ListWebhookDeliveries(ctx, ids.down, 50, &store.Cursor{CreateTime: last.CreateTime, ID: last.EventID})
			return err
		}},
		{"ListWebhookDeliveries, first page of the healthy endpoint", func(ctx context.Context, s *store.Store) error {
			_, err := s.ListWebhookDeliveries(ctx, ids.healthy, 50, nil)
			return err
		}},
		{"the backlog gauge: CountPendingDeliveries", func(ctx context.Context, s *store.Store) error {
			_, err := s.CountPendingDeliveries(ctx)
			return err
		}},
		{"retention, one batch of 1,000 events, their deliveries by cascade: DeleteEndedWebhookEvents", func(ctx context.Context, s *store.Store) error {
			n, err := s.DeleteEndedWebhookEvents(ctx, time.Now().Add(-7*24*time.Hour), 1000)
			if err == nil && n == 0 {
				err = errors.New("deleted nothing")
			}
			return err
		}},
		{"the event stream's hub, a page from the start: ListEvents", func(ctx context.Context, s *store.Store) error {
			page, err := s.ListEvents(ctx, store.EventPosition{}, nil, 500)
			if err == nil && len(page.Events) != 500 {
				err = fmt.Errorf("got %d events, want 500", len(page.Events))
			}
			return err
		}},
		{"a stream catching up, one type: ListEvents", func(ctx context.Context, s *store.Store) error {
			_, err := s.ListEvents(ctx, store.EventPosition{}, []string{"subscription.canceled"}, 256)
			return err
		}},
		{"a 410: DisableWebhookEndpoint", func(ctx context.Context, s *store.Store) error {
			return s.DisableWebhookEndpoint(ctx, ids.down, "410 Gone")
		}},
	}
}

// errRollback ends the transaction of a checked query.
var errRollback = errors.New("rolled back")

// explainQuery runs run in a transaction that it rolls back, with the
// planner's plan_cache_mode set to mode, and returns the plan of each
// distinct statement run made, in order: a statement run once a row (a
// foreign key's check) is shown once.
func explainQuery(ctx context.Context, s *store.Store, log *explainLog, mode string, run func(context.Context, *store.Store) error) ([]string, error) {
	log.take()
	err := s.InTx(ctx, func(ctx context.Context) error {
		tx, _ := store.TxFromContext(ctx)
		if _, err := tx.Exec(ctx, setPlanMode, mode); err != nil {
			return err
		}
		if err := run(ctx, s); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		return nil, err
	}
	// Taken once the transaction has ended: the server ends a statement's
	// executor, and auto_explain sends its plan, only when the next
	// statement replaces its portal or the transaction ends.
	seen := map[string]bool{}
	var plans []string
	for _, p := range log.take() {
		shape := planShape(p)
		if strings.Contains(p, setPlanMode) || seen[shape] {
			continue
		}
		seen[shape] = true
		plans = append(plans, p)
	}
	return plans, nil
}

// setPlanMode sets plan_cache_mode for the rest of the transaction.
const setPlanMode = `SELECT set_config('plan_cache_mode', $1, true)`

// planShape is what two runs of a statement's plan share: the statement
// and the nodes, without their costs, rows, times and buffers.
func planShape(plan string) string {
	var b strings.Builder
	nodes := false
	for line := range strings.Lines(plan) {
		node, _, isNode := strings.Cut(line, "  (cost=")
		nodes = nodes || isNode
		switch {
		case isNode:
			b.WriteString(node + "\n")
		case !nodes:
			b.WriteString(line)
		}
	}
	return b.String()
}

// explainLog collects the plans auto_explain sends as notices. It is safe
// for concurrent use.
type explainLog struct {
	mu    sync.Mutex
	plans []string
}

func (l *explainLog) add(plan string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.plans = append(l.plans, plan)
}

// take returns the plans collected since the last take.
func (l *explainLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.plans
	l.plans = nil
	return p
}

// explainPool returns a pool of one connection on which auto_explain sends
// the plan of every statement, nested ones included, with its actual rows,
// times and buffers, to log.
func explainPool(tb testing.TB, dbURL string, log *explainLog) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = 1
	cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if _, plan, ok := strings.Cut(n.Message, "plan:\n"); ok {
			log.add(plan)
		}
	}
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		// LOAD needs a superuser: the test cluster's.
		_, err := conn.Exec(ctx, `
			LOAD 'auto_explain';
			SET auto_explain.log_min_duration = 0;
			SET auto_explain.log_analyze = on;
			SET auto_explain.log_buffers = on;
			SET auto_explain.log_timing = on;
			SET auto_explain.log_nested_statements = on;
			SET auto_explain.log_level = notice`)
		return err
	}
	pool, err := pgxpool.NewWithConfig(tb.Context(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// Sizes of the plan seed.
const (
	planOwners    = 20 // each with 50 endpoints, webhooks.max_endpoints
	planEndpoints = 1000
	planEvents    = 30000
	planDays      = 8 // events over that many days: retention finds the oldest
	// planBig endpoints receive every event; each event also goes to one
	// of the others.
	planBig = 5
)

// seedPlanTables fills the webhook tables of the database at dbURL in SQL,
// as seed describes, vacuums and analyzes them as autovacuum would, and
// returns the rows the queries use.
func seedPlanTables(tb testing.TB, dbURL string, seed planSeed) planIDs {
	tb.Helper()
	ctx := tb.Context()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	exec := func(sql string, args ...any) {
		tb.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			tb.Fatalf("seed: %v\n%s", err, sql)
		}
	}
	exec(`
		INSERT INTO webhook_endpoints (owner, url, event_types, secret)
		SELECT 'owner-' || i % $1, 'https://example.com/hook/' || i,
		       ARRAY['account.created', 'subscription.created', 'subscription.canceled'], 'whsec_x'
		FROM generate_series(0, $2 - 1) AS i`, planOwners, planEndpoints)
	exec(`
		INSERT INTO webhook_events (id, type, body, create_time, endpoints_snapshot)
		SELECT gen_random_uuid(), 'subscription.created', '{}', now() - ($1 - i) * $2 * interval '1 day' / $1, pg_current_snapshot()
		FROM generate_series(1, $1) AS i`, planEvents, planDays)
	// The k-th endpoint by id is down if k < down; its deliveries of the
	// window are pending, the older ones failed. Every other delivery
	// succeeded but those of the last minute, still pending.
	exec(`
		WITH ev AS (SELECT id, create_time, row_number() OVER (ORDER BY create_time) AS n FROM webhook_events),
		     ep AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM webhook_endpoints),
		     pair AS (
		         SELECT ev.id AS event_id, ev.create_time, ep.id AS endpoint_id, ep.k,
		                ep.k < $2 AND ev.create_time > now() - $3 * interval '1 second' AS backlog,
		                ev.create_time > now() - interval '1 minute' AS recent
		         FROM ev
		         CROSS JOIN LATERAL (SELECT generate_series(0, $1 - 1) UNION ALL SELECT $1 + ev.n % ($4 - $1)) AS t (k)
		         JOIN ep ON ep.k = t.k)
		INSERT INTO webhook_deliveries (endpoint_id, event_id, state, attempts, last_http_status, last_attempt_time, next_attempt_time, create_time)
		SELECT endpoint_id, event_id,
		       CASE WHEN backlog OR recent THEN 'pending' WHEN k < $2 THEN 'failed' ELSE 'succeeded' END,
		       CASE WHEN k < $2 THEN 5 ELSE 1 END,
		       CASE WHEN k < $2 THEN 503 ELSE 200 END,
		       create_time + interval '1 second',
		       CASE WHEN backlog THEN now() + interval '10 minutes' WHEN recent THEN create_time END,
		       create_time
		FROM pair`, planBig, seed.down, seed.window.Seconds(), planEndpoints)
	// A queue share of each endpoint's pending deliveries has its place in
	// the queue, the oldest; the others wait.
	exec(`
		UPDATE webhook_deliveries d SET queued = false
		FROM (SELECT endpoint_id, event_id, row_number() OVER (PARTITION BY endpoint_id ORDER BY create_time, event_id) AS r
		      FROM webhook_deliveries WHERE state = 'pending') p
		WHERE (d.endpoint_id, d.event_id) = (p.endpoint_id, p.event_id) AND p.r > 32`)
	exec(`
		UPDATE webhook_endpoints ep
		SET queued = (SELECT count(*) FROM webhook_deliveries d WHERE d.endpoint_id = ep.id AND d.state = 'pending' AND d.queued)`)
	exec(`
		UPDATE webhook_endpoints SET failures = 25, parked_until = now() + interval '10 minutes'
		WHERE id IN (SELECT id FROM webhook_endpoints ORDER BY id LIMIT $1)`, seed.down)
	exec(`VACUUM ANALYZE webhook_endpoints, webhook_events, webhook_deliveries`)

	var ids planIDs
	var deliveries, pending int
	err = conn.QueryRow(ctx, `
		SELECT (SELECT id FROM webhook_endpoints ORDER BY id LIMIT 1),
		       (SELECT id FROM webhook_endpoints ORDER BY id OFFSET $1 - 1 LIMIT 1),
		       (SELECT count(*) FROM webhook_deliveries),
		       (SELECT count(*) FROM webhook_deliveries WHERE state = 'pending')`, planBig).Scan(&ids.down, &ids.healthy, &deliveries, &pending)
	if err == nil {
		err = conn.QueryRow(ctx, `
			SELECT event_id FROM webhook_deliveries
			WHERE endpoint_id = $1 AND state = 'pending' AND queued
			ORDER BY create_time LIMIT 1`, ids.down).Scan(&ids.downEvent)
	}
	if err != nil {
		tb.Fatal(err)
	}
	ids.shape = fmt.Sprintf("%d endpoints (%d down for %v), %d events over %d days, %d deliveries, %d of them pending",
		planEndpoints, seed.down, seed.window, planEvents, planDays, deliveries, pending)
	tb.Log(ids.shape)
	return ids
}
