package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

func TestDeleteEndedWebhookEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	ep, err := s.CreateWebhookEndpoint(ctx, store.WebhookEndpoint{Owner: "k", URL: "https://example.com/", EventTypes: []string{"account.created"}, Secret: "whsec_AAAA"})
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-8 * 24 * time.Hour)
	event := func(at time.Time, state store.DeliveryState) string {
		id := uuid.NewString()
		if err := s.CreateWebhookEvent(ctx, store.WebhookEvent{ID: id, Type: "account.created", Body: []byte("{}"), CreateTime: at}, []string{ep.ID}); err != nil {
			t.Fatal(err)
		}
		if state != store.DeliveryPending {
			if err := s.FinishDeliveryAttempt(ctx, ep.ID, id, store.DeliveryResult{State: state, At: at}); err != nil {
				t.Fatal(err)
			}
		}
		return id
	}
	event(old, store.DeliverySucceeded)
	event(old, store.DeliveryFailed)
	oldPending := event(old, store.DeliveryPending)
	recent := event(time.Now(), store.DeliverySucceeded)

	n, err := s.DeleteEndedWebhookEvents(ctx, time.Now().Add(-7*24*time.Hour), 100)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("deleted %d events, want the 2 old ended ones", n)
	}
	ds, err := s.ListWebhookDeliveries(ctx, ep.ID, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, d := range ds {
		left = append(left, d.EventID)
	}
	if len(left) != 2 || !(left[0] == recent && left[1] == oldPending) {
		t.Errorf("deliveries left %v, want the recent one and the old pending one (%s, %s)", left, recent, oldPending)
	}
}
