package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/webhooks"
)

// The webhook scenarios run in this process, on databases of their own in
// the same Postgres: sheba's webhook runner (package webhooks) against local
// receivers, beside River alone and a naive retry loop (bench/README.md,
// docs/webhooks.md). Each reports its figures against the goals of issue 21.
const (
	scenWebhookIntermittent = "webhook-intermittent"
	scenWebhookOutage       = "webhook-outage"
	scenWebhookWriteCost    = "webhook-write-cost"
	scenWebhookBacklog      = "webhook-backlog"
	scenWebhookFleet        = "webhook-fleet"
	// scenWebhookPlans runs store's TestHotQueryPlans and writes the plans
	// beside the results.
	scenWebhookPlans = "webhook-plans"
)

// webhookScenarios are the webhook scenarios, in the order they run.
var webhookScenarios = []string{scenWebhookIntermittent, scenWebhookOutage, scenWebhookWriteCost, scenWebhookBacklog, scenWebhookFleet, scenWebhookPlans}

// figureRow is the row of a scenario that is not a load pair (a webhook
// scenario, failover): its figures, each against its goal where the issue
// sets one.
type figureRow struct {
	Name    string   `json:"name"`
	About   string   `json:"about"`
	Figures []figure `json:"figures"`
	Seconds float64  `json:"seconds"`
}

// figure is one measured number.
type figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit,omitempty"`
	// Goal, when set, is the bound the value must keep: "<=", ">=" or "=="
	// Bound.
	Goal  string  `json:"goal,omitempty"`
	Bound float64 `json:"bound,omitempty"`
	Met   *bool   `json:"met,omitempty"`
}

// fig returns a figure without a goal.
func fig(name string, value float64, unit string) figure {
	return figure{Name: name, Value: value, Unit: unit}
}

// goalFig returns a figure checked against goal bound.
func goalFig(name string, value float64, unit, goal string, bound float64) figure {
	met := false
	switch goal {
	case "<=":
		met = value <= bound
	case ">=":
		met = value >= bound
	case "==":
		met = value == bound
	}
	return figure{Name: name, Value: value, Unit: unit, Goal: goal, Bound: bound, Met: &met}
}

// goalSigns are how the table shows a goal's comparison.
var goalSigns = map[string]string{"<=": "≤", ">=": "≥", "==": "="}

func (f figure) String() string {
	s := fmt.Sprintf("%s %s%s", f.Name, fmtFigure(f.Value), f.Unit)
	if f.Met != nil {
		s += fmt.Sprintf(" (goal %s %s%s %s)", goalSigns[f.Goal], fmtFigure(f.Bound), f.Unit, mark(*f.Met))
	}
	return s
}

func fmtFigure(x float64) string {
	if x == float64(int64(x)) {
		return commas(int64(x))
	}
	return fmtRate(x)
}

// renderWebhookTable prints the webhook scenarios' rows.
func renderWebhookTable(rows []figureRow) string {
	return renderFigureTable("webhook scenario", rows)
}

// renderFigureTable prints rows under a table whose first column is
// heading.
func renderFigureTable(heading string, rows []figureRow) string {
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| %s | figures (goal) | goals met | took |\n|---|---|--:|--:|\n", heading)
	for _, r := range rows {
		met, goals := 0, 0
		for _, f := range r.Figures {
			if f.Met != nil {
				goals++
				if *f.Met {
					met++
				}
			}
		}
		fmt.Fprintf(&b, "| %s: %s | %s | %d of %d | %v |\n", r.Name, r.About, strings.Join(figureStrings(r.Figures), "; "), met, goals,
			(time.Duration(r.Seconds * float64(time.Second))).Round(time.Second))
	}
	return b.String()
}

// webhookEnv is what the webhook scenarios share: the cluster, and a
// migrated template database every scenario copies.
type webhookEnv struct {
	pg    *postgres
	admin *pgx.Conn
	opts  options
	logf  func(string, ...any)
}

// webhookTemplate is the migrated database, with accounts for the writes,
// that every scenario's database copies.
const webhookTemplate = "sheba_webhooks"

// writeAccounts is how many accounts without a subscription the template
// holds for webhook-write-cost: one per CreateSubscription.
func (e *webhookEnv) writeAccounts() int {
	return 3 * (e.opts.pairs*e.opts.webhookWrites + webhookWarmupWrites)
}

// runWebhookScenarios runs the selected webhook scenarios and returns their
// rows.
func (b *bench) runWebhookScenarios(ctx context.Context, selected []string, plansPath string, logf func(string, ...any)) ([]figureRow, error) {
	admin, err := pgx.Connect(ctx, b.pg.url("postgres"))
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	e := &webhookEnv{pg: b.pg, admin: admin, opts: b.opts, logf: logf}
	if err := e.prepare(ctx); err != nil {
		return nil, err
	}
	var rows []figureRow
	for _, name := range webhookScenarios {
		if !slices.Contains(selected, name) {
			continue
		}
		start := time.Now()
		var r figureRow
		switch name {
		case scenWebhookIntermittent:
			r, err = e.intermittent(ctx, webhookTemplate)
		case scenWebhookOutage:
			r, err = e.outage(ctx, webhookTemplate, e.opts.webhookOutage)
		case scenWebhookWriteCost:
			r, err = e.writeCost(ctx, webhookTemplate)
		case scenWebhookBacklog:
			r, err = e.backlog(ctx)
		case scenWebhookFleet:
			r, err = e.fleet(ctx)
		case scenWebhookPlans:
			r, err = b.plans(ctx, plansPath)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r.Name, r.Seconds = strings.TrimPrefix(name, "webhook-"), time.Since(start).Seconds()
		logf("%s: %s", name, strings.Join(figureStrings(r.Figures), "; "))
		rows = append(rows, r)
	}
	return rows, nil
}

func figureStrings(fs []figure) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.String()
	}
	return out
}

// prepare creates the template: migrated, with the accounts of the writes.
func (e *webhookEnv) prepare(ctx context.Context) error {
	if err := e.recreate(ctx, webhookTemplate, ""); err != nil {
		return err
	}
	url := e.pg.url(webhookTemplate)
	if err := store.MigrateUp(ctx, url); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, insertAccounts, accountIDPrefix, benchPasswordHash, e.writeAccounts())
	return err
}

// recreate drops database name and creates it again, as a copy of template
// if set.
func (e *webhookEnv) recreate(ctx context.Context, name, template string) error {
	if _, err := e.admin.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`); err != nil {
		return err
	}
	create := `CREATE DATABASE ` + pgx.Identifier{name}.Sanitize()
	if template != "" {
		create += ` TEMPLATE ` + pgx.Identifier{template}.Sanitize()
	}
	_, err := e.admin.Exec(ctx, create)
	return err
}

// webhookDB is a scenario's database, with the pools sheba would open on
// it: the API's, which the business writes (and their events) take, and
// the webhook runner's own.
type webhookDB struct {
	url   string
	api   *pgxpool.Pool
	hooks *pgxpool.Pool
	st    *store.Store // on api
}

// scenarioDatabase is the name of the database a scenario works on.
const scenarioDatabase = "sheba_webhooks_run"

// database creates the scenario's database as a copy of template and opens
// its pools, of the sizes of sheba's defaults.
func (e *webhookEnv) database(ctx context.Context, template string) (*webhookDB, error) {
	return e.databaseNamed(ctx, scenarioDatabase, template)
}

// databaseNamed is database under another name, for a scenario that needs
// several at once.
func (e *webhookEnv) databaseNamed(ctx context.Context, name, template string) (*webhookDB, error) {
	if err := e.recreate(ctx, name, template); err != nil {
		return nil, err
	}
	d := &webhookDB{url: e.pg.url(name)}
	var err error
	if d.api, err = store.OpenPool(ctx, d.url, config.Default().Database.MaxConns, tracenoop.NewTracerProvider()); err != nil {
		return nil, err
	}
	if d.hooks, err = e.hooksPool(ctx, d.url); err != nil {
		d.api.Close()
		return nil, err
	}
	d.st = store.New(d.api)
	return d, nil
}

// hooksPool opens a pool of the size of webhooks.database_max_conns, as
// each sheba replica opens for its runner.
func (e *webhookEnv) hooksPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	return store.OpenPool(ctx, url, config.Default().Webhooks.DatabaseMaxConns, tracenoop.NewTracerProvider())
}

func (d *webhookDB) close() {
	d.hooks.Close()
	d.api.Close()
}

// runnerOptions are the runner's options with the defaults of the webhooks
// section, private targets allowed (the receivers are on 127.0.0.1).
func runnerOptions() webhooks.Options {
	c := config.Default().Webhooks
	return webhooks.Options{
		Timeout: c.Timeout, MaxAttempts: c.MaxAttempts, BackoffBase: c.Backoff.Base, BackoffMax: c.Backoff.Max,
		PerEndpointConcurrency: c.PerEndpointConcurrency,
		AllowPrivateNetworks:   true,
		Log:                    slog.New(slog.DiscardHandler),
	}
}

// startRunner builds a runner on pool with o and runs it until the
// returned stop is called; stop returns Run's error. It returns once the
// runner has delivered an event (warmUp).
func startRunner(ctx context.Context, pool *pgxpool.Pool, o webhooks.Options) (*webhooks.Runner, func() error, error) {
	r, err := webhooks.New(pool, store.New(pool), o)
	if err != nil {
		return nil, nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx, 10*time.Second) }()
	stop := func() error {
		cancel()
		return <-done
	}
	if err := warmUp(ctx, store.New(pool), r); err != nil {
		return nil, nil, stopRunner(stop, fmt.Errorf("warm-up: %w", err))
	}
	return r, stop, nil
}

// warmUpEvent is the type of the warm-up's event, which no scenario sends.
const warmUpEvent = "subscription.canceled"

// warmUp delivers one event through r to an endpoint of its own, deleted
// afterwards. River takes a second or two from its start to its first
// fetch: what is measured after the warm-up does not wait for that.
func warmUp(ctx context.Context, st *store.Store, r *webhooks.Runner) error {
	rc := newBenchReceiver()
	defer rc.srv.Close()
	rc.expect(1)
	ep, err := createBenchEndpoint(ctx, st, rc.srv.URL, warmUpEvent)
	if err != nil {
		return err
	}
	if err := publish(ctx, st, r, warmUpEvent); err != nil {
		return err
	}
	if err := rc.wait(ctx, time.Minute); err != nil {
		return err
	}
	return st.DeleteWebhookEndpoint(ctx, ep.Owner, ep.ID)
}

// benchReceiver is a local endpoint that answers 2xx, and counts what it
// gets: requests, those in flight at most, the events answered 2xx and the
// delay of each from its event's timestamp. It answers 503 while down, 500
// at random to a share of the requests (failRate) and, when slow is set,
// after that long.
type benchReceiver struct {
	srv      *httptest.Server
	failRate float64
	slow     time.Duration

	down        atomic.Bool
	requests    atomic.Int64
	downReqs    atomic.Int64 // requests that came while down
	inflight    atomic.Int64
	maxInflight atomic.Int64

	mu       sync.Mutex
	ok       map[string]int // 2xx per webhook-id
	firstOK  time.Time      // when the first 2xx was answered
	latency  []time.Duration
	complete chan struct{} // closed once want events got a 2xx
	want     int
}

func newBenchReceiver() *benchReceiver {
	r := &benchReceiver{ok: map[string]int{}, complete: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

func (r *benchReceiver) serve(w http.ResponseWriter, req *http.Request) {
	n := r.inflight.Add(1)
	defer r.inflight.Add(-1)
	for old := r.maxInflight.Load(); n > old && !r.maxInflight.CompareAndSwap(old, n); old = r.maxInflight.Load() {
	}
	r.requests.Add(1)
	body, _ := io.ReadAll(req.Body)
	if r.slow > 0 {
		time.Sleep(r.slow)
	}
	switch {
	case r.down.Load():
		r.downReqs.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	case r.failRate > 0 && rand.Float64() < r.failRate:
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	var ev struct {
		Timestamp time.Time `json:"timestamp"`
	}
	_ = json.Unmarshal(body, &ev)
	at := time.Now()
	r.mu.Lock()
	id := req.Header.Get("webhook-id")
	r.ok[id]++
	if r.firstOK.IsZero() {
		r.firstOK = at
	}
	if r.ok[id] == 1 {
		r.latency = append(r.latency, at.Sub(ev.Timestamp))
		if len(r.ok) == r.want {
			close(r.complete)
		}
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// expect makes wait return once n events have had a 2xx.
func (r *benchReceiver) expect(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.want = n
	if len(r.ok) >= n {
		close(r.complete)
	}
}

// wait waits until the events of expect have had a 2xx, or limit passes.
func (r *benchReceiver) wait(ctx context.Context, limit time.Duration) error {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-r.complete:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		got, _ := r.delivered()
		return fmt.Errorf("%d of %d events delivered after %v", got, r.want, limit)
	}
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

// deliveredAll adds up delivered over rs.
func deliveredAll(rs []*benchReceiver) (events, duplicates int) {
	for _, r := range rs {
		e, d := r.delivered()
		events, duplicates = events+e, duplicates+d
	}
	return events, duplicates
}

// first returns when the receiver answered its first 2xx (zero: none
// yet).
func (r *benchReceiver) first() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.firstOK
}

// latencies returns the delay of each event's first 2xx after its event.
func (r *benchReceiver) latencies() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.latency)
}

// receivers starts n receivers, each set up by setup.
func receivers(n int, setup func(*benchReceiver)) []*benchReceiver {
	rs := make([]*benchReceiver, n)
	for i := range rs {
		rs[i] = newBenchReceiver()
		if setup != nil {
			setup(rs[i])
		}
	}
	return rs
}

func closeReceivers(rs []*benchReceiver) {
	for _, r := range rs {
		r.srv.Close()
	}
}

// createBenchEndpoints registers an endpoint of eventType per receiver.
func createBenchEndpoints(ctx context.Context, st *store.Store, eventType string, rs []*benchReceiver) error {
	for _, r := range rs {
		if _, err := createBenchEndpoint(ctx, st, r.srv.URL, eventType); err != nil {
			return err
		}
	}
	return nil
}

// noEndpointLimit is the endpoint limit of the bench's one owner: none
// that it reaches (webhooks.max_endpoints is for API keys).
const noEndpointLimit = 1 << 30

func createBenchEndpoint(ctx context.Context, st *store.Store, url, eventType string) (store.WebhookEndpoint, error) {
	return st.CreateWebhookEndpoint(ctx, store.WebhookEndpoint{
		Owner: "bench", URL: url, EventTypes: []string{eventType},
		Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	}, noEndpointLimit)
}

// publish publishes one subscription.created event in its own
// transaction on the API's pool, as CreateSubscription does.
func publish(ctx context.Context, st *store.Store, r *webhooks.Runner, eventType string) error {
	sub := &shebav1.Subscription{Id: accountID(1), Plan: "pro", Status: shebav1.SubscriptionStatus_SUBSCRIPTION_STATUS_ACTIVE}
	return st.InTx(ctx, func(ctx context.Context) error { return r.Publish(ctx, eventType, sub) })
}

// eightWays calls fn n times from 8 goroutines, as 8 concurrent API calls
// would, and returns the first error.
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

// deliveryLimit bounds the wait for n deliveries: far more than the
// slowest machine needs, so that only a stuck run hits it.
func deliveryLimit(n int) time.Duration {
	return 2*time.Minute + time.Duration(n)*20*time.Millisecond
}

// intermittent publishes -webhook-events events from 8 goroutines to
// -webhook-endpoints endpoints, each answering 500 to -webhook-fail of the
// requests at random, while the runner delivers them; then, as the
// baseline, River works as many no-op jobs, inserted as the fan-out
// inserts the deliveries' jobs. On a copy of template.
func (e *webhookEnv) intermittent(ctx context.Context, template string) (figureRow, error) {
	o := e.opts
	rep := figureRow{About: fmt.Sprintf("%s events to %d endpoints, each answering 500 to %.0f%% at random, against River's no-op jobs",
		commas(int64(o.webhookEvents)), o.webhookEndpoints, o.webhookFail*100)}
	d, err := e.database(ctx, template)
	if err != nil {
		return rep, err
	}
	defer d.close()
	rs := receivers(o.webhookEndpoints, func(r *benchReceiver) {
		r.failRate = o.webhookFail
		r.expect(o.webhookEvents)
	})
	defer closeReceivers(rs)
	if err := createBenchEndpoints(ctx, d.st, "subscription.created", rs); err != nil {
		return rep, err
	}
	r, stop, err := startRunner(ctx, d.hooks, runnerOptions())
	if err != nil {
		return rep, err
	}
	deliveries := o.webhookEvents * o.webhookEndpoints
	start := time.Now()
	err = eightWays(o.webhookEvents, func() error { return publish(ctx, d.st, r, "subscription.created") })
	for _, rc := range rs {
		if err != nil {
			break
		}
		err = rc.wait(ctx, deliveryLimit(deliveries))
	}
	took := time.Since(start)
	if err := stopRunner(stop, err); err != nil {
		return rep, err
	}
	got, dups := deliveredAll(rs)
	jobs, err := riverNoop(ctx, d, deliveries, o.webhookEndpoints)
	if err != nil {
		return rep, err
	}
	rate, riverRate := float64(deliveries)/took.Seconds(), float64(deliveries)/jobs.Seconds()
	rep.Figures = []figure{
		goalFig("delivered/s over River's no-op jobs/s", round2(rate/riverRate), "", ">=", 0.8),
		fig("delivered/s", round1(rate), ""),
		fig("River no-op jobs/s", round1(riverRate), ""),
		goalFig("duplicates", float64(dups), "", "==", 0),
		goalFig("delivered", float64(got), "", "==", float64(deliveries)),
	}
	return rep, nil
}

// stopRunner stops the runner and returns err, or the stop's error.
func stopRunner(stop func() error, err error) error {
	if serr := stop(); err == nil {
		err = serr
	}
	return err
}

func round1(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }
func round2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }

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

// riverNoop inserts n no-op jobs, perTx a transaction from 8 goroutines
// on the API's pool (as the fan-out inserts an event's delivery jobs), while
// a River client configured as sheba's runner (its pool, workers and poll)
// works them, and returns the time until the last is done.
func riverNoop(ctx context.Context, d *webhookDB, n, perTx int) (time.Duration, error) {
	var done atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{done: &done})
	client, err := river.NewClient(riverpgxv5.New(d.hooks), &river.Config{
		Queues:            map[string]river.QueueConfig{"bench": {MaxWorkers: 50}},
		Workers:           workers,
		FetchPollInterval: time.Second,
		FetchCooldown:     100 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return 0, err
	}
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	defer client.Stop(context.WithoutCancel(ctx)) //nolint:errcheck // the result is measured
	jobs := make([]river.InsertManyParams, perTx)
	for i := range jobs {
		jobs[i] = river.InsertManyParams{Args: noopArgs{}, InsertOpts: &river.InsertOpts{Queue: "bench"}}
	}
	// The warm-up, as startRunner's: one job worked.
	if _, err := client.Insert(ctx, noopArgs{}, &river.InsertOpts{Queue: "bench"}); err != nil {
		return 0, err
	}
	if err := waitWorked(ctx, &done, 1); err != nil {
		return 0, fmt.Errorf("warm-up: %w", err)
	}
	done.Store(0)
	start := time.Now()
	err = eightWays(n/perTx, func() error {
		return pgx.BeginFunc(ctx, d.api, func(tx pgx.Tx) error {
			_, err := client.InsertManyFastTx(ctx, tx, jobs)
			return err
		})
	})
	if err != nil {
		return 0, err
	}
	if err := waitWorked(ctx, &done, n/perTx*perTx); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// waitWorked waits until done counts n jobs, for deliveryLimit(n) at most.
func waitWorked(ctx context.Context, done *atomic.Int64, n int) error {
	limit := deliveryLimit(n)
	deadline := time.Now().Add(limit)
	for done.Load() < int64(n) {
		if time.Now().After(deadline) {
			return fmt.Errorf("River worked %d of %d jobs in %v", done.Load(), n, limit)
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}
