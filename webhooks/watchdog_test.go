package webhooks

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/webhooks/webhookstest"
)

// TestStalledQueueRestarted: the queue's producer gone while the client
// runs (as River leaves it when its connection breaks while the producer
// starts: watchdog.go), an event published then is still delivered, once
// the watchdog has replaced the producer; an idle queue with nothing due
// is left alone.
func TestStalledQueueRestarted(t *testing.T) {
	t.Parallel()
	const stallAfter = time.Second
	b := newTestbed(t, func(o *Options) { o.StallAfter = stallAfter })
	rcv := webhookstest.NewReceiver(t, webhookstest.Status(http.StatusNoContent))
	ep := b.endpoint(t, rcv.URL+"/hook", "account.created")
	run(t, b.r)

	b.publish(t, "account.created", &shebav1.Account{Id: uuid.NewString(), Username: "before"})
	b.waitDeliveries(t, ep.ID, 30*time.Second, "the delivery of the first event", all(1, store.DeliverySucceeded))
	// Idle, with no job due: no restart.
	time.Sleep(3 * stallAfter)
	if n := testutil.ToFloat64(b.r.m.queueRestarts); n != 0 {
		t.Fatalf("sheba_webhook_queue_restarts_total of an idle queue: got %v, want 0", n)
	}

	if err := b.r.river.Queues().Remove(t.Context(), queue); err != nil {
		t.Fatal(err)
	}
	b.publish(t, "account.created", &shebav1.Account{Id: uuid.NewString(), Username: "stalled"})
	b.waitDeliveries(t, ep.ID, 30*time.Second, "the delivery of an event published while the producer was gone", all(2, store.DeliverySucceeded))
	if n := testutil.ToFloat64(b.r.m.queueRestarts); n != 1 {
		t.Errorf("sheba_webhook_queue_restarts_total: got %v, want 1", n)
	}
	if got := len(rcv.Requests()); got != 2 {
		t.Errorf("requests received: got %d, want 2", got)
	}
}
