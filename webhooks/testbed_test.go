package webhooks

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"
	"google.golang.org/protobuf/proto"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
	"github.com/shebasvc/sheba/webhooks/throttle"
)

// testOptions are the options of the runners of these tests: every wait
// short, so that a test takes seconds, and private networks allowed, for
// the receivers on 127.0.0.1. The timeout is long, so that no answer of a
// healthy receiver times out on a loaded machine; the tests of timeouts
// set their own.
func testOptions() Options {
	return Options{
		Timeout:                10 * time.Second,
		MaxAttempts:            20,
		BackoffBase:            50 * time.Millisecond,
		BackoffMax:             400 * time.Millisecond,
		PerEndpointConcurrency: 4,
		AllowPrivateNetworks:   true,
		ThrottleWindow:         time.Second,
		PollInterval:           50 * time.Millisecond,
		BacklogInterval:        100 * time.Millisecond,
	}
}

// closedPort returns a port on 127.0.0.1 that nobody listens on any more.
func closedPort(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	lis.Close()
	return port
}

// testOwner owns the endpoints of the tests (an API key id).
const testOwner = "test"

// testbed is a fresh database, the store the services publish through, and
// a Runner over them that works no job until run is called.
type testbed struct {
	pool *pgxpool.Pool
	st   *store.Store
	r    *Runner
	reg  *prometheus.Registry // r's metrics
	log  *attemptLog          // r's attempt lines
}

// newTestbed builds a testbed whose runner has testOptions changed by
// adjust (if not nil).
func newTestbed(t *testing.T, adjust func(*Options)) *testbed {
	t.Helper()
	pool := storetest.NewPool(t)
	b := &testbed{pool: pool, st: store.New(pool), reg: prometheus.NewRegistry(), log: &attemptLog{}}
	o := testOptions()
	o.Registerer = b.reg
	o.Log = slog.New(b.log)
	if adjust != nil {
		adjust(&o)
	}
	b.r = b.newRunner(t, o)
	return b
}

// newRunner returns a Runner over the testbed's database, as a replica
// builds it: the testbed's first, or another one, or sheba after a restart.
func (b *testbed) newRunner(t *testing.T, o Options) *Runner {
	t.Helper()
	r, err := New(b.pool, b.st, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

// run works jobs with r until the test ends or stop is called. stop
// returns what Run returned, for the caller to judge; if the test does not
// call it, the cleanup stops the runner and fails the test if Run returned
// an error. Receivers made before run outlive it, so no attempt is sent to
// a closed receiver.
func run(t *testing.T, r *Runner) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, 5*time.Second) }()
	halt := sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	var called atomic.Bool
	t.Cleanup(func() {
		if err := halt(); err != nil && !called.Load() {
			t.Errorf("Run: %v", err)
		}
	})
	return func() error {
		called.Store(true)
		return halt()
	}
}

// testSecret returns a fresh secret of the form the services make.
func testSecret() string {
	key := make([]byte, 32)
	rand.Read(key)
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// endpoint registers url for eventTypes with a fresh secret, through the
// store as CreateWebhookEndpoint does.
func (b *testbed) endpoint(t *testing.T, url string, eventTypes ...string) store.WebhookEndpoint {
	t.Helper()
	e, err := b.st.CreateWebhookEndpoint(t.Context(), store.WebhookEndpoint{
		Owner:      testOwner,
		URL:        url,
		EventTypes: eventTypes,
		Secret:     testSecret(),
	}, 1000)
	if err != nil {
		t.Fatalf("create endpoint %s: %v", url, err)
	}
	return e
}

// publish announces a change of resource as the services do: Publish in
// the transaction of the change.
func (b *testbed) publish(t *testing.T, eventType string, resource proto.Message) {
	t.Helper()
	err := b.st.InTx(t.Context(), func(ctx context.Context) error {
		return b.r.Publish(ctx, eventType, resource)
	})
	if err != nil {
		t.Fatalf("Publish(%s): %v", eventType, err)
	}
}

// churn publishes n subscription events of one account, created and
// canceled in turn.
func (b *testbed) churn(t *testing.T, n int) {
	t.Helper()
	account := uuid.NewString()
	for i := range n {
		eventType, status := "subscription.created", shebav1.SubscriptionStatus_SUBSCRIPTION_STATUS_ACTIVE
		if i%2 == 1 {
			eventType, status = "subscription.canceled", shebav1.SubscriptionStatus_SUBSCRIPTION_STATUS_CANCELED
		}
		b.publish(t, eventType, &shebav1.Subscription{Id: uuid.NewString(), AccountId: account, Plan: "pro", Status: status})
	}
}

// deliveries returns every delivery to the endpoint, newest first.
func (b *testbed) deliveries(t *testing.T, endpointID string) []store.WebhookDelivery {
	t.Helper()
	ds, err := b.st.ListWebhookDeliveries(t.Context(), endpointID, 1000, nil)
	if err != nil {
		t.Fatalf("list deliveries: %v", err)
	}
	return ds
}

// waitDeliveries polls the endpoint's deliveries until ok holds for them
// and returns them; it fails the test, showing them, if that takes longer
// than d. The bounds are generous: they are reached only when a test fails.
func (b *testbed) waitDeliveries(t *testing.T, endpointID string, d time.Duration, what string, ok func([]store.WebhookDelivery) bool) []store.WebhookDelivery {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ds := b.deliveries(t, endpointID)
		if ok(ds) {
			return ds
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; deliveries %+v", what, d, ds)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// all returns whether there are n deliveries, each in state.
func all(n int, state store.DeliveryState) func([]store.WebhookDelivery) bool {
	return func(ds []store.WebhookDelivery) bool {
		for _, d := range ds {
			if d.State != state {
				return false
			}
		}
		return len(ds) == n
	}
}

// attemptLog is a slog handler that keeps the attributes of each "webhook
// attempt" line, the one line per attempt that Options.Log gets. It is safe
// for concurrent use.
type attemptLog struct {
	mu    sync.Mutex
	lines []map[string]any
}

func (*attemptLog) Enabled(context.Context, slog.Level) bool { return true }

func (l *attemptLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "webhook attempt" {
		return nil
	}
	line := map[string]any{}
	r.Attrs(func(a slog.Attr) bool {
		line[a.Key] = a.Value.Resolve().Any()
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	return nil
}

// WithAttrs and WithGroup drop what they are given: the attempt lines carry
// their attributes on the record, and other lines are not kept.
func (l *attemptLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *attemptLog) WithGroup(string) slog.Handler      { return l }

func (l *attemptLog) attempts() []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]map[string]any(nil), l.lines...)
}

// jobWorker works the delivery jobs of a testbed's runner one at a time
// with River's test worker: each run is what one run by River does, with
// no waiting for the job to be due, in a transaction rolled back when the
// test ends.
type jobWorker struct {
	w  *rivertest.Worker[deliveryArgs, pgx.Tx]
	tx pgx.Tx
}

// neverThrottle makes the adaptive throttle let every attempt through: its
// rejections are random (after one failure, one attempt in two is held),
// and a test of what an attempt makes of an answer needs the attempt. The
// throttle is tested in package throttle and, in the runner, by TestOutage.
var neverThrottle = throttle.WithRandom(func() float64 { return math.Nextafter(1, 0) })

// jobWorker returns a jobWorker for the testbed's runner, which must not be
// running; from then on its throttle lets every attempt through.
func (b *testbed) jobWorker(t *testing.T) *jobWorker {
	t.Helper()
	b.r.throttles = throttle.NewGroup(neverThrottle)
	tx, err := b.pool.Begin(t.Context())
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) })
	return &jobWorker{
		w:  rivertest.NewWorker(t, riverpgxv5.New(b.pool), &river.Config{}, river.Worker[deliveryArgs](&deliveryWorker{r: b.r})),
		tx: tx,
	}
}

// work runs job once and returns what River made of it and the job after
// the run. A run that fails its attempt (River retries it) is not an error
// of the test.
func (w *jobWorker) work(t *testing.T, job *rivertype.JobRow) (river.EventKind, *rivertype.JobRow) {
	t.Helper()
	res, err := w.w.WorkJob(t.Context(), t, w.tx, job)
	if err != nil && !errors.Is(err, errAttemptFailed) {
		t.Fatalf("work job %d: %v", job.ID, err)
	}
	if (err != nil) != (res.EventKind == river.EventKindJobFailed) {
		t.Fatalf("work job %d: got %s with error %v", job.ID, res.EventKind, err)
	}
	return res.EventKind, res.Job
}

// fanOut writes the deliveries of every event published so far, as the
// event jobs do (again, for an event fanned out already: that is a no-op).
func (b *testbed) fanOut(t *testing.T) {
	t.Helper()
	rows, _ := b.pool.Query(t.Context(), `SELECT id FROM webhook_events`)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := b.r.expand(t.Context(), id); err != nil {
			t.Fatalf("fan out event %s: %v", id, err)
		}
	}
}

// publishedJob returns the one delivery job in the queue.
func (b *testbed) publishedJob(t *testing.T) *rivertype.JobRow {
	t.Helper()
	return rivertest.RequireInserted(t.Context(), t, riverpgxv5.New(b.pool), deliveryArgs{}, &rivertest.RequireInsertedOpts{Queue: queue}).JobRow
}

// firstRun is one event to one endpoint, its job worked once.
type firstRun struct {
	ep   store.WebhookEndpoint
	w    *jobWorker
	kind river.EventKind   // what River made of the run
	job  *rivertype.JobRow // the job after it
}

// workOneEvent registers url for account.created, publishes one event of
// it, fans it out and works its delivery job once, as River's first run of
// it does. The runner must not be running.
func (b *testbed) workOneEvent(t *testing.T, url string) firstRun {
	t.Helper()
	ep := b.endpoint(t, url, "account.created")
	b.publish(t, "account.created", &shebav1.Account{Id: uuid.NewString(), Username: "ada"})
	b.fanOut(t)
	w := b.jobWorker(t)
	kind, job := w.work(t, b.publishedJob(t))
	return firstRun{ep: ep, w: w, kind: kind, job: job}
}
