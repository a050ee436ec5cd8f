package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/internal/app"
	"github.com/shebasvc/sheba/webhooks"
	"github.com/shebasvc/sheba/webhooks/webhookstest"
)

// fastWebhooks shortens every webhook interval so a test takes seconds. The
// attempt timeout stays long: an answer of the test receivers must not
// time out on a loaded machine.
func fastWebhooks(c *config.Config) {
	allowPrivate(c)
	c.Webhooks.Timeout = 10 * time.Second
	c.Webhooks.Backoff = config.Backoff{Base: 50 * time.Millisecond, Max: 400 * time.Millisecond}
}

func fastRunner(o *webhooks.Options) {
	o.PollInterval = 50 * time.Millisecond
	o.BacklogInterval = 100 * time.Millisecond
	o.ThrottleWindow = time.Second
	o.StallAfter = 2 * time.Second
}

// newWebhookEnv starts sheba with fast webhooks, its spans going to tp (if
// not nil).
func newWebhookEnv(t *testing.T, tp trace.TracerProvider) *testEnv {
	t.Helper()
	return startTestEnv(t, envSetup{
		tp:     tp,
		opts:   []app.Option{app.WithWebhookOptions(fastRunner)},
		mutate: []func(*config.Config){fastWebhooks},
	})
}

// createEndpoint registers url for types and returns its id and secret.
func (e *testEnv) createEndpoint(t *testing.T, url string, types ...string) (id, secret string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"url": url, "eventTypes": types})
	r := e.do(t, http.MethodPost, "/v1/webhookEndpoints", string(b))
	wantCode(t, r, http.StatusOK)
	m := r.JSON(t)
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
		m := r.JSON(t)
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

// TestWebhookSignedDelivery registers an endpoint and creates an account,
// both over REST: the endpoint gets the event, signed with the secret the
// registration answered and with the REST answer as its data, the delivery
// shows over REST, and the attempt reaches the service's log and /metrics.
// What a delivery is made of, its retries and its faults are tested in
// package webhooks.
func TestWebhookSignedDelivery(t *testing.T) {
	t.Parallel()
	e := newWebhookEnv(t, nil)
	rcv := webhookstest.NewReceiver(t, webhookstest.Status(http.StatusNoContent))
	endpointID, secret := e.createEndpoint(t, rcv.URL+"/hook", "account.created")

	r := e.do(t, http.MethodPost, "/v1/accounts", `{"username":"wendy","password":"password1"}`)
	wantCode(t, r, http.StatusOK)
	account := r.JSON(t)

	waitFor(t, 30*time.Second, "the delivery", func() bool { return e.allSucceeded(t, endpointID, 1) })
	got := rcv.Requests()
	if len(got) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(got))
	}
	ev, err := got[0].Verify(secret)
	if err != nil {
		t.Fatalf("with the secret of the endpoint: %v", err)
	}
	if ev.Type != "account.created" {
		t.Errorf("got type %q, want account.created", ev.Type)
	}
	if diff := cmp.Diff(account, ev.Data); diff != "" {
		t.Errorf("data (-REST answer +got):\n%s", diff)
	}
	d := e.deliveries(t, endpointID)[0]
	if d["eventId"] != got[0].Header.Get("webhook-id") || d["attempts"] != float64(1) || d["lastHttpStatus"] != float64(204) {
		t.Errorf("got delivery %v, want the event %s after 1 attempt answered 204", d, got[0].Header.Get("webhook-id"))
	}
	if n := strings.Count(e.logs.String(), `"msg":"webhook attempt"`); n != 1 {
		t.Errorf("got %d webhook attempt log lines, want 1", n)
	}
	if got := series(e.scrape(t), "sheba_webhook_attempts_total", "result"); got["result=success"] != 1 {
		t.Errorf("got sheba_webhook_attempts_total %v on /metrics, want 1 success", got)
	}
}

// TestWebhookRotateSecret rotates an endpoint's secret over REST (no body,
// {}, a CBOR answer) and gRPC: each answer is the new secret alone, and
// the endpoint's owner alone may rotate; a delivery afterwards carries the
// signatures of the newest secret and the one before it, in that order, and
// the secrets before those no longer verify.
func TestWebhookRotateSecret(t *testing.T) {
	t.Parallel()
	e := newWebhookEnv(t, nil)
	ctx := t.Context()
	c := shebav1.NewWebhookServiceClient(e.conn)
	rcv := webhookstest.NewReceiver(t, webhookstest.Status(http.StatusNoContent))
	id, created := e.createEndpoint(t, rcv.URL, "account.created")
	rotate := "/v1/webhookEndpoints/" + id + ":rotateSecret"

	secrets := []string{created}
	for _, test := range []struct {
		name   string
		body   string
		header []string
	}{
		{"REST, no body", "", nil},
		{"REST, {}", "{}", nil},
		{"REST, CBOR answer", "", []string{"Accept", "application/cbor"}},
	} {
		r := e.do(t, http.MethodPost, rotate, test.body, test.header...)
		wantCode(t, r, http.StatusOK)
		var m map[string]any
		if test.header != nil {
			m = cborObject(t, r.Body)
		} else {
			m = r.JSON(t)
		}
		secret, _ := m["secret"].(string)
		if len(m) != 1 {
			t.Errorf("%s: got %q, want {\"secret\": ...} alone", test.name, r.Body)
		}
		secrets = append(secrets, wantNewSecret(t, test.name, secret, secrets))
	}
	resp, err := c.RotateWebhookSecret(ctx, &shebav1.RotateWebhookSecretRequest{EndpointId: id})
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, wantNewSecret(t, "gRPC", resp.GetSecret(), secrets))

	// Refused rotations change nothing.
	for _, test := range []struct {
		name, key, id string
		httpCode      int
		code          codes.Code
		field         string
	}{
		{"another key", otherKey, id, http.StatusNotFound, codes.NotFound, ""},
		{"unknown id", testKey, "0b4f4e36-1b8b-4c1e-9a57-6f3c2b8f1d2a", http.StatusNotFound, codes.NotFound, ""},
		{"bad id", testKey, "not-a-uuid", http.StatusBadRequest, codes.InvalidArgument, "endpoint_id"},
	} {
		wantRESTError(t, e.do(t, http.MethodPost, "/v1/webhookEndpoints/"+test.id+":rotateSecret", "", "X-Api-Key", test.key), test.httpCode, test.code, test.field)
		_, err := c.RotateWebhookSecret(metadata.AppendToOutgoingContext(ctx, "x-api-key", test.key), &shebav1.RotateWebhookSecretRequest{EndpointId: test.id})
		wantGRPCError(t, err, test.code, test.field)
	}
	r := e.do(t, http.MethodGet, rotate, "")
	wantRESTError(t, r, http.StatusMethodNotAllowed, codes.Unimplemented, "")
	if got := r.Header.Get("Allow"); got != "POST" {
		t.Errorf("GET %s: got Allow %q, want POST", rotate, got)
	}

	wantCode(t, e.do(t, http.MethodPost, "/v1/accounts", `{"username":"rotated","password":"password1"}`), http.StatusOK)
	waitFor(t, 30*time.Second, "the delivery", func() bool { return e.allSucceeded(t, id, 1) })
	got := rcv.Requests()
	if len(got) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(got))
	}
	req := got[0]
	newest, before := secrets[len(secrets)-1], secrets[len(secrets)-2]
	sigs := strings.Split(req.Header.Get("webhook-signature"), " ")
	if len(sigs) != 2 {
		t.Fatalf("got webhook-signature %q, want two signatures a space apart", req.Header.Get("webhook-signature"))
	}
	// Each signature alone, verified by the Standard Webhooks library.
	for i, secret := range []string{newest, before} {
		one := webhookstest.Request{Header: req.Header.Clone(), Body: req.Body}
		one.Header.Set("webhook-signature", sigs[i])
		if _, err := one.Verify(secret); err != nil {
			t.Errorf("signature %d: %v", i+1, err)
		}
	}
	for i, secret := range secrets[:len(secrets)-2] {
		if _, err := req.Verify(secret); err == nil {
			t.Errorf("the secret of rotation %d verifies, want it dropped (two rotations since)", i)
		}
	}
}

// wantNewSecret checks that secret is "whsec_" and the base64 of 32 bytes,
// none of earlier, and returns it.
func wantNewSecret(t *testing.T, what, secret string, earlier []string) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if !strings.HasPrefix(secret, "whsec_") || err != nil || len(key) != 32 {
		t.Errorf("%s: got secret %q, want whsec_ and the base64 of 32 bytes", what, secret)
	}
	if slices.Contains(earlier, secret) {
		t.Errorf("%s: got secret %q again", what, secret)
	}
	return secret
}

// TestWebhookSpanLinksToRequest finds the span of an attempt linked to the
// span of the request that caused the event.
func TestWebhookSpanLinksToRequest(t *testing.T) {
	t.Parallel()
	tp, exp := newRecorder(t)
	e := newWebhookEnv(t, tp)
	rcv := webhookstest.NewReceiver(t, webhookstest.Status(http.StatusOK))
	e.createEndpoint(t, rcv.URL, "subscription.created")
	id := e.insertAccount(t, "traced")
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	wantCode(t, e.do(t, http.MethodPost, "/v1/accounts/"+id+"/subscription", `{"plan":"pro"}`,
		"Traceparent", "00-"+traceID+"-00f067aa0ba902b7-01"), http.StatusOK)
	waitFor(t, 30*time.Second, "the attempt's span", func() bool {
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
	rcv := webhookstest.NewReceiver(t, webhookstest.Status(http.StatusOK))
	endpointID, _ := e.createEndpoint(t, rcv.URL, "subscription.created", "subscription.canceled")
	id := e.insertAccount(t, "fay")
	if _, err := e.sub.CreateSubscription(t.Context(), &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"}); err != nil {
		t.Fatal(err)
	}
	_, err := e.sub.CreateSubscription(t.Context(), &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"})
	wantGRPCError(t, err, codes.AlreadyExists, "")
	_, err = e.sub.CreateSubscription(t.Context(), &shebav1.CreateSubscriptionRequest{AccountId: unknownID, Plan: "pro"})
	wantGRPCError(t, err, codes.NotFound, "")
	waitFor(t, 30*time.Second, "one delivery", func() bool { return e.allSucceeded(t, endpointID, 1) })
	var events int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM webhook_events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 1 {
		t.Errorf("got %d events, want 1: the 409 and the 404 must emit none", events)
	}
}

// TestWebhookDeliveriesTakeNoAPIConnection delivers 20 events, held at the
// receiver and then let through, while no API call runs: the business pool
// (sheba_db_pool_*) lends no connection to them, every query of the queue
// and of its workers going to the queue's own pool. (The idempotency reaper
// may take one meanwhile.)
func TestWebhookDeliveriesTakeNoAPIConnection(t *testing.T) {
	t.Parallel()
	const events = 20
	e := newWebhookEnv(t, nil)
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	rcv := webhookstest.NewReceiver(t, func(int, http.ResponseWriter) int {
		select {
		case <-release:
		case <-time.After(time.Minute):
		}
		return http.StatusNoContent
	})
	t.Cleanup(releaseOnce)
	endpointID, _ := e.createEndpoint(t, rcv.URL, "subscription.created")
	for i := range events {
		id := e.insertAccount(t, fmt.Sprintf("pooled%d", i))
		wantCode(t, e.do(t, http.MethodPost, "/v1/accounts/"+id+"/subscription", `{"plan":"pro"}`), http.StatusOK)
	}
	const pending = `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND state = 'pending'`
	waitFor(t, 30*time.Second, "every event fanned out and held at the receiver", func() bool {
		return e.count(t, pending, endpointID) == events && len(rcv.Requests()) > 0
	})
	acquires := func() float64 { return series(e.scrape(t), "sheba_db_pool_acquires_total", "pool")["pool=primary"] }
	before := acquires()
	releaseOnce()
	waitFor(t, 60*time.Second, "every event delivered", func() bool { return e.count(t, pending, endpointID) == 0 })
	took := acquires() - before
	t.Logf("the API's pool lent %.0f connections while %d deliveries ended", took, events)
	if took > 1 {
		t.Errorf("the API's pool lent %.0f connections to %d deliveries, want none (one for the idempotency reaper at most)", took, events)
	}
}
