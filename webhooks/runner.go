package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/webhooks/ssrf"
	"github.com/shebasvc/sheba/webhooks/throttle"
)

// queue is the River queue of the delivery jobs.
const queue = "sheba_webhooks"

// Options configures a Runner. The zero values of the fields after
// AllowPrivateNetworks pick the defaults.
type Options struct {
	// Timeout bounds one attempt, connecting and reading the answer
	// included (webhooks.timeout).
	Timeout time.Duration
	// MaxAttempts is the number of requests sent before a delivery fails
	// (webhooks.max_attempts).
	MaxAttempts int
	// BackoffBase and BackoffMax shape the wait between attempts
	// (webhooks.backoff).
	BackoffBase, BackoffMax time.Duration
	// PerEndpointConcurrency caps the attempts in flight to one endpoint
	// (webhooks.per_endpoint_concurrency).
	PerEndpointConcurrency int
	// AllowPrivateNetworks lets attempts dial addresses that are not
	// public and ports other than 80, 443 and 1024-65535
	// (webhooks.allow_private_networks).
	AllowPrivateNetworks bool
	// Resolver looks up the hosts of endpoints (nil: net.DefaultResolver);
	// tests answer names with their own.
	Resolver *net.Resolver
	// Limiter caps the attempts in flight to each endpoint at
	// PerEndpointConcurrency (nil: NewSharedLimiter, leases in Postgres
	// that every replica shares).
	Limiter Limiter

	// Workers is the number of jobs this replica works at once (default 50).
	Workers int
	// ExpandBatch is the number of endpoints whose deliveries of an event
	// one transaction writes (default 500).
	ExpandBatch int
	// QueueShare is the most deliveries of one endpoint that have a job in
	// River's queue at once (default 8 × PerEndpointConcurrency); the
	// others wait their turn, outside the queue, so that an endpoint with
	// a backlog holds no more of the queue than that.
	QueueShare int
	// ThrottleWindow is the window of the adaptive throttle (default 10s).
	// While an endpoint is down, about one attempt a window gets through;
	// once it is back, the share let through doubles about every window,
	// so recovery takes some windows: the SRE book's 2 minutes would keep
	// a recovered endpoint waiting for many minutes. It bounds an
	// endpoint's park too (parkFor).
	ThrottleWindow time.Duration
	// PollInterval is how often River looks for due jobs when no
	// notification came (default 1s).
	PollInterval time.Duration
	// StallAfter is how long a job may stay due while no job runs on this
	// replica before the runner restarts its queue's producer (default
	// 15s; watchdog.go says why).
	StallAfter time.Duration
	// RescueAfter is how long a job may run before River takes it for one
	// whose worker died (default Timeout plus a minute).
	RescueAfter time.Duration
	// BacklogInterval is how often the backlog gauge is refreshed (default
	// 5s).
	BacklogInterval time.Duration
	// Retention is how long an event is kept once its deliveries have all
	// ended (default 7 days); RetentionInterval is how often one replica of
	// the cluster deletes those older (default 10 minutes).
	Retention, RetentionInterval time.Duration

	// Log gets one line per attempt; nil discards.
	Log *slog.Logger
	// TracerProvider gets a span per attempt; nil means no tracing.
	TracerProvider trace.TracerProvider
	// Registerer gets the sheba_webhook_* metrics; nil registers nowhere.
	Registerer prometheus.Registerer
}

func (o *Options) setDefaults() {
	if o.Workers <= 0 {
		o.Workers = 50
	}
	if o.ThrottleWindow <= 0 {
		o.ThrottleWindow = 10 * time.Second
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	if o.StallAfter <= 0 {
		o.StallAfter = 15 * time.Second
	}
	if o.RescueAfter <= 0 {
		o.RescueAfter = o.Timeout + time.Minute
	}
	if o.BacklogInterval <= 0 {
		o.BacklogInterval = 5 * time.Second
	}
	if o.ExpandBatch <= 0 {
		o.ExpandBatch = 500
	}
	if o.QueueShare <= 0 {
		o.QueueShare = 8 * o.PerEndpointConcurrency
	}
	if o.Retention <= 0 {
		o.Retention = 7 * 24 * time.Hour
	}
	if o.RetentionInterval <= 0 {
		o.RetentionInterval = 10 * time.Minute
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.TracerProvider == nil {
		o.TracerProvider = tracenoop.NewTracerProvider()
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
}

// Runner publishes events and works the webhook jobs of this replica. It
// is safe for concurrent use.
type Runner struct {
	o         Options
	store     *store.Store
	river     *river.Client[pgx.Tx]
	http      *http.Client
	throttles *throttle.Group
	tracer    trace.Tracer
	m         *metrics
	activity  activity
	// retries holds, by job id, when the next attempt of a delivery job
	// whose run just failed is due, for its NextRetry.
	retries sync.Map
}

// New returns a Runner whose queue and workers use pool, a pool of their
// own (so that deliveries never take the connections of API requests), and
// st, a Store over it. It connects nowhere until Run; it can Publish at once
// (Publish writes in the caller's transaction, on the caller's pool).
func New(pool *pgxpool.Pool, st *store.Store, o Options) (*Runner, error) {
	if o.Timeout <= 0 || o.MaxAttempts < 1 || o.BackoffBase <= 0 || o.BackoffMax < o.BackoffBase || o.PerEndpointConcurrency < 1 {
		return nil, errors.New("webhooks: timeout, max attempts, backoff and per-endpoint concurrency must be set")
	}
	o.setDefaults()
	// River cancels a job, and its request with it, jobTimeout after it
	// starts: a lease taken after that start and held jobTimeout and a bit
	// more outlives every request sent under it, so an expired lease never
	// has a request in flight.
	if o.Limiter == nil {
		o.Limiter = NewSharedLimiter(st, o.PerEndpointConcurrency, o.holdFor(), o.Log)
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, fmt.Errorf("webhooks: metrics: %w", err)
	}
	r := &Runner{
		o:         o,
		store:     st,
		throttles: throttle.NewGroup(throttle.WithWindow(o.ThrottleWindow)),
		tracer:    o.TracerProvider.Tracer("github.com/shebasvc/sheba/webhooks"),
		m:         m,
	}
	r.http = newHTTPClient(o)
	workers := river.NewWorkers()
	if err := errors.Join(
		river.AddWorkerSafely(workers, &deliveryWorker{r: r}),
		river.AddWorkerSafely(workers, &eventWorker{r: r}),
		river.AddWorkerSafely(workers, &retentionWorker{r: r}),
	); err != nil {
		return nil, fmt.Errorf("webhooks: %w", err)
	}
	r.river, err = river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:               map[string]river.QueueConfig{queue: r.queueConfig()},
		Workers:              workers,
		Middleware:           []rivertype.Middleware{r.activity.middleware()},
		PeriodicJobs:         []*river.PeriodicJob{r.retentionJob()},
		JobTimeout:           o.jobTimeout(),
		RescueStuckJobsAfter: max(o.RescueAfter, o.jobTimeout()),
		FetchPollInterval:    o.PollInterval,
		FetchCooldown:        min(100*time.Millisecond, o.PollInterval),
		// Our tables keep what a job did; a completed job is only River's
		// bookkeeping, and every change leaves one.
		CompletedJobRetentionPeriod: time.Hour,
		// River logs every failed attempt at info; ours is the one line per
		// attempt.
		Logger: slog.New(warnAndAbove{o.Log.Handler()}).With("component", "river"),
	})
	if err != nil {
		return nil, fmt.Errorf("webhooks: river client: %w", err)
	}
	return r, nil
}

// queueConfig is the configuration of the queue of the webhook jobs.
func (r *Runner) queueConfig() river.QueueConfig { return river.QueueConfig{MaxWorkers: r.o.Workers} }

// warnAndAbove passes on to its handler only the records of level warning
// and above.
type warnAndAbove struct{ slog.Handler }

func (h warnAndAbove) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}

func (h warnAndAbove) WithAttrs(attrs []slog.Attr) slog.Handler {
	return warnAndAbove{h.Handler.WithAttrs(attrs)}
}

func (h warnAndAbove) WithGroup(name string) slog.Handler {
	return warnAndAbove{h.Handler.WithGroup(name)}
}

// maxAnswerHeaderBytes bounds the headers of an answer: a receiver that
// sends more fails the attempt, which is retried.
const maxAnswerHeaderBytes = 64 << 10

// newHTTPClient returns the client of the attempts: no proxy, no redirects,
// answers' headers bounded, and unless allowed, no dialing of targets that
// are not public (checked after DNS).
func newHTTPClient(o Options) *http.Client {
	dialer := &net.Dialer{Timeout: o.Timeout, KeepAlive: 30 * time.Second, Resolver: o.Resolver}
	if !o.AllowPrivateNetworks {
		dialer.Control = ssrf.Control
	}
	return &http.Client{
		Transport: &http.Transport{
			// An environment proxy would dial for us, past the check.
			Proxy:                  nil,
			DialContext:            dialer.DialContext,
			TLSHandshakeTimeout:    o.Timeout,
			ResponseHeaderTimeout:  o.Timeout,
			MaxResponseHeaderBytes: maxAnswerHeaderBytes,
			MaxIdleConnsPerHost:    o.PerEndpointConcurrency,
			IdleConnTimeout:        90 * time.Second,
			ForceAttemptHTTP2:      true,
		},
		// A 3xx is the receiver's answer, and a failure: following it could
		// lead anywhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Run works webhook jobs (fan-outs, deliveries, retention), and restarts
// its queue's producer should it stall (watchdog.go), until ctx is done,
// then stops: no job is taken
// any more, attempts in flight are given stopTimeout to finish, and those
// still running then are canceled (their outcome recorded, and retried
// later, by this replica or another), Run waiting at most hardStopWait more
// for them to return; it returns an error if any had to be canceled. While
// the database is unreachable at start, Run keeps trying.
func (r *Runner) Run(ctx context.Context, stopTimeout time.Duration) error {
	// River cancels every job at once when the context given to Start ends,
	// so that context ends with ctx only while Start runs (it waits for the
	// database), and the stop is River's soft Stop.
	riverCtx, cancelRiver := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRiver()
	for {
		unwatch := context.AfterFunc(ctx, cancelRiver)
		err := r.river.Start(riverCtx)
		unwatch()
		if err == nil {
			break
		}
		r.o.Log.WarnContext(ctx, "webhook delivery not started; retrying", "error", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
	go r.refreshBacklog(ctx)
	r.watchQueue(ctx)
	softCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	if err := r.river.Stop(softCtx); err == nil {
		return nil
	}
	hardCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hardStopWait)
	defer cancel()
	if err := r.river.StopAndCancel(hardCtx); err != nil {
		return fmt.Errorf("webhooks: attempts in flight %v after the stop were canceled, and still run %v later: %w", stopTimeout, hardStopWait, err)
	}
	return fmt.Errorf("webhooks: attempts in flight %v after the stop were canceled; they will be retried", stopTimeout)
}

// hardStopWait is how long Run waits for canceled attempts to return: each
// still records its outcome.
const hardStopWait = 5 * time.Second

func (r *Runner) refreshBacklog(ctx context.Context) {
	t := time.NewTicker(r.o.BacklogInterval)
	defer t.Stop()
	for {
		if n, err := r.store.CountPendingDeliveries(ctx); err == nil {
			r.m.backlog.Set(float64(n))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// deliveryArgs is the job of delivering one event to one endpoint.
type deliveryArgs struct {
	EndpointID string `json:"endpoint_id"`
	EventID    string `json:"event_id"`
}

func (deliveryArgs) Kind() string { return "sheba_webhook_delivery" }

// envelope is the body of every attempt: docs/webhooks.md#the-request.
type envelope struct {
	Type      string          `json:"type"`
	Timestamp string          `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// marshalResource is the JSON the REST API answers for a resource: the
// gateway's protojson options (lowerCamelCase names, defaults emitted).
var marshalResource = protojson.MarshalOptions{EmitDefaultValues: true}

// Publish records an event of eventType about resource, in the transaction
// of ctx (store.InTx; a transaction of its own if there is none): the event
// and one job that fans it out to the endpoints that receive it, after the
// transaction commits (eventWorker). That is the same two rows however many
// endpoints receive it. It implements server.Publisher.
func (r *Runner) Publish(ctx context.Context, eventType string, resource proto.Message) error {
	data, err := marshalResource.Marshal(resource)
	if err != nil {
		return fmt.Errorf("publish %s: %w", eventType, err)
	}
	// protojson varies its spacing on purpose; the body is sent compact.
	var compact bytes.Buffer
	if err := json.Compact(&compact, data); err != nil {
		return fmt.Errorf("publish %s: %w", eventType, err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	body, err := json.Marshal(envelope{Type: eventType, Timestamp: now.Format(time.RFC3339Nano), Data: compact.Bytes()})
	if err != nil {
		return fmt.Errorf("publish %s: %w", eventType, err)
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	ev := store.WebhookEvent{
		ID:          uuid.NewString(),
		Type:        eventType,
		Body:        body,
		Traceparent: carrier.Get("traceparent"),
		CreateTime:  now,
	}
	return r.store.InTx(ctx, func(ctx context.Context) error {
		if err := r.store.CreateWebhookEvent(ctx, ev); err != nil {
			return err
		}
		tx, _ := store.TxFromContext(ctx)
		if _, err := r.river.InsertTx(ctx, tx, eventArgs{EventID: ev.ID}, &river.InsertOpts{Queue: queue}); err != nil {
			return fmt.Errorf("publish %s: enqueue: %w", eventType, err)
		}
		return nil
	})
}

// enqueue inserts jobs into River's queue in the transaction of ctx
// (store.InTx).
func (r *Runner) enqueue(ctx context.Context, jobs []river.InsertManyParams) error {
	tx, _ := store.TxFromContext(ctx)
	_, err := r.river.InsertManyFastTx(ctx, tx, jobs)
	return err
}

// deliveryJob is the insert of the job of delivering the event to the
// endpoint. River runs it at most MaxAttempts+1 times: the run after the
// last attempt only records FAILED, if that attempt was cut short (a crash
// or a stop) before it could.
func (r *Runner) deliveryJob(endpointID, eventID string) river.InsertManyParams {
	return river.InsertManyParams{
		Args:       deliveryArgs{EndpointID: endpointID, EventID: eventID},
		InsertOpts: &river.InsertOpts{Queue: queue, MaxAttempts: r.o.MaxAttempts + 1},
	}
}

// deliveryWorker works delivery jobs. River owns their retries: a failed
// attempt fails the run, and NextRetry says when the next one is due. What
// the attempt's answer said of that (its Retry-After) reaches NextRetry,
// which River calls right after Work without the error, through the
// runner's retries.
type deliveryWorker struct {
	river.WorkerDefaults[deliveryArgs]
	r *Runner
}

func (w *deliveryWorker) Work(ctx context.Context, job *river.Job[deliveryArgs]) error {
	return w.r.deliver(ctx, job)
}

// NextRetry is when the attempt after a failed one is due, by retryAt: as
// the failed attempt recorded it in its delivery (with the receiver's
// Retry-After, and the endpoint's park), or, for a job River rescued from a
// replica that died mid-attempt, by the backoff alone.
func (w *deliveryWorker) NextRetry(job *river.Job[deliveryArgs]) time.Time {
	if at, ok := w.r.retries.LoadAndDelete(job.ID); ok {
		// River takes a time already past for a broken policy.
		return later(at.(time.Time), time.Now())
	}
	return w.r.retryAt(time.Now(), max(job.Attempt, 1), 0)
}

// retryAt is the retry policy: the attempt after attempt n (n >= 1), which
// ended at end, is due after a wait drawn uniformly from [0, min(backoff.max,
// backoff.base·2^(n-1))] (full jitter), and no earlier than the receiver's
// Retry-After said (a lower bound, beyond backoff.max too; parseRetryAfter
// caps it at an hour).
func (r *Runner) retryAt(end time.Time, n int, retryAfter time.Duration) time.Time {
	return end.Add(max(fullJitter(r.backoffCeil(n)), retryAfter))
}

// errAttemptFailed is the error of a run whose attempt failed and will be
// retried: River records it and asks NextRetry when.
var errAttemptFailed = errors.New("webhook attempt failed")

// Parking: an endpoint whose attempts fail parkAfter times in a row (no
// answer, 5xx, 408, 429, on any replica) gets none but one probe at a time
// until one is taken; the first park lasts about backoff.base, each failed
// probe doubles it, up to backoff.max or the throttle's window, the shorter
// (parkFor). Attempts held back by the park do not count, and its
// deliveries' jobs sleep until the park ends.
const parkAfter = 5

// parkFor is how long an endpoint that has failed failures attempts in a
// row (at least parkAfter) is parked: about backoff.base, doubling with
// each failed probe, up to the shorter of backoff.max and ThrottleWindow.
//
// The park ends at most a throttle window after the endpoint came back:
// with backoff.max's hour, an endpoint down for a minute would wait up to
// a minute more for its probe, and one down for a day up to an hour. A
// probe every window or so costs a dead endpoint about one request in 5 to
// 10 s (the default window), however long its backlog; and it spends no
// delivery's attempts faster than its own backoff would, since a probe is
// made by a job that was due.
func (r *Runner) parkFor(failures int) time.Duration {
	return equalJitter(min(r.backoffCeil(failures-parkAfter+1), r.o.ThrottleWindow))
}

// parkedWakers is about how many of a parked endpoint's jobs wake in each
// throttle window (parkedWait): one of them probes once the park has
// ended, and the probe that the endpoint takes wakes the others at once
// (wakeEndpoint).
const parkedWakers = 4

// parkedRecheck is how near its end a park holds a job only until then
// (and a second at most after), rather than parkedWait past it: the probe
// that ends the park could wake the others before River has recorded
// this job's hold, and miss it.
const parkedRecheck = 250 * time.Millisecond

// parkedWait is how long past the end of its endpoint's park a job held by
// the park, parkedRecheck or more before its end, sleeps: uniform over a
// throttle window for each parkedWakers of the endpoint's queued jobs. So
// about parkedWakers of them wake in a window, whatever the share of the
// queue the endpoint holds, instead of every one at each park's end: a dead
// endpoint with a backlog costs a few runs of a job in a window, not 32
// each 5 to 10 s. The first to wake after the park has ended probes, a
// fraction of a window later on average.
func (r *Runner) parkedWait(queued int) time.Duration {
	return fullJitter(r.o.ThrottleWindow * time.Duration(max(1, queued/parkedWakers)))
}

// wakeEndpoint makes the endpoint's delivery jobs that sleep (held by its
// park, or waiting for a retry) due at once: the probe that ended its park
// calls it once its outcome is recorded, so that its backlog flows again
// at once rather than as each job wakes (parkedWait). River finds them by
// their args (river_job.args has a GIN index); there are at most
// QueueShare, plus any a rescue left behind. It is best effort: a job it
// misses wakes by itself within its wait.
func (r *Runner) wakeEndpoint(ctx context.Context, endpointID string) error {
	args, err := json.Marshal(map[string]string{"endpoint_id": endpointID})
	if err != nil {
		return err
	}
	list, err := r.river.JobList(ctx, river.NewJobListParams().
		Kinds(deliveryArgs{}.Kind()).
		States(rivertype.JobStateScheduled, rivertype.JobStateRetryable).
		Where("args @> @endpoint::jsonb", river.NamedArgs{"endpoint": string(args)}).
		First(2*r.o.QueueShare))
	if err != nil {
		return fmt.Errorf("list the jobs of webhook endpoint %q: %w", endpointID, err)
	}
	for _, job := range list.Jobs {
		if _, err := r.river.JobRetry(ctx, job.ID); err != nil {
			return fmt.Errorf("wake job %d of webhook endpoint %q: %w", job.ID, endpointID, err)
		}
	}
	return nil
}

// jobTimeout is how long River lets a delivery job run before it cancels
// it, and the attempt's request with it.
func (o Options) jobTimeout() time.Duration { return o.Timeout + 30*time.Second }

// leaseMargin is how much longer than a job may run its lease of a slot of
// its endpoint lasts (NewSharedLimiter), and its hold of its endpoint's
// probe: past it, a probe or slot whose replica died is given up, and no
// request sent under it can still be in flight.
const leaseMargin = 5 * time.Second

// holdFor is how long a slot lease of an endpoint, and its probe, last:
// longer than any job may run.
func (o Options) holdFor() time.Duration { return o.jobTimeout() + leaseMargin }

// slotWait is how long an attempt waits for a slot of its endpoint before
// it is put back in the queue.
const slotWait = 100 * time.Millisecond

// deliver makes one attempt, if the delivery is still pending and neither
// the endpoint's park, the concurrency cap nor the throttle holds it back.
// It returns nil when the delivery has ended, errAttemptFailed for River to
// retry, river.JobSnooze to come back later without counting an attempt, or
// the context's error when the runner is stopping (River puts the job back
// without counting it either).
func (r *Runner) deliver(ctx context.Context, job *river.Job[deliveryArgs]) error {
	endpointID, eventID := job.Args.EndpointID, job.Args.EventID
	a, err := r.store.GetDeliveryAttempt(ctx, endpointID, eventID)
	if errors.Is(err, store.ErrNotFound) {
		return nil // the endpoint was deleted
	}
	if err != nil {
		return r.notSent(ctx, err)
	}
	if a.State != store.DeliveryPending {
		return nil // done by an earlier run of the job
	}
	if a.Endpoint.State != store.EndpointEnabled {
		return r.fail(ctx, a, "endpoint disabled")
	}
	if a.Attempts >= r.o.MaxAttempts {
		// The last attempt was cut short by a stop or a crash.
		return r.fail(ctx, a, "attempts exhausted")
	}
	switch {
	case a.Park.Left >= parkedRecheck:
		// No probe can end the park before River has recorded this
		// hold (its completer takes milliseconds), so the one that does
		// finds this job asleep and wakes it.
		return r.hold(ctx, "parked", a.Park.Left+r.parkedWait(a.Queued))
	case a.Park.Left > 0:
		// Near the park's end: look again soon, spread, so that the
		// endpoint's jobs do not all wake at once.
		return r.hold(ctx, "parked", a.Park.Left+jitter(time.Second))
	case a.Park.ProbeLeft > 0:
		// A probe in flight may wake the others before this hold is
		// recorded, and miss this job: look again soon.
		return r.hold(ctx, "parked", jitter(min(a.Park.ProbeLeft, time.Second)))
	}
	release, ok, err := r.o.Limiter.Acquire(ctx, endpointID)
	if err != nil {
		return r.notSent(ctx, err)
	}
	if !ok {
		// Soon: a slot frees when an attempt ends, within the timeout.
		return r.hold(ctx, "concurrency", jitter(min(r.o.Timeout, time.Second)))
	}
	defer release()
	probe := a.Park.Parked
	if probe {
		claimed, err := r.store.ClaimWebhookProbe(ctx, endpointID, r.o.holdFor())
		if err != nil {
			return r.notSent(ctx, err)
		}
		if !claimed {
			return r.hold(ctx, "parked", jitter(time.Second))
		}
	}
	th := r.throttles.Get(endpointID)
	// The park held attempts back already; its probe decides.
	if !probe && !th.Allow() {
		// Held attempts back off too, or an endpoint that is down would
		// cost a query per job every second; but looking less than once a
		// throttle window would miss the endpoint's recovery.
		delay := equalJitter(min(r.backoffCeil(a.Attempts+a.Holds+1), r.o.ThrottleWindow))
		if err := r.store.PostponeDelivery(ctx, endpointID, eventID, time.Now().Add(delay)); err != nil {
			return r.notSent(ctx, err)
		}
		return r.hold(ctx, "throttle", delay)
	}

	n, err := r.store.StartDeliveryAttempt(ctx, endpointID, eventID)
	if err != nil {
		return r.notSent(ctx, err)
	}
	res := r.attempt(ctx, a, n)
	if res.accepted() {
		th.Accepted()
	}
	// The outcome is recorded even when the runner is stopping.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	out := store.DeliveryResult{HTTPStatus: res.status, Error: res.errText(), At: time.Now()}
	sent := sentAttempt{probe: probe, accepted: res.accepted(), stopped: ctx.Err() != nil}
	switch {
	case res.status >= 200 && res.status < 300:
		out.State = store.DeliverySucceeded
		r.m.latency.Observe(out.At.Sub(a.Event.CreateTime).Seconds())
	case res.status == http.StatusGone:
		out.State = store.DeliveryFailed
		out.Error = "410 Gone: the endpoint is disabled"
		sent.gone = true
	case (n >= r.o.MaxAttempts || job.Attempt >= job.MaxAttempts) && !sent.stopped:
		out.State = store.DeliveryFailed
	default:
		out.State = store.DeliveryPending
		next := out.At // cut short by a stop: River puts it back at once
		if !sent.stopped {
			next = r.retryAt(out.At, n, res.retryAfter)
		}
		out.Next = &next
	}
	if err := r.record(rctx, a, &out, &sent); err != nil {
		return err
	}
	if probe && sent.accepted && !sent.stopped {
		if err := r.wakeEndpoint(rctx, endpointID); err != nil {
			r.o.Log.WarnContext(ctx, "webhook endpoint back, its held deliveries not woken; they wake by themselves", "endpoint_id", endpointID, "error", err)
		}
	}
	if out.State != store.DeliveryPending {
		r.m.deliveries.WithLabelValues(string(out.State)).Inc()
	}
	var retryIn time.Duration
	if out.Next != nil {
		retryIn = out.Next.Sub(out.At)
	}
	r.o.Log.LogAttrs(ctx, slog.LevelInfo, "webhook attempt",
		slog.String("endpoint_id", endpointID),
		slog.String("event_id", eventID),
		slog.String("event_type", a.Event.Type),
		slog.Int("attempt", n),
		slog.Int("http_status", res.status),
		slog.String("result", res.result()),
		slog.String("state", string(out.State)),
		slog.Duration("duration", res.duration),
		slog.String("error", out.Error),
		slog.Duration("retry_in", retryIn),
	)
	switch {
	case sent.stopped:
		return ctx.Err()
	case out.State == store.DeliveryPending:
		r.retries.Store(job.ID, *out.Next)
		return fmt.Errorf("%w: %s", errAttemptFailed, out.Error)
	}
	return nil
}

// hold puts the job back in the queue for d without counting an attempt
// (River's snooze does not count one), an attempt held back for reason.
func (r *Runner) hold(ctx context.Context, reason string, d time.Duration) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.m.held.WithLabelValues(reason).Inc()
	return river.JobSnooze(d)
}

// notSent is the outcome of a run that failed before a request was sent
// (the database failed): nothing counts, and the job comes back a throttle
// window later.
func (r *Runner) notSent(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.o.Log.WarnContext(ctx, "webhook delivery put back", "error", err)
	return river.JobSnooze(equalJitter(r.o.ThrottleWindow))
}

// fail ends the pending delivery a as FAILED with reason, without an
// attempt.
func (r *Runner) fail(ctx context.Context, a store.DeliveryAttempt, reason string) error {
	out := store.DeliveryResult{State: store.DeliveryFailed, Error: reason, At: time.Now()}
	if err := r.record(ctx, a, &out, nil); err != nil {
		return r.notSent(ctx, err)
	}
	r.m.deliveries.WithLabelValues(string(store.DeliveryFailed)).Inc()
	return nil
}

// sentAttempt is what a request sent tells of its endpoint.
type sentAttempt struct {
	probe    bool // it was the endpoint's probe
	accepted bool // the endpoint took it (result.accepted)
	gone     bool // it answered 410: the endpoint is disabled
	stopped  bool // the runner's stop cut it short: it says nothing of the endpoint
}

// record writes out, the outcome of an attempt at a (sent, nil for a
// delivery ended without one), in one transaction with the endpoint
// locked: the delivery's state, what the attempt says of the endpoint (its
// failures in a row, its park, its probe), and, if the delivery ended, its
// place in River's queue given to the oldest delivery waiting for one, or
// given up. A failure that parks the endpoint moves a pending delivery's
// next attempt to the end of the park.
func (r *Runner) record(ctx context.Context, a store.DeliveryAttempt, out *store.DeliveryResult, sent *sentAttempt) error {
	endpointID, eventID := a.Endpoint.ID, a.Event.ID
	return r.store.InTx(ctx, func(ctx context.Context) error {
		failures, err := r.store.LockWebhookEndpointHealth(ctx, endpointID)
		if errors.Is(err, store.ErrNotFound) {
			return nil // deleted meanwhile, with its deliveries
		}
		if err != nil {
			return err
		}
		h := store.EndpointHealth{Failures: failures}
		if sent != nil {
			h.EndProbe = sent.probe
			switch {
			case sent.stopped:
				// Says nothing of the endpoint.
			case sent.accepted:
				h.Failures = 0
			default:
				if h.Failures++; h.Failures >= parkAfter {
					h.ParkFor = r.parkFor(h.Failures)
				}
			}
		}
		if h.ParkFor > 0 && out.Next != nil {
			next := later(*out.Next, out.At.Add(h.ParkFor))
			out.Next = &next
		}
		ended, err := r.store.FinishDeliveryAttempt(ctx, endpointID, eventID, *out)
		if err != nil {
			return err
		}
		switch {
		case sent != nil && sent.gone:
			// Every delivery to it fails, the waiting ones too.
			if err := r.store.DisableWebhookEndpoint(ctx, endpointID, out.Error); err != nil {
				return err
			}
		case ended:
			next, ok, err := r.store.QueueWaitingDelivery(ctx, endpointID)
			if err != nil {
				return err
			}
			if !ok {
				h.Queued = -1
				break
			}
			if err := r.enqueue(ctx, []river.InsertManyParams{r.deliveryJob(endpointID, next)}); err != nil {
				return fmt.Errorf("enqueue delivery of event %q to endpoint %q: %w", next, endpointID, err)
			}
		}
		if h == (store.EndpointHealth{Failures: failures}) {
			return nil // nothing changed
		}
		return r.store.UpdateWebhookEndpointHealth(ctx, endpointID, h)
	})
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// backoffCeil returns the ceiling of the wait after attempt n (n >= 1):
// min(max, base·2^(n-1)).
func (r *Runner) backoffCeil(n int) time.Duration {
	d := r.o.BackoffBase
	for i := 1; i < n && d < r.o.BackoffMax; i++ {
		d *= 2
	}
	return min(d, r.o.BackoffMax)
}

// fullJitter is uniform in [0, d]: retries of many events spread out
// instead of arriving together (the AWS "full jitter" backoff).
func fullJitter(d time.Duration) time.Duration {
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// equalJitter is uniform in [d/2, d]: a held attempt never comes back at
// once.
func equalJitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// jitter is uniform in [d/4, d].
func jitter(d time.Duration) time.Duration {
	return d/4 + time.Duration(rand.Int64N(int64(d*3/4)+1))
}
