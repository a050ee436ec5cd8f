package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/webhooks/ssrf/ssrftest"
	"github.com/shebasvc/sheba/webhooks/webhookstest"
)

// TestPublishInTheChangesTransaction publishes an event in a transaction
// that fails and in one that commits: its one job, the fan-out's, is in the
// transaction, seen by nobody else before it commits and gone with it if it
// fails; once it commits and the fan-out has run, there is one delivery job
// and one pending delivery for each enabled endpoint that receives the
// event's type, and none for the others.
func TestPublishInTheChangesTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newTestbed(t, nil)
	both := b.endpoint(t, "http://127.0.0.1:1/both", "account.created", "subscription.created")
	subs := b.endpoint(t, "http://127.0.0.1:1/subs", "subscription.created")
	accounts := b.endpoint(t, "http://127.0.0.1:1/accounts", "account.created")
	off := b.endpoint(t, "http://127.0.0.1:1/off", "subscription.created")
	if err := b.st.DisableWebhookEndpoint(ctx, off.ID, "test"); err != nil {
		t.Fatal(err)
	}
	driver := riverpgxv5.New(b.pool)
	eventJob := rivertest.ExpectedJob{Args: eventArgs{}, Opts: &rivertest.RequireInsertedOpts{Queue: queue}}
	deliveryJob := rivertest.ExpectedJob{Args: deliveryArgs{}, Opts: &rivertest.RequireInsertedOpts{Queue: queue, MaxAttempts: testOptions().MaxAttempts + 1}}
	sub := &shebav1.Subscription{Id: uuid.NewString(), AccountId: uuid.NewString(), Plan: "pro"}

	errChange := errors.New("the change failed")
	err := b.st.InTx(ctx, func(ctx context.Context) error {
		if err := b.r.Publish(ctx, "subscription.created", sub); err != nil {
			return err
		}
		tx, _ := store.TxFromContext(ctx)
		rivertest.RequireManyInsertedTx[*riverpgxv5.Driver](ctx, t, tx, []rivertest.ExpectedJob{eventJob})
		rivertest.RequireNotInserted(ctx, t, driver, eventArgs{}, nil)
		return errChange
	})
	if !errors.Is(err, errChange) {
		t.Fatalf("InTx: got %v, want %v", err, errChange)
	}
	rivertest.RequireNotInserted(ctx, t, driver, eventArgs{}, nil)
	var events int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM webhook_events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 0 {
		t.Errorf("after the rollback: got %d events, want 0", events)
	}

	b.publish(t, "subscription.created", sub)
	rivertest.RequireManyInserted(ctx, t, driver, []rivertest.ExpectedJob{eventJob})
	rivertest.RequireNotInserted(ctx, t, driver, deliveryArgs{}, nil)
	b.fanOut(t)
	var got []deliveryArgs
	for _, row := range rivertest.RequireManyInserted(ctx, t, driver, []rivertest.ExpectedJob{deliveryJob, deliveryJob}) {
		var args deliveryArgs
		if err := json.Unmarshal(row.EncodedArgs, &args); err != nil {
			t.Fatal(err)
		}
		got = append(got, args)
	}
	ds := b.deliveries(t, both.ID)
	if len(ds) != 1 {
		t.Fatalf("endpoint both: got deliveries %+v, want one", ds)
	}
	event := ds[0].EventID
	want := []deliveryArgs{{EndpointID: both.ID, EventID: event}, {EndpointID: subs.ID, EventID: event}}
	byEndpoint := cmpopts.SortSlices(func(a, b deliveryArgs) bool { return a.EndpointID < b.EndpointID })
	if diff := cmp.Diff(want, got, byEndpoint); diff != "" {
		t.Errorf("jobs (-want +got):\n%s", diff)
	}
	for _, e := range []struct {
		name string
		id   string
		want int
	}{{"both", both.ID, 1}, {"subs", subs.ID, 1}, {"accounts", accounts.ID, 0}, {"off", off.ID, 0}} {
		ds := b.deliveries(t, e.id)
		if len(ds) != e.want {
			t.Errorf("endpoint %s: got %d deliveries, want %d", e.name, len(ds), e.want)
		}
		for _, d := range ds {
			if d.EventID != event || d.State != store.DeliveryPending || d.Attempts != 0 {
				t.Errorf("endpoint %s: got delivery %+v, want event %s pending, not attempted", e.name, d, event)
			}
		}
	}
}

// ignoreTimes leaves out of a comparison of deliveries what a test cannot
// know in advance.
var ignoreTimes = cmpopts.IgnoreFields(store.WebhookDelivery{}, "EventID", "LastAttemptTime", "NextAttemptTime", "CreateTime")

// TestWorkerEndsOrRetries works the job of one event, run after run, the
// way River runs it, against a receiver that answers the same every time:
// a 2xx ends the delivery at once, anything else fails the run, for River
// to retry (the next attempt due), until max attempts requests were sent;
// then the delivery is failed and River runs the job no more.
func TestWorkerEndsOrRetries(t *testing.T) {
	t.Parallel()
	const maxAttempts = 3
	for _, test := range []struct {
		name string
		code int
		runs int // at most
		// What River made of each run.
		wantKinds []river.EventKind
		want      store.WebhookDelivery
	}{
		{
			name:      "2xx succeeds",
			code:      http.StatusNoContent,
			runs:      maxAttempts,
			wantKinds: []river.EventKind{river.EventKindJobCompleted},
			want:      store.WebhookDelivery{State: store.DeliverySucceeded, Attempts: 1, LastHTTPStatus: 204},
		},
		{
			name:      "5xx is retried",
			code:      http.StatusServiceUnavailable,
			runs:      1,
			wantKinds: []river.EventKind{river.EventKindJobFailed},
			want:      store.WebhookDelivery{State: store.DeliveryPending, Attempts: 1, LastHTTPStatus: 503, LastError: "HTTP 503 Service Unavailable"},
		},
		{
			name:      "max attempts then failed",
			code:      http.StatusTeapot,
			runs:      10,
			wantKinds: []river.EventKind{river.EventKindJobFailed, river.EventKindJobFailed, river.EventKindJobCompleted},
			want:      store.WebhookDelivery{State: store.DeliveryFailed, Attempts: 3, LastHTTPStatus: 418, LastError: "HTTP 418 I'm a teapot"},
		},
	} {
		t.Run(test.name, func(t *testing.T) {
			t.Parallel()
			b := newTestbed(t, func(o *Options) { o.MaxAttempts = maxAttempts })
			rcv := webhookstest.NewReceiver(t, webhookstest.Status(test.code))
			ep := b.endpoint(t, rcv.URL, "account.created")
			b.publish(t, "account.created", &shebav1.Account{Id: uuid.NewString(), Username: "ada"})
			b.fanOut(t)
			w := b.jobWorker(t)
			job := b.publishedJob(t)
			var kinds []river.EventKind
			for range test.runs {
				var kind river.EventKind
				kind, job = w.work(t, job)
				kinds = append(kinds, kind)
				if kind == river.EventKindJobCompleted {
					break
				}
			}
			if diff := cmp.Diff(test.wantKinds, kinds); diff != "" {
				t.Errorf("River's outcomes of the runs (-want +got):\n%s", diff)
			}
			ds := b.deliveries(t, ep.ID)
			if len(ds) != 1 {
				t.Fatalf("got deliveries %+v, want one", ds)
			}
			d := ds[0]
			want := test.want
			want.EndpointID, want.EventType = ep.ID, "account.created"
			if diff := cmp.Diff(want, d, ignoreTimes); diff != "" {
				t.Errorf("delivery (-want +got):\n%s", diff)
			}
			if d.LastAttemptTime == nil {
				t.Error("got no last attempt time, want the time of the last attempt")
			}
			// A pending delivery says when its next attempt is due; an
			// ended one has none.
			if pending := d.State == store.DeliveryPending; pending != (d.NextAttemptTime != nil) {
				t.Errorf("state %s: got next attempt time %v", d.State, d.NextAttemptTime)
			}
			if n := len(rcv.Requests()); n != want.Attempts {
				t.Errorf("receiver got %d requests, want %d", n, want.Attempts)
			}
		})
	}
}

// TestWorkerRetryAfter answers the first attempt with 503 and a
// Retry-After header: the next attempt is due no earlier than it says, even
// beyond backoff.max, up to an hour, both in the delivery and in River's
// schedule, which the worker's NextRetry sets (rivertest works the job at
// once, whatever its schedule); the retry then succeeds.
func TestWorkerRetryAfter(t *testing.T) {
	t.Parallel()
	for _, test := range []struct {
		name, retryAfter string
		backoffMax       time.Duration
		want             time.Duration
	}{
		{"seconds", "2", 10 * time.Second, 2 * time.Second},
		{"beyond backoff.max", "3", 2 * time.Second, 3 * time.Second},
		{"beyond an hour", "7200", 10 * time.Second, time.Hour},
	} {
		t.Run(test.name, func(t *testing.T) {
			t.Parallel()
			// Backoff alone would retry within 50ms.
			b := newTestbed(t, func(o *Options) { o.BackoffMax = test.backoffMax })
			rcv := webhookstest.NewReceiver(t, func(n int, w http.ResponseWriter) int {
				if n == 1 {
					w.Header().Set("Retry-After", test.retryAfter)
					return http.StatusServiceUnavailable
				}
				return http.StatusOK
			})
			run := b.workOneEvent(t, rcv.URL)
			if run.kind != river.EventKindJobFailed {
				t.Fatalf("first run: got %s, want %s", run.kind, river.EventKindJobFailed)
			}
			job := run.job
			d := b.deliveries(t, run.ep.ID)[0]
			if d.State != store.DeliveryPending || d.NextAttemptTime == nil || d.LastAttemptTime == nil {
				t.Fatalf("got delivery %+v, want it pending with a next attempt time", d)
			}
			// Postgres keeps microseconds, hence the rounding.
			if got := d.NextAttemptTime.Sub(*d.LastAttemptTime); got.Round(time.Millisecond) != test.want {
				t.Errorf("next attempt due %v after the last, want %v", got, test.want)
			}
			// The answer came before the attempt ended (LastAttemptTime).
			if job.ScheduledAt.Before(d.LastAttemptTime.Add(test.want)) {
				t.Errorf("River runs the job again at %v, %v after the last attempt ended, want at least %v",
					job.ScheduledAt, job.ScheduledAt.Sub(*d.LastAttemptTime), test.want)
			}

			if kind, _ := run.w.work(t, job); kind != river.EventKindJobCompleted {
				t.Errorf("second run: got %s, want %s", kind, river.EventKindJobCompleted)
			}
			d = b.deliveries(t, run.ep.ID)[0]
			if d.State != store.DeliverySucceeded || d.Attempts != 2 || d.LastHTTPStatus != http.StatusOK {
				t.Errorf("got delivery %+v, want it succeeded at the second attempt", d)
			}
		})
	}
}

// TestWorkerAnswerHeadersTooLarge answers 200 with 1 MiB of headers: an
// answer whose headers exceed 64 KiB is a failure, recorded as one and
// retried.
func TestWorkerAnswerHeadersTooLarge(t *testing.T) {
	t.Parallel()
	b := newTestbed(t, nil)
	rcv := webhookstest.NewReceiver(t, func(_ int, w http.ResponseWriter) int {
		for i := range 16 {
			w.Header().Set(fmt.Sprintf("X-Big-%d", i), strings.Repeat("a", 64<<10))
		}
		return http.StatusOK
	})
	run := b.workOneEvent(t, rcv.URL)
	if run.kind != river.EventKindJobFailed {
		t.Errorf("got %s, want %s: the attempt failed and is retried", run.kind, river.EventKindJobFailed)
	}
	d := b.deliveries(t, run.ep.ID)[0]
	if d.State != store.DeliveryPending || d.Attempts != 1 || d.NextAttemptTime == nil {
		t.Errorf("got delivery %+v, want it pending after 1 attempt, with a next attempt", d)
	}
	if !strings.Contains(d.LastError, "headers") || d.LastHTTPStatus != 0 {
		t.Errorf("got last status %d, error %q, want no status and an error that says the headers are too large", d.LastHTTPStatus, d.LastError)
	}
	if run.job.State == rivertype.JobStateCompleted {
		t.Errorf("River completed the job, want it scheduled again")
	}
}

// TestWorkerErrorNamesNoAddress makes attempts that fail without an answer,
// by name and by address, and finds the error recorded without the address
// dialed: a refused connection (to a closed port), and a dial-time refusal
// of a host that resolves to loopback after it was registered.
func TestWorkerErrorNamesNoAddress(t *testing.T) {
	t.Parallel()
	closedPort := closedPort(t)
	rcv := webhookstest.NewReceiver(t, webhookstest.Status(http.StatusOK))
	_, rcvPort, _ := net.SplitHostPort(rcv.Listener.Addr().String())

	for _, test := range []struct {
		name, url    string
		allowPrivate bool
		want         string
	}{
		{"connection refused", "http://127.0.0.1:" + closedPort + "/", true, "connection refused"},
		{"connection refused by name", "http://closed.test:" + closedPort + "/", true, "connection refused"},
		{"loopback refused at dial time", "http://rebind.test:" + rcvPort + "/", false, "refused"},
	} {
		t.Run(test.name, func(t *testing.T) {
			t.Parallel()
			b := newTestbed(t, func(o *Options) {
				o.AllowPrivateNetworks = test.allowPrivate
				o.Resolver = ssrftest.Resolver(map[string][]netip.Addr{
					"closed.test": {netip.MustParseAddr("127.0.0.1")},
					"rebind.test": {netip.MustParseAddr("127.0.0.1")},
				})
			})
			run := b.workOneEvent(t, test.url)
			if run.kind != river.EventKindJobFailed {
				t.Errorf("got %s, want %s", run.kind, river.EventKindJobFailed)
			}
			d := b.deliveries(t, run.ep.ID)[0]
			if d.State != store.DeliveryPending || !strings.Contains(d.LastError, test.want) {
				t.Errorf("got delivery %+v, want it pending with an error that says %q", d, test.want)
			}
			if strings.Contains(d.LastError, "127.0.0.1") {
				t.Errorf("got last error %q, want it to name no address", d.LastError)
			}
			if n := len(rcv.Requests()); n != 0 {
				t.Errorf("the receiver behind the refused name got %d requests, want none", n)
			}
		})
	}
}

// TestWorkerGoneDisablesEndpoint answers 410 to the first of two pending
// deliveries: the endpoint is disabled, both deliveries fail (the second
// without a request), and a later event does not reach it.
func TestWorkerGoneDisablesEndpoint(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newTestbed(t, nil)
	rcv := webhookstest.NewReceiver(t, webhookstest.Status(http.StatusGone))
	ep := b.endpoint(t, rcv.URL, "subscription.created", "subscription.canceled")
	b.churn(t, 2)
	b.fanOut(t)
	jobs := rivertest.RequireManyInserted(ctx, t, riverpgxv5.New(b.pool), []rivertest.ExpectedJob{{Args: deliveryArgs{}}, {Args: deliveryArgs{}}})
	w := b.jobWorker(t)

	for i, job := range jobs {
		if kind, _ := w.work(t, job); kind != river.EventKindJobCompleted {
			t.Errorf("job %d: got %s, want %s: a 410 is not retried", i, kind, river.EventKindJobCompleted)
		}
	}
	got, err := b.st.GetWebhookEndpoint(ctx, testOwner, ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.EndpointDisabled {
		t.Errorf("got endpoint state %s, want %s", got.State, store.EndpointDisabled)
	}
	const reason = "410 Gone: the endpoint is disabled"
	want := []store.WebhookDelivery{
		{EndpointID: ep.ID, EventType: "subscription.created", State: store.DeliveryFailed, Attempts: 1, LastHTTPStatus: 410, LastError: reason},
		{EndpointID: ep.ID, EventType: "subscription.canceled", State: store.DeliveryFailed, LastError: reason},
	}
	ds := b.deliveries(t, ep.ID)
	createdFirst := cmpopts.SortSlices(func(a, b store.WebhookDelivery) bool { return a.EventType > b.EventType })
	if diff := cmp.Diff(want, ds, ignoreTimes, createdFirst); diff != "" {
		t.Errorf("deliveries (-want +got):\n%s", diff)
	}
	for _, d := range ds {
		if d.NextAttemptTime != nil {
			t.Errorf("delivery %+v: got a next attempt time, want none", d)
		}
	}

	b.churn(t, 1)
	b.fanOut(t)
	if n := len(b.deliveries(t, ep.ID)); n != 2 {
		t.Errorf("after a later event: got %d deliveries, want the 2 from before it was disabled", n)
	}
	if n := len(rcv.Requests()); n != 1 {
		t.Errorf("receiver got %d requests, want 1", n)
	}
}
