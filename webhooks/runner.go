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
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
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

	// Workers is the number of jobs this replica works at once (default 50).
	Workers int
	// ThrottleWindow is the window of the adaptive throttle (default 10s).
	// While an endpoint is down, about one attempt a window gets through;
	// once it is back, the share let through doubles about every window,
	// so recovery takes some windows: the SRE book's 2 minutes would keep
	// a recovered endpoint waiting for many minutes.
	ThrottleWindow time.Duration
	// PollInterval is how often River looks for due jobs when no
	// notification came (default 1s).
	PollInterval time.Duration
	// RescueAfter is how long a job may run before River takes it for one
	// whose worker died (default Timeout plus a minute).
	RescueAfter time.Duration
	// BacklogInterval is how often the backlog gauge is refreshed (default
	// 5s).
	BacklogInterval time.Duration

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
	if o.RescueAfter <= 0 {
		o.RescueAfter = o.Timeout + time.Minute
	}
	if o.BacklogInterval <= 0 {
		o.BacklogInterval = 5 * time.Second
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

// Runner publishes events and works the delivery jobs of this replica. It
// is safe for concurrent use.
type Runner struct {
	o         Options
	store     *store.Store
	river     *river.Client[pgx.Tx]
	http      *http.Client
	slots     *slots
	throttles *throttle.Group
	tracer    trace.Tracer
	m         *metrics
}

// New returns a Runner over pool and st. It connects nowhere until Run; it
// can Publish at once (Publish writes in the caller's transaction).
func New(pool *pgxpool.Pool, st *store.Store, o Options) (*Runner, error) {
	if o.Timeout <= 0 || o.MaxAttempts < 1 || o.BackoffBase <= 0 || o.BackoffMax < o.BackoffBase || o.PerEndpointConcurrency < 1 {
		return nil, errors.New("webhooks: timeout, max attempts, backoff and per-endpoint concurrency must be set")
	}
	o.setDefaults()
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, fmt.Errorf("webhooks: metrics: %w", err)
	}
	r := &Runner{
		o:         o,
		store:     st,
		slots:     newSlots(o.PerEndpointConcurrency),
		throttles: throttle.NewGroup(throttle.WithWindow(o.ThrottleWindow)),
		tracer:    o.TracerProvider.Tracer("github.com/shebasvc/sheba/webhooks"),
		m:         m,
	}
	r.http = newHTTPClient(o)
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &deliveryWorker{r: r}); err != nil {
		return nil, fmt.Errorf("webhooks: %w", err)
	}
	jobTimeout := o.Timeout + 30*time.Second
	r.river, err = river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:               map[string]river.QueueConfig{queue: {MaxWorkers: o.Workers}},
		Workers:              workers,
		JobTimeout:           jobTimeout,
		RescueStuckJobsAfter: max(o.RescueAfter, jobTimeout),
		FetchPollInterval:    o.PollInterval,
		FetchCooldown:        min(100*time.Millisecond, o.PollInterval),
		Logger:               o.Log.With("component", "river"),
		// River logs every snooze and retry at info; ours is the one line
		// per attempt.
		MaxAttempts: 100,
	})
	if err != nil {
		return nil, fmt.Errorf("webhooks: river client: %w", err)
	}
	return r, nil
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

// Run works delivery jobs until ctx is done, then stops: no job is taken
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
	go r.dropEnded(ctx)
	<-ctx.Done()
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

// Retention of ended deliveries: events whose deliveries have all ended
// are deleted after retention, a batch at a time, by every replica.
const (
	retention      = 7 * 24 * time.Hour
	retentionEvery = 10 * time.Minute
	retentionBatch = 1000
)

// dropEnded deletes old ended events until ctx is done.
func (r *Runner) dropEnded(ctx context.Context) {
	t := time.NewTicker(retentionEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for {
			n, err := r.store.DeleteEndedWebhookEvents(ctx, time.Now().Add(-retention), retentionBatch)
			if err != nil || n < retentionBatch {
				break
			}
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

// Publish records an event of eventType about resource and a delivery of it
// to every enabled endpoint that receives eventType, in the transaction of
// ctx (store.InTx; a transaction of its own if there is none). It
// implements server.Publisher.
func (r *Runner) Publish(ctx context.Context, eventType string, resource proto.Message) error {
	return r.store.InTx(ctx, func(ctx context.Context) error {
		endpoints, err := r.store.ListEndpointsForEvent(ctx, eventType)
		if err != nil || len(endpoints) == 0 {
			return err
		}
		data, err := marshalResource.Marshal(resource)
		if err != nil {
			return fmt.Errorf("publish %s: %w", eventType, err)
		}
		// protojson varies its spacing on purpose; the body is sent
		// compact.
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
		if err := r.store.CreateWebhookEvent(ctx, ev, endpoints); err != nil {
			return err
		}
		tx, _ := store.TxFromContext(ctx)
		params := make([]river.InsertManyParams, len(endpoints))
		for i, id := range endpoints {
			params[i] = river.InsertManyParams{
				Args:       deliveryArgs{EndpointID: id, EventID: ev.ID},
				InsertOpts: &river.InsertOpts{Queue: queue},
			}
		}
		if _, err := r.river.InsertManyFastTx(ctx, tx, params); err != nil {
			return fmt.Errorf("publish %s: enqueue: %w", eventType, err)
		}
		return nil
	})
}

// deliveryWorker works delivery jobs.
type deliveryWorker struct {
	river.WorkerDefaults[deliveryArgs]
	r *Runner
}

func (w *deliveryWorker) Work(ctx context.Context, job *river.Job[deliveryArgs]) error {
	return w.r.deliver(ctx, job.Args.EndpointID, job.Args.EventID)
}

// slotWait is how long an attempt waits for a slot of its endpoint before
// it is put back in the queue.
const slotWait = 100 * time.Millisecond

// deliver makes one attempt, if the delivery is still pending and neither
// the concurrency cap nor the throttle holds it back. It returns
// river.JobSnooze to come back later, nil when the delivery has ended, or
// an error for River to retry (the database failed, or the runner is
// stopping).
func (r *Runner) deliver(ctx context.Context, endpointID, eventID string) error {
	a, err := r.store.GetDeliveryAttempt(ctx, endpointID, eventID)
	if errors.Is(err, store.ErrNotFound) {
		return nil // the endpoint was deleted
	}
	if err != nil {
		return err
	}
	if a.State != store.DeliveryPending {
		return nil // done by an earlier run of the job
	}
	if a.Endpoint.State != store.EndpointEnabled {
		r.m.deliveries.WithLabelValues(string(store.DeliveryFailed)).Inc()
		return r.store.FinishDeliveryAttempt(ctx, endpointID, eventID, store.DeliveryResult{
			State: store.DeliveryFailed, Error: "endpoint disabled", At: time.Now(),
		})
	}
	if a.Attempts >= r.o.MaxAttempts {
		// The last attempt was cut short by a stop.
		r.m.deliveries.WithLabelValues(string(store.DeliveryFailed)).Inc()
		return r.store.FinishDeliveryAttempt(ctx, endpointID, eventID, store.DeliveryResult{
			State: store.DeliveryFailed, Error: "attempts exhausted", At: time.Now(),
		})
	}
	if !r.slots.acquire(endpointID, slotWait) {
		r.m.held.WithLabelValues("concurrency").Inc()
		// Soon: a slot frees when an attempt ends, within the timeout.
		return river.JobSnooze(jitter(min(r.o.Timeout, time.Second)))
	}
	defer r.slots.release(endpointID)
	th := r.throttles.Get(endpointID)
	if !th.Allow() {
		r.m.held.WithLabelValues("throttle").Inc()
		// Held attempts back off too, or an endpoint that is down would
		// cost a query per job every second; but looking less than once a
		// throttle window would miss the endpoint's recovery.
		delay := equalJitter(min(r.backoffCeil(a.Attempts+a.Holds+1), r.o.ThrottleWindow))
		if err := r.store.PostponeDelivery(ctx, endpointID, eventID, time.Now().Add(delay)); err != nil {
			return err
		}
		return river.JobSnooze(delay)
	}

	n, err := r.store.StartDeliveryAttempt(ctx, endpointID, eventID)
	if err != nil {
		return err
	}
	res := r.attempt(ctx, a, n)
	if res.accepted() {
		th.Accepted()
	}
	// The outcome is recorded even when the runner is stopping.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	out := store.DeliveryResult{HTTPStatus: res.status, Error: res.errText(), At: time.Now()}
	var snooze time.Duration
	switch {
	case res.status >= 200 && res.status < 300:
		out.State = store.DeliverySucceeded
		r.m.latency.Observe(out.At.Sub(a.Event.CreateTime).Seconds())
	case res.status == http.StatusGone:
		out.State = store.DeliveryFailed
		out.Error = "410 Gone: the endpoint is disabled"
		if err := r.store.DisableWebhookEndpoint(rctx, endpointID, out.Error); err != nil {
			return err
		}
	case n >= r.o.MaxAttempts && ctx.Err() == nil:
		out.State = store.DeliveryFailed
	default:
		out.State = store.DeliveryPending
		// The receiver's Retry-After is a lower bound, backoff.max or not.
		snooze = max(fullJitter(r.backoffCeil(n)), res.retryAfter)
		if ctx.Err() != nil {
			snooze = 0 // cut short by a stop: River retries it
		}
		next := out.At.Add(snooze)
		out.Next = &next
	}
	if out.State != store.DeliveryPending {
		r.m.deliveries.WithLabelValues(string(out.State)).Inc()
	}
	if err := r.store.FinishDeliveryAttempt(rctx, endpointID, eventID, out); err != nil {
		return err
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
		slog.Duration("retry_in", snooze),
	)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case out.State == store.DeliveryPending:
		return river.JobSnooze(snooze)
	}
	return nil
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
