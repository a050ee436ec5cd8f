package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
	ep, err := s.CreateWebhookEndpoint(ctx, store.WebhookEndpoint{Owner: "k", URL: "https://example.com/", EventTypes: []string{"account.created"}, Secret: "whsec_AAAA"}, 1)
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

// TestCreateWebhookEndpointLimit creates many endpoints of one owner at
// once: exactly the limit are stored, the others are ErrLimit; another
// owner has room of its own, and a duplicate URL is still ErrConflict.
func TestCreateWebhookEndpointLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	const limit, tries = 3, 12
	endpoint := func(owner string, i int) store.WebhookEndpoint {
		return store.WebhookEndpoint{Owner: owner, URL: fmt.Sprintf("https://example.com/%d", i), EventTypes: []string{"account.created"}, Secret: "whsec_AAAA"}
	}
	errs := make([]error, tries)
	var wg sync.WaitGroup
	for i := range tries {
		wg.Go(func() { _, errs[i] = s.CreateWebhookEndpoint(ctx, endpoint("a", i), limit) })
	}
	wg.Wait()
	created := 0
	for i, err := range errs {
		switch {
		case err == nil:
			created++
		case !errors.Is(err, store.ErrLimit):
			t.Errorf("create %d: got %v, want nil or ErrLimit", i, err)
		}
	}
	es, err := s.ListWebhookEndpoints(ctx, "a", 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	if created != limit || len(es) != limit {
		t.Errorf("%d creates at once: %d succeeded and %d stored, want %d", tries, created, len(es), limit)
	}
	if _, err := s.CreateWebhookEndpoint(ctx, endpoint("b", 0), limit); err != nil {
		t.Errorf("another owner: got %v, want its endpoint created", err)
	}
	if _, err := s.CreateWebhookEndpoint(ctx, endpoint("b", 0), limit); !errors.Is(err, store.ErrConflict) {
		t.Errorf("a duplicate URL: got %v, want ErrConflict", err)
	}
}
