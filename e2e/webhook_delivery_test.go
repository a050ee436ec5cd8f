package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/internal/app"
	"github.com/shebasvc/sheba/webhooks"
)

// delivered is one request a receiver got.
type delivered struct {
	header http.Header
	body   []byte
	at     time.Time
}

// receiver is a webhook endpoint on 127.0.0.1 whose answer the test
// chooses, recording every request and the most it had in flight at once.
type receiver struct {
	*httptest.Server
	// answer returns the status of the n-th request (from 1); it may set
	// headers on w.
	answer func(n int, w http.ResponseWriter) int

	mu          sync.Mutex
	got         []delivered
	inflight    int
	maxInflight int
}

func newReceiver(t *testing.T, answer func(n int, w http.ResponseWriter) int) *receiver {
	t.Helper()
	r := &receiver{answer: answer}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		d := delivered{header: req.Header.Clone(), body: body, at: time.Now()}
		r.mu.Lock()
		r.got = append(r.got, d)
		n := len(r.got)
		r.inflight++
		r.maxInflight = max(r.maxInflight, r.inflight)
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.inflight--
			r.mu.Unlock()
		}()
		w.WriteHeader(r.answer(n, w))
	}))
	t.Cleanup(r.Close)
	return r
}

// peak returns the most requests it had in flight at once.
func (r *receiver) peak() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxInflight
}

func (r *receiver) requests() []delivered {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivered(nil), r.got...)
}

// succeededIDs returns the distinct webhook-ids that got a 2xx.
func (r *receiver) ids() map[string]int {
	ids := map[string]int{}
	for _, d := range r.requests() {
		ids[d.header.Get("webhook-id")]++
	}
	return ids
}

// fastWebhooks shortens every webhook interval so a test takes seconds.
func fastWebhooks(c *config.Config) {
	allowPrivate(c)
	c.Webhooks.Timeout = 2 * time.Second
	c.Webhooks.Backoff = config.Backoff{Base: 50 * time.Millisecond, Max: 400 * time.Millisecond}
	c.Webhooks.MaxAttempts = 20
}

func fastRunner(o *webhooks.Options) {
	o.PollInterval = 50 * time.Millisecond
	o.BacklogInterval = 100 * time.Millisecond
	o.ThrottleWindow = time.Second
}

// newWebhookEnv starts sheba with fast webhooks and mutate applied on top.
func newWebhookEnv(t *testing.T, opts []app.Option, mutate ...func(*config.Config)) *testEnv {
	t.Helper()
	return startTestEnv(t, envSetup{
		opts:   append([]app.Option{app.WithWebhookOptions(fastRunner)}, opts...),
		mutate: append([]func(*config.Config){fastWebhooks}, mutate...),
	})
}

// createEndpoint registers url for types and returns its id and secret.
func (e *testEnv) createEndpoint(t *testing.T, url string, types ...string) (id, secret string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"url": url, "eventTypes": types})
	r := e.do(t, http.MethodPost, "/v1/webhookEndpoints", string(b))
	wantCode(t, r, http.StatusOK)
	m := r.json(t)
	return m["id"].(string), m["secret"].(string)
}

// deliveries returns every delivery of the endpoint, newest first.
func (e *testEnv) deliveries(t *testing.T, endpointID string) []map[string]any {
	t.Helper()
	var all []map[string]any
	token := ""
	for {
		r := e.do(t, http.MethodGet, "/v1/webhookEndpoints/"+endpointID+"/deliveries?page_size=1000&page_token="+token, "")
		wantCode(t, r, http.StatusOK)
		m := r.json(t)
		for _, d := range m["deliveries"].([]any) {
			all = append(all, d.(map[string]any))
		}
		if token = m["nextPageToken"].(string); token == "" {
			return all
		}
	}
}

// allSucceeded reports whether the endpoint has n deliveries, all SUCCEEDED.
func (e *testEnv) allSucceeded(t *testing.T, endpointID string, n int) bool {
	ds := e.deliveries(t, endpointID)
	if len(ds) != n {
		return false
	}
	for _, d := range ds {
		if d["state"] != "SUCCEEDED" {
			return false
		}
	}
	return true
}

// churn makes n subscription events (created, canceled, created, ...) on a
// fresh account.
func (e *testEnv) churn(t *testing.T, username string, n int) {
	t.Helper()
	id := e.insertAccount(t, username)
	for i := range n {
		var err error
		if i%2 == 0 {
			_, err = e.sub.CreateSubscription(t.Context(), &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"})
		} else {
			_, err = e.sub.CancelSubscription(t.Context(), &shebav1.CancelSubscriptionRequest{AccountId: id})
		}
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
}

func TestWebhookSignedDelivery(t *testing.T) {
	t.Parallel()
	e := newWebhookEnv(t, nil)
	rcv := newReceiver(t, func(int, http.ResponseWriter) int { return http.StatusNoContent })
	endpointID, secret := e.createEndpoint(t, rcv.URL+"/hook", "account.created", "subscription.created")

	r := e.do(t, http.MethodPost, "/v1/accounts", `{"username":"wendy","password":"password1"}`)
	wantCode(t, r, http.StatusOK)
	account := r.json(t)
	r = e.do(t, http.MethodPost, "/v1/accounts/"+account["id"].(string)+"/subscription", `{"plan":"pro"}`)
	wantCode(t, r, http.StatusOK)
	sub := r.json(t)
	// Not a type the endpoint asked for.
	wantCode(t, e.do(t, http.MethodPost, "/v1/accounts/"+account["id"].(string)+"/subscription:cancel", `{}`), http.StatusOK)

	waitFor(t, 10*time.Second, "two deliveries", func() bool { return e.allSucceeded(t, endpointID, 2) })
	got := rcv.requests()
	if len(got) != 2 {
		t.Fatalf("receiver got %d requests, want 2 (no subscription.canceled)", len(got))
	}
	verifier, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	wantData := map[string]map[string]any{"account.created": account, "subscription.created": sub}
	for _, d := range got {
		if err := verifier.Verify(d.body, d.header); err != nil {
			t.Errorf("signature of %s does not verify with the endpoint's secret: %v", d.body, err)
		}
		if ct := d.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("got Content-Type %q, want application/json", ct)
		}
		var body struct {
			Type      string         `json:"type"`
			Timestamp time.Time      `json:"timestamp"`
			Data      map[string]any `json:"data"`
		}
		if err := json.Unmarshal(d.body, &body); err != nil {
			t.Fatalf("body %s: %v", d.body, err)
		}
		if want := wantData[body.Type]; fmt.Sprint(body.Data) != fmt.Sprint(want) {
			t.Errorf("%s data: got %v, want the REST answer %v", body.Type, body.Data, want)
		}
		if time.Since(body.Timestamp) > time.Minute {
			t.Errorf("timestamp %v is not the time of the event", body.Timestamp)
		}
	}
	// The deliveries say what happened, and the ids are the webhook-ids.
	for _, d := range e.deliveries(t, endpointID) {
		if d["attempts"] != float64(1) || d["lastHttpStatus"] != float64(204) || d["lastError"] != "" || d["nextAttemptTime"] != nil {
			t.Errorf("delivery %v: want 1 attempt, status 204, no error, no next attempt", d)
		}
		if rcv.ids()[d["eventId"].(string)] != 1 {
			t.Errorf("delivery %v: its event id was not a webhook-id the receiver got once", d)
		}
	}
	// A log line per attempt, and the metrics.
	if n := strings.Count(e.logs.String(), `"msg":"webhook attempt"`); n != 2 {
		t.Errorf("got %d webhook attempt log lines, want 2", n)
	}
	families := e.scrape(t)
	if got := series(families, "sheba_webhook_attempts_total", "result"); got["result=success"] != 2 || got["result=http_error"] != 0 {
		t.Errorf("got sheba_webhook_attempts_total %v, want 2 successes and nothing else", got)
	}
	if got := series(families, "sheba_webhook_deliveries_total", "state"); got["state=succeeded"] != 2 || got["state=failed"] != 0 {
		t.Errorf("got sheba_webhook_deliveries_total %v, want 2 succeeded", got)
	}
	if h := families["sheba_webhook_delivery_latency_seconds"]; h == nil || h.GetMetric()[0].GetHistogram().GetSampleCount() != 2 {
		t.Errorf("got sheba_webhook_delivery_latency_seconds %v, want 2 samples", h)
	}
	waitFor(t, 5*time.Second, "the backlog gauge at 0", func() bool {
		v, ok := series(e.scrape(t), "sheba_webhook_backlog")[""]
		return ok && v == 0
	})
}

// TestWebhookSpanLinksToRequest finds the span of an attempt linked to the
// span of the request that caused the event.
func TestWebhookSpanLinksToRequest(t *testing.T) {
	t.Parallel()
	tp, exp := newRecorder(t)
	e := startTestEnv(t, envSetup{tp: tp, opts: []app.Option{app.WithWebhookOptions(fastRunner)}, mutate: []func(*config.Config){fastWebhooks}})
	rcv := newReceiver(t, func(int, http.ResponseWriter) int { return http.StatusOK })
	e.createEndpoint(t, rcv.URL, "subscription.created")
	id := e.insertAccount(t, "traced")
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	wantCode(t, e.do(t, http.MethodPost, "/v1/accounts/"+id+"/subscription", `{"plan":"pro"}`,
		"Traceparent", "00-"+traceID+"-00f067aa0ba902b7-01"), http.StatusOK)
	waitFor(t, 10*time.Second, "the attempt's span", func() bool {
		for _, s := range exp.GetSpans() {
			if s.Name == "webhook.deliver" {
				return true
			}
		}
		return false
	})
	for _, s := range exp.GetSpans() {
		if s.Name != "webhook.deliver" {
			continue
		}
		if len(s.Links) != 1 || s.Links[0].SpanContext.TraceID().String() != traceID {
			t.Errorf("got links %v, want one to the request's trace %s", s.Links, traceID)
		}
		if s.SpanContext.TraceID().String() == traceID {
			t.Errorf("the attempt's span is in the request's trace, want a trace of its own linked to it")
		}
	}
}

func TestWebhookFailedChangeEmitsNothing(t *testing.T) {
	t.Parallel()
	e := newWebhookEnv(t, nil)
	rcv := newReceiver(t, func(int, http.ResponseWriter) int { return http.StatusOK })
	endpointID, _ := e.createEndpoint(t, rcv.URL, "subscription.created", "subscription.canceled")
	id := e.insertAccount(t, "fay")
	if _, err := e.sub.CreateSubscription(t.Context(), &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"}); err != nil {
		t.Fatal(err)
	}
	_, err := e.sub.CreateSubscription(t.Context(), &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"})
	wantGRPCError(t, err, codes.AlreadyExists, "")
	_, err = e.sub.CreateSubscription(t.Context(), &shebav1.CreateSubscriptionRequest{AccountId: unknownID, Plan: "pro"})
	wantGRPCError(t, err, codes.NotFound, "")
	waitFor(t, 10*time.Second, "one delivery", func() bool { return e.allSucceeded(t, endpointID, 1) })
	var events int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM webhook_events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 1 {
		t.Errorf("got %d events, want 1: the 409 and the 404 must emit none", events)
	}
}

func TestWebhookFlakyReceiverGetsEveryEvent(t *testing.T) {
	t.Parallel()
	e := newWebhookEnv(t, nil)
	// Every other request fails, in a different way each time.
	fails := []int{http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusMovedPermanently, http.StatusBadRequest}
	rcv := newReceiver(t, func(n int, _ http.ResponseWriter) int {
		if n%2 == 0 {
			return fails[(n/2)%len(fails)]
		}
		return http.StatusOK
	})
	endpointID, _ := e.createEndpoint(t, rcv.URL, "subscription.created", "subscription.canceled")
	const events = 20
	e.churn(t, "flaky", events)
	waitFor(t, 30*time.Second, "every event delivered", func() bool { return e.allSucceeded(t, endpointID, events) })
	ids := map[string]bool{}
	for _, d := range rcv.requests() {
		ids[d.header.Get("webhook-id")] = true
	}
	if len(ids) != events {
		t.Errorf("receiver saw %d distinct webhook-ids, want %d", len(ids), events)
	}
}

func TestWebhookGoneDisablesEndpoint(t *testing.T) {
	t.Parallel()
	e := newWebhookEnv(t, nil)
	rcv := newReceiver(t, func(int, http.ResponseWriter) int { return http.StatusGone })
	endpointID, _ := e.createEndpoint(t, rcv.URL, "subscription.created")
	e.churn(t, "gone", 1)
	waitFor(t, 10*time.Second, "the endpoint disabled", func() bool {
		r := e.do(t, http.MethodGet, "/v1/webhookEndpoints/"+endpointID, "")
		return r.json(t)["state"] == "DISABLED"
	})
	ds := e.deliveries(t, endpointID)
	if len(ds) != 1 || ds[0]["state"] != "FAILED" || ds[0]["lastHttpStatus"] != float64(410) || ds[0]["attempts"] != float64(1) {
		t.Errorf("got deliveries %v, want one FAILED after one attempt answered 410", ds)
	}
	// A disabled endpoint gets nothing more.
	e.churn(t, "gone2", 1)
	time.Sleep(300 * time.Millisecond)
	if n := len(rcv.requests()); n != 1 {
		t.Errorf("a disabled endpoint got %d requests, want 1", n)
	}
}

func TestWebhookMaxAttemptsThenFailed(t *testing.T) {
	t.Parallel()
	e := newWebhookEnv(t, nil, func(c *config.Config) { c.Webhooks.MaxAttempts = 3 })
	rcv := newReceiver(t, func(int, http.ResponseWriter) int { return http.StatusTeapot })
	endpointID, _ := e.createEndpoint(t, rcv.URL, "subscription.created")
	e.churn(t, "tries", 1)
	waitFor(t, 15*time.Second, "the delivery failed", func() bool {
		ds := e.deliveries(t, endpointID)
		return len(ds) == 1 && ds[0]["state"] == "FAILED"
	})
	d := e.deliveries(t, endpointID)[0]
	if d["attempts"] != float64(3) || d["lastHttpStatus"] != float64(418) || d["nextAttemptTime"] != nil {
		t.Errorf("got delivery %v, want 3 attempts, last status 418, no next attempt", d)
	}
	if n := len(rcv.requests()); n != 3 {
		t.Errorf("receiver got %d requests, want 3", n)
	}
}

func TestWebhookRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	// Backoff alone would retry within 50ms.
	e := newWebhookEnv(t, nil, func(c *config.Config) { c.Webhooks.Backoff.Max = 10 * time.Second })
	rcv := newReceiver(t, func(n int, w http.ResponseWriter) int {
		if n == 1 {
			w.Header().Set("Retry-After", "2")
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	endpointID, _ := e.createEndpoint(t, rcv.URL, "subscription.created")
	e.churn(t, "later", 1)
	waitFor(t, 10*time.Second, "the delivery", func() bool { return e.allSucceeded(t, endpointID, 1) })
	got := rcv.requests()
	if len(got) != 2 {
		t.Fatalf("receiver got %d requests, want 2", len(got))
	}
	if gap := got[1].at.Sub(got[0].at); gap < 2*time.Second {
		t.Errorf("retry came %v after a Retry-After of 2 s, want at least 2 s", gap)
	}
}
