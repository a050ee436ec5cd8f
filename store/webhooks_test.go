package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"

	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

// createEndpoint stores an endpoint of owner "k" signed with secret.
func createEndpoint(t *testing.T, s *store.Store, secret string) store.WebhookEndpoint {
	t.Helper()
	ep, err := s.CreateWebhookEndpoint(t.Context(), store.WebhookEndpoint{Owner: "k", URL: "https://example.com/", EventTypes: []string{"account.created"}, Secret: secret}, 1)
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

func TestDeleteEndedWebhookEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	ep := createEndpoint(t, s, "whsec_AAAA")
	old := time.Now().Add(-8 * 24 * time.Hour)
	event := func(at time.Time, state store.DeliveryState) string {
		id := uuid.NewString()
		if err := s.CreateWebhookEvent(ctx, store.WebhookEvent{ID: id, Type: "account.created", Body: []byte("{}"), CreateTime: at}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ExpandWebhookEvent(ctx, id, "", 10, 10); err != nil {
			t.Fatal(err)
		}
		if state != store.DeliveryPending {
			if _, err := s.FinishDeliveryAttempt(ctx, ep.ID, id, store.DeliveryResult{State: state, At: at}); err != nil {
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

// TestRotateWebhookSecret rotates the secret of an endpoint: the secret it
// replaces signs beside it until the time given, the one a rotation
// before kept is dropped, and the endpoint of another owner, or of no one,
// is ErrNotFound and keeps its secret.
func TestRotateWebhookSecret(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := store.New(storetest.NewPool(t))
	ep := createEndpoint(t, s, "whsec_AAAA")
	if ep.PreviousSecret != "" || ep.PreviousExpireTime != nil {
		t.Errorf("created: got previous secret %q until %v, want none", ep.PreviousSecret, ep.PreviousExpireTime)
	}
	// Whole seconds: Postgres keeps microseconds.
	now := time.Now().Truncate(time.Second)
	until := now.Add(time.Hour)

	rotated, err := s.RotateWebhookSecret(ctx, "k", ep.ID, "whsec_BBBB", until)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Secret != "whsec_BBBB" || rotated.PreviousSecret != "whsec_AAAA" || rotated.PreviousExpireTime == nil || !rotated.PreviousExpireTime.Equal(until) {
		t.Errorf("rotated: got secret %q, previous %q until %v; want whsec_BBBB, whsec_AAAA until %v",
			rotated.Secret, rotated.PreviousSecret, rotated.PreviousExpireTime, until)
	}
	got, err := s.GetWebhookEndpoint(ctx, "k", ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rotated, got); diff != "" {
		t.Errorf("stored (-rotated +got):\n%s", diff)
	}
	// What a delivery attempt reads signs with both until the overlap
	// ends, then with the new secret alone.
	event := uuid.NewString()
	if err := s.CreateWebhookEvent(ctx, store.WebhookEvent{ID: event, Type: "account.created", Body: []byte("{}"), CreateTime: now}); err != nil {
		t.Fatal(err)
	}
	expandAll(t, s, event, 500, 32)
	a, err := s.GetDeliveryAttempt(ctx, ep.ID, event)
	if err != nil {
		t.Fatal(err)
	}
	for _, test := range []struct {
		name string
		at   time.Time
		want []string
	}{
		{"during the overlap", until.Add(-time.Microsecond), []string{"whsec_BBBB", "whsec_AAAA"}},
		{"at its end", until, []string{"whsec_BBBB"}},
		{"after it", until.Add(time.Hour), []string{"whsec_BBBB"}},
	} {
		if diff := cmp.Diff(test.want, a.Endpoint.SigningSecrets(test.at)); diff != "" {
			t.Errorf("delivery attempt %s: signing secrets (-want +got):\n%s", test.name, diff)
		}
	}

	// A second rotation within the overlap: the newest two sign.
	rotated, err = s.RotateWebhookSecret(ctx, "k", ep.ID, "whsec_CCCC", until.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"whsec_CCCC", "whsec_BBBB"}, rotated.SigningSecrets(now)); diff != "" {
		t.Errorf("rotated twice: signing secrets (-want +got):\n%s", diff)
	}
	// An overlap of 0: the replaced secret stops at once.
	at := time.Now()
	rotated, err = s.RotateWebhookSecret(ctx, "k", ep.ID, "whsec_DDDD", at)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"whsec_DDDD"}, rotated.SigningSecrets(at)); diff != "" {
		t.Errorf("rotated with no overlap: signing secrets (-want +got):\n%s", diff)
	}

	for _, test := range []struct{ name, owner, id string }{
		{"another owner", "other", ep.ID},
		{"unknown id", "k", uuid.NewString()},
	} {
		if _, err := s.RotateWebhookSecret(ctx, test.owner, test.id, "whsec_EEEE", until); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: got %v, want ErrNotFound", test.name, err)
		}
	}
	if got, err := s.GetWebhookEndpoint(ctx, "k", ep.ID); err != nil || got.Secret != "whsec_DDDD" {
		t.Errorf("after the refused rotations: got secret %q (%v), want whsec_DDDD", got.Secret, err)
	}
}

// TestRotateWebhookSecretAtOnce rotates one endpoint many times at once:
// the rotations take turns, so each secret but the last is replaced by
// exactly one rotation, and the first secret by one too.
func TestRotateWebhookSecretAtOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := store.New(storetest.NewPool(t))
	ep := createEndpoint(t, s, "whsec_first")
	const n = 8
	results := make([]store.WebhookEndpoint, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			results[i], errs[i] = s.RotateWebhookSecret(ctx, "k", ep.ID, fmt.Sprintf("whsec_%d", i), time.Now().Add(time.Hour))
		})
	}
	wg.Wait()
	replaced := map[string]int{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rotation %d: %v", i, err)
		}
		replaced[results[i].PreviousSecret]++
	}
	last, err := s.GetWebhookEndpoint(ctx, "k", ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"whsec_first": 1}
	for i := range n {
		if s := fmt.Sprintf("whsec_%d", i); s != last.Secret {
			want[s] = 1
		}
	}
	if diff := cmp.Diff(want, replaced); diff != "" {
		t.Errorf("secrets replaced, by how many rotations (-want +got):\n%s", diff)
	}
}

// expandAll writes the deliveries of the event in batches of batch
// endpoints, as the fan-out job does, and returns the endpoints that got a
// place in the queue, by batch.
func expandAll(tb testing.TB, s *store.Store, eventID string, batch, window int) [][]string {
	tb.Helper()
	var queued [][]string
	after := ""
	for range 100 {
		b, err := s.ExpandWebhookEvent(tb.Context(), eventID, after, batch, window)
		if err != nil {
			tb.Fatalf("ExpandWebhookEvent(%s after %q): %v", eventID, after, err)
		}
		queued = append(queued, b.Queued)
		if b.Endpoints < batch {
			return queued
		}
		after = b.Last
	}
	tb.Fatal("ExpandWebhookEvent: more than 100 batches")
	return nil
}

// TestExpandWebhookEvent fans events out in batches of two: an event goes
// to the enabled endpoints of its type whose creation had committed when
// the event was written, not to an endpoint created later nor to one whose
// creation was still running; an endpoint with a full share of the queue
// gets a waiting delivery, which takes the place of one that ends; and
// expanding an event again writes nothing.
func TestExpandWebhookEvent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := store.New(storetest.NewPool(t))
	create := func(ctx context.Context, name string, types ...string) string {
		t.Helper()
		ep, err := s.CreateWebhookEndpoint(ctx, store.WebhookEndpoint{Owner: "k", URL: "https://example.com/" + name, EventTypes: types, Secret: "whsec_AAAA"}, 100)
		if err != nil {
			t.Fatal(err)
		}
		return ep.ID
	}
	event := func() string {
		t.Helper()
		id := uuid.NewString()
		if err := s.CreateWebhookEvent(ctx, store.WebhookEvent{ID: id, Type: "account.created", Body: []byte("{}"), CreateTime: time.Now()}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	a := create(ctx, "a", "account.created")
	b := create(ctx, "b", "subscription.created", "account.created")
	create(ctx, "c", "subscription.created")
	off := create(ctx, "off", "account.created")
	if err := s.DisableWebhookEndpoint(ctx, off, "test"); err != nil {
		t.Fatal(err)
	}
	var first, running string
	// The event is written while the creation of an endpoint is under way.
	if err := s.InTx(ctx, func(ctx context.Context) error {
		running = create(ctx, "running", "account.created")
		first = event()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	later := create(ctx, "later", "account.created")

	const window = 1
	queuedTo := func(batches [][]string) []string {
		var all []string
		for _, q := range batches {
			all = append(all, q...)
		}
		return all
	}
	sorted := cmpopts.SortSlices(func(x, y string) bool { return x < y })
	if diff := cmp.Diff([]string{a, b}, queuedTo(expandAll(t, s, first, 2, window)), sorted); diff != "" {
		t.Errorf("first event queued to (-want +got):\n%s", diff)
	}
	// a and b have a full share now: the second event waits for them.
	second := event()
	if diff := cmp.Diff([]string{running, later}, queuedTo(expandAll(t, s, second, 2, window)), sorted); diff != "" {
		t.Errorf("second event queued to (-want +got):\n%s", diff)
	}
	if got := queuedTo(expandAll(t, s, first, 2, window)); len(got) != 0 {
		t.Errorf("the first event again: queued to %v, want nothing new", got)
	}
	for _, test := range []struct {
		name string
		id   string
		want []string // events, newest first
	}{
		{"a", a, []string{second, first}},
		{"running", running, []string{second}},
		{"later", later, []string{second}},
		{"off", off, nil},
	} {
		ds, err := s.ListWebhookDeliveries(ctx, test.id, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range ds {
			got = append(got, d.EventID)
			if d.State != store.DeliveryPending || d.Attempts != 0 || d.NextAttemptTime == nil {
				t.Errorf("endpoint %s: got delivery %+v, want it pending, not attempted, due", test.name, d)
			}
		}
		if diff := cmp.Diff(test.want, got); diff != "" {
			t.Errorf("endpoint %s: deliveries (-want +got):\n%s", test.name, diff)
		}
	}

	// The first delivery to a ends: the second takes its place.
	err := s.InTx(ctx, func(ctx context.Context) error {
		if _, err := s.LockWebhookEndpointHealth(ctx, a); err != nil {
			return err
		}
		ended, err := s.FinishDeliveryAttempt(ctx, a, first, store.DeliveryResult{State: store.DeliverySucceeded, HTTPStatus: 200, At: time.Now()})
		if err != nil || !ended {
			return fmt.Errorf("finish: got ended %v, %v; want it ended", ended, err)
		}
		next, ok, err := s.QueueWaitingDelivery(ctx, a)
		if err != nil || !ok || next != second {
			return fmt.Errorf("QueueWaitingDelivery: got %q, %v, %v; want the second event", next, ok, err)
		}
		if _, ok, err := s.QueueWaitingDelivery(ctx, a); err != nil || ok {
			return fmt.Errorf("QueueWaitingDelivery again: got %v, %v; want none waiting", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
