package webhooks

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/timestamppb"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/webhooks/webhookstest"
)

// TestDeliverySignedAndRecorded publishes three events to a running runner
// and an endpoint that receives two of their types: each of the two
// arrives once, signed with the endpoint's secret, its body the event's
// type and time and the resource as the REST API shows it; the delivery
// says what happened, and each attempt has its log line and its metrics.
func TestDeliverySignedAndRecorded(t *testing.T) {
	t.Parallel()
	b := newTestbed(t, nil)
	rcv := webhookstest.NewReceiver(t, webhookstest.Status(http.StatusNoContent))
	ep := b.endpoint(t, rcv.URL+"/hook", "account.created", "subscription.created")
	run(t, b.r)

	created := timestamppb.New(time.Date(2026, 12, 1, 10, 0, 0, 120001000, time.UTC))
	account := &shebav1.Account{Id: uuid.NewString(), Username: "wendy", CreateTime: created}
	sub := &shebav1.Subscription{
		Id: uuid.NewString(), AccountId: account.Id, Plan: "pro",
		Status: shebav1.SubscriptionStatus_SUBSCRIPTION_STATUS_ACTIVE, CreateTime: created, Etag: "dFm2Ea0WNy7Pz1jj",
	}
	b.publish(t, "account.created", account)
	b.publish(t, "subscription.created", sub)
	// Not a type the endpoint asked for.
	b.publish(t, "subscription.canceled", sub)

	ds := b.waitDeliveries(t, ep.ID, 30*time.Second, "two deliveries succeeded", all(2, store.DeliverySucceeded))
	// The resource's REST JSON: lowerCamelCase names, enums by name, unset
	// messages left out.
	wantData := map[string]map[string]any{
		"account.created": {"id": account.Id, "username": "wendy", "createTime": "2026-12-01T10:00:00.120001Z"},
		"subscription.created": {
			"id": sub.Id, "accountId": account.Id, "plan": "pro",
			"status": "SUBSCRIPTION_STATUS_ACTIVE", "createTime": "2026-12-01T10:00:00.120001Z", "etag": "dFm2Ea0WNy7Pz1jj",
		},
	}
	byEvent := map[string]store.WebhookDelivery{}
	for _, d := range ds {
		byEvent[d.EventID] = d
	}
	got := rcv.Requests()
	if len(got) != 2 {
		t.Fatalf("receiver got %d requests, want 2 (no subscription.canceled)", len(got))
	}
	for _, req := range got {
		ev, err := req.Verify(ep.Secret)
		if err != nil {
			t.Errorf("with the endpoint's secret: %v", err)
			continue
		}
		if diff := cmp.Diff(wantData[ev.Type], ev.Data); diff != "" {
			t.Errorf("%s data (-want +got):\n%s", ev.Type, diff)
		}
		if ct := req.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("got Content-Type %q, want application/json", ct)
		}
		d, ok := byEvent[req.Header.Get("webhook-id")]
		if !ok {
			t.Errorf("got webhook-id %q, want the event id of a delivery (%v)", req.Header.Get("webhook-id"), ds)
			continue
		}
		if d.EventType != ev.Type || !ev.Timestamp.Equal(d.CreateTime) {
			t.Errorf("got type %s at %v, want the event's, %s at %v", ev.Type, ev.Timestamp, d.EventType, d.CreateTime)
		}
	}
	for _, d := range ds {
		if d.Attempts != 1 || d.LastHTTPStatus != http.StatusNoContent || d.LastError != "" || d.LastAttemptTime == nil || d.NextAttemptTime != nil {
			t.Errorf("got delivery %+v, want 1 attempt, status 204, no error, no next attempt", d)
		}
	}

	lines := b.log.attempts()
	if len(lines) != 2 {
		t.Fatalf("got %d webhook attempt log lines, want 2: %v", len(lines), lines)
	}
	for _, l := range lines {
		if l["endpoint_id"] != ep.ID || l["attempt"] != int64(1) || l["http_status"] != int64(204) || l["result"] != "success" || l["state"] != "succeeded" {
			t.Errorf("got log line %v, want attempt 1 to the endpoint, 204, success, succeeded", l)
		}
	}
	const want = `
# HELP sheba_webhook_attempts_total Webhook requests sent, by result: success, http_error, gone, timeout, network_error.
# TYPE sheba_webhook_attempts_total counter
sheba_webhook_attempts_total{result="gone"} 0
sheba_webhook_attempts_total{result="http_error"} 0
sheba_webhook_attempts_total{result="network_error"} 0
sheba_webhook_attempts_total{result="success"} 2
sheba_webhook_attempts_total{result="timeout"} 0
# HELP sheba_webhook_deliveries_total Webhook deliveries ended, by state: succeeded, failed.
# TYPE sheba_webhook_deliveries_total counter
sheba_webhook_deliveries_total{state="failed"} 0
sheba_webhook_deliveries_total{state="succeeded"} 2
`
	if err := testutil.GatherAndCompare(b.reg, strings.NewReader(want), "sheba_webhook_attempts_total", "sheba_webhook_deliveries_total"); err != nil {
		t.Error(err)
	}
	families, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if name := f.GetName(); name == "sheba_webhook_delivery_latency_seconds" || name == "sheba_webhook_attempt_duration_seconds" {
			if n := f.GetMetric()[0].GetHistogram().GetSampleCount(); n != 2 {
				t.Errorf("%s: got %d samples, want 2", name, n)
			}
		}
	}
}

// TestDeliveryAfterRotation delivers an event during the overlap of a
// rotation and one after it. During it, the request carries two
// signatures, the new secret's first, and a receiver that holds either
// secret verifies it with a Standard Webhooks library; after it, one
// signature, which only the new secret verifies.
func TestDeliveryAfterRotation(t *testing.T) {
	t.Parallel()
	b := newTestbed(t, nil)
	rcv := webhookstest.NewReceiver(t, webhookstest.Status(http.StatusNoContent))
	ep := b.endpoint(t, rcv.URL, "account.created")
	run(t, b.r)
	ctx := t.Context()
	rotated, err := b.st.RotateWebhookSecret(ctx, testOwner, ep.ID, testSecret(), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	oldSecret, newSecret := ep.Secret, rotated.Secret

	b.publish(t, "account.created", &shebav1.Account{Id: uuid.NewString(), Username: "during"})
	b.waitDeliveries(t, ep.ID, 30*time.Second, "the delivery during the overlap", all(1, store.DeliverySucceeded))
	// The overlap's end, without waiting for it: the time the rotation
	// set, moved to now.
	if _, err := b.pool.Exec(ctx, `UPDATE webhook_endpoints SET previous_expire_time = now() WHERE id = $1`, ep.ID); err != nil {
		t.Fatal(err)
	}
	b.publish(t, "account.created", &shebav1.Account{Id: uuid.NewString(), Username: "after"})
	b.waitDeliveries(t, ep.ID, 30*time.Second, "the delivery after the overlap", all(2, store.DeliverySucceeded))

	got := rcv.Requests()
	if len(got) != 2 {
		t.Fatalf("receiver got %d requests, want 2", len(got))
	}
	for i, test := range []struct {
		name    string
		signers []string // the secrets whose signatures the header holds, in order
	}{
		{"during the overlap", []string{newSecret, oldSecret}},
		{"after the overlap", []string{newSecret}},
	} {
		req := got[i]
		ts, err := strconv.ParseInt(req.Header.Get("webhook-timestamp"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, secret := range test.signers {
			sig, err := Sign([]string{secret}, req.Header.Get("webhook-id"), ts, req.Body)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, sig)
		}
		if got := req.Header.Get("webhook-signature"); got != strings.Join(want, " ") {
			t.Errorf("%s: got webhook-signature %q, want %q", test.name, got, strings.Join(want, " "))
		}
		for _, holder := range []struct {
			name   string
			secret string
		}{{"old", oldSecret}, {"new", newSecret}} {
			_, err := req.Verify(holder.secret)
			if ok := slices.Contains(test.signers, holder.secret); (err == nil) != ok {
				t.Errorf("%s: a receiver holding the %s secret: got %v, want it verified %v", test.name, holder.name, err, ok)
			}
		}
	}
}

// TestBacklogGauge holds three deliveries at the receiver until the
// backlog gauge counts them, then lets them through: the gauge follows the
// pending deliveries down to 0.
func TestBacklogGauge(t *testing.T) {
	t.Parallel()
	// No attempt may time out while the test looks at the gauge.
	b := newTestbed(t, func(o *Options) { o.Timeout = time.Minute })
	held := make(chan struct{})
	rcv := webhookstest.NewReceiver(t, func(int, http.ResponseWriter) int {
		select {
		case <-held:
		case <-time.After(time.Minute):
		}
		return http.StatusOK
	})
	// Also when the test fails, before the receiver waits for its requests.
	release := sync.OnceFunc(func() { close(held) })
	t.Cleanup(release)
	ep := b.endpoint(t, rcv.URL, "subscription.created", "subscription.canceled")
	run(t, b.r)
	b.churn(t, 3)
	b.waitDeliveries(t, ep.ID, 30*time.Second, "the backlog gauge at 3", func([]store.WebhookDelivery) bool {
		return testutil.ToFloat64(b.r.m.backlog) == 3
	})
	release()
	b.waitDeliveries(t, ep.ID, 30*time.Second, "every delivery succeeded and the backlog gauge at 0", func(ds []store.WebhookDelivery) bool {
		return all(3, store.DeliverySucceeded)(ds) && testutil.ToFloat64(b.r.m.backlog) == 0
	})
}

// TestFlakyReceiverGetsEveryEvent fails every other request, in a
// different way each time: every event is delivered in the end.
func TestFlakyReceiverGetsEveryEvent(t *testing.T) {
	t.Parallel()
	b := newTestbed(t, nil)
	fails := []int{http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusMovedPermanently, http.StatusBadRequest}
	rcv := webhookstest.NewReceiver(t, func(n int, _ http.ResponseWriter) int {
		if n%2 == 0 {
			return fails[(n/2)%len(fails)]
		}
		return http.StatusOK
	})
	ep := b.endpoint(t, rcv.URL, "subscription.created", "subscription.canceled")
	run(t, b.r)
	const events = 20
	b.churn(t, events)
	b.waitDeliveries(t, ep.ID, 60*time.Second, "every event delivered", all(events, store.DeliverySucceeded))
	if n := len(rcv.IDs()); n != events {
		t.Errorf("receiver saw %d distinct webhook-ids, want %d", n, events)
	}
}
