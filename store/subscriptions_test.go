package store_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shebasvc/sheba/internal/etag"
	"github.com/shebasvc/sheba/store"
	"github.com/shebasvc/sheba/store/storetest"
)

// ignoreGenerated leaves out the fields the database picks.
var ignoreGenerated = cmpopts.IgnoreFields(store.Subscription{}, "ID", "CreateTime", "CancelTime")

func TestCreateSubscription(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ada := mustCreateAccount(t, s, "ada")

	got, err := s.CreateSubscription(t.Context(), ada.ID, "pro")
	if err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	want := store.Subscription{AccountID: ada.ID, Plan: "pro", Status: store.StatusActive, Version: 1}
	if diff := cmp.Diff(want, got, ignoreGenerated); diff != "" {
		t.Errorf("CreateSubscription mismatch (-want +got):\n%s", diff)
	}
	checkUUID(t, "ID", got.ID)
	checkRecent(t, "CreateTime", got.CreateTime)
	if got.CancelTime != nil {
		t.Errorf("CancelTime: got %v, want nil", *got.CancelTime)
	}

	for _, test := range []struct {
		name      string
		accountID string
		wantErr   error
	}{
		{name: "already active", accountID: ada.ID, wantErr: store.ErrConflict},
		{name: "unknown account", accountID: uuid.NewString(), wantErr: store.ErrNotFound},
		{name: "malformed account id", accountID: "not-a-uuid", wantErr: store.ErrNotFound},
	} {
		t.Run(test.name, func(t *testing.T) {
			_, err := s.CreateSubscription(t.Context(), test.accountID, "basic")
			if !errors.Is(err, test.wantErr) {
				t.Errorf("CreateSubscription(%q): got %v, want %v", test.accountID, err, test.wantErr)
			}
		})
	}

	// The conflict left the first subscription as it was.
	active, err := s.GetActiveSubscription(t.Context(), ada.ID)
	if err != nil {
		t.Fatalf("GetActiveSubscription: %v", err)
	}
	if diff := cmp.Diff(got, active); diff != "" {
		t.Errorf("active subscription mismatch (-want +got):\n%s", diff)
	}
}

// TestCreateSubscriptionConcurrent races creates for one account: the
// database, not a check in Go, must let exactly one win.
func TestCreateSubscriptionConcurrent(t *testing.T) {
	t.Parallel()
	const n = 20
	cfg, err := pgxpool.ParseConfig(storetest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	// One connection per goroutine, so the inserts really meet in Postgres.
	cfg.MaxConns = n
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// Open every connection before the race, so connecting does not
	// serialize the goroutines.
	conns := make([]*pgxpool.Conn, n)
	for i := range conns {
		if conns[i], err = pool.Acquire(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range conns {
		c.Release()
	}

	s := store.New(pool)
	ada := mustCreateAccount(t, s, "ada")

	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		subs  = make([]store.Subscription, n)
		errs  = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			subs[i], errs[i] = s.CreateSubscription(t.Context(), ada.ID, fmt.Sprintf("plan-%d", i))
		})
	}
	close(start)
	wg.Wait()

	var winners []store.Subscription
	conflicts := 0
	for i, err := range errs {
		switch {
		case err == nil:
			winners = append(winners, subs[i])
		case errors.Is(err, store.ErrConflict):
			conflicts++
		default:
			t.Errorf("goroutine %d: got %v, want nil or ErrConflict", i, err)
		}
	}
	if len(winners) != 1 || conflicts != n-1 {
		t.Fatalf("got %d successes and %d conflicts, want 1 and %d", len(winners), conflicts, n-1)
	}
	active, err := s.GetActiveSubscription(t.Context(), ada.ID)
	if err != nil {
		t.Fatalf("GetActiveSubscription: %v", err)
	}
	if diff := cmp.Diff(winners[0], active); diff != "" {
		t.Errorf("active subscription mismatch (-want +got):\n%s", diff)
	}
}

func TestGetActiveSubscription(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ada := mustCreateAccount(t, s, "ada")
	grace := mustCreateAccount(t, s, "grace")
	sub, err := s.CreateSubscription(t.Context(), ada.ID, "pro")
	if err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}

	for _, test := range []struct {
		name      string
		accountID string
		want      store.Subscription
		wantErr   error
	}{
		{name: "active", accountID: ada.ID, want: sub},
		{name: "no subscription", accountID: grace.ID, wantErr: store.ErrNotFound},
		{name: "unknown account", accountID: uuid.NewString(), wantErr: store.ErrNotFound},
		{name: "malformed account id", accountID: "not-a-uuid", wantErr: store.ErrNotFound},
	} {
		t.Run(test.name, func(t *testing.T) {
			got, err := s.GetActiveSubscription(t.Context(), test.accountID)
			if !errors.Is(err, test.wantErr) {
				t.Fatalf("GetActiveSubscription(%q): got error %v, want %v", test.accountID, err, test.wantErr)
			}
			if diff := cmp.Diff(test.want, got); diff != "" {
				t.Errorf("GetActiveSubscription(%q) mismatch (-want +got):\n%s", test.accountID, diff)
			}
		})
	}

	if _, err := s.CancelSubscription(t.Context(), ada.ID, etag.Condition{}); err != nil {
		t.Fatalf("CancelSubscription: %v", err)
	}
	if _, err := s.GetActiveSubscription(t.Context(), ada.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetActiveSubscription after cancel: got %v, want ErrNotFound", err)
	}
}

func TestCancelSubscription(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ada := mustCreateAccount(t, s, "ada")

	for _, test := range []struct {
		name      string
		accountID string
	}{
		{name: "no subscription", accountID: ada.ID},
		{name: "unknown account", accountID: uuid.NewString()},
		{name: "malformed account id", accountID: "not-a-uuid"},
	} {
		t.Run(test.name, func(t *testing.T) {
			if _, err := s.CancelSubscription(t.Context(), test.accountID, etag.Condition{}); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("CancelSubscription(%q): got %v, want ErrNotFound", test.accountID, err)
			}
		})
	}

	first, err := s.CreateSubscription(t.Context(), ada.ID, "pro")
	if err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	canceled, err := s.CancelSubscription(t.Context(), ada.ID, etag.Condition{})
	if err != nil {
		t.Fatalf("CancelSubscription: %v", err)
	}
	want := first
	want.Status = store.StatusCanceled
	want.Version = 2
	if diff := cmp.Diff(want, canceled, cmpopts.IgnoreFields(store.Subscription{}, "CancelTime")); diff != "" {
		t.Errorf("CancelSubscription mismatch (-want +got):\n%s", diff)
	}
	if canceled.CancelTime == nil {
		t.Fatal("CancelTime: got nil, want the time of the cancel")
	}
	checkRecent(t, "CancelTime", *canceled.CancelTime)
	if canceled.CancelTime.Before(canceled.CreateTime) {
		t.Errorf("CancelTime %v is before CreateTime %v", *canceled.CancelTime, canceled.CreateTime)
	}

	if _, err := s.CancelSubscription(t.Context(), ada.ID, etag.Condition{}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second CancelSubscription: got %v, want ErrNotFound", err)
	}

	// A canceled subscription does not block a new one.
	second, err := s.CreateSubscription(t.Context(), ada.ID, "basic")
	if err != nil {
		t.Fatalf("CreateSubscription after cancel: %v", err)
	}
	if second.ID == first.ID {
		t.Errorf("the new subscription reused ID %q", first.ID)
	}
	active, err := s.GetActiveSubscription(t.Context(), ada.ID)
	if err != nil {
		t.Fatalf("GetActiveSubscription: %v", err)
	}
	if diff := cmp.Diff(second, active); diff != "" {
		t.Errorf("active subscription mismatch (-want +got):\n%s", diff)
	}
}

// TestCancelSubscriptionETag checks a conditional cancel: under a
// condition the etag does not meet it changes nothing; under one it meets
// it cancels, and the etag changes; an account with no active subscription
// is ErrNotFound whatever the condition.
func TestCancelSubscriptionETag(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ada := mustCreateAccount(t, s, "ada")
	first, err := s.CreateSubscription(t.Context(), ada.ID, "pro")
	if err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	if got, want := first.ETag(), etag.Of(first.ID, 1); got != want {
		t.Errorf("ETag of a new subscription: got %q, want %q", got, want)
	}
	quoted := etag.Quote(first.ETag())
	for _, test := range []struct {
		name string
		cond etag.Condition
	}{
		{"another etag", etag.NewCondition(etag.Of(first.ID, 2), nil)},
		{"another subscription's", etag.NewCondition(etag.Of(uuid.NewString(), 1), nil)},
		{"If-Match, another etag", etag.NewCondition("", []string{`"` + etag.Of(first.ID, 2) + `"`})},
		{"If-Match, weak", etag.NewCondition("", []string{"W/" + quoted})},
		{"field matches, If-Match not", etag.NewCondition(first.ETag(), []string{`"x"`})},
	} {
		t.Run(test.name, func(t *testing.T) {
			if _, err := s.CancelSubscription(t.Context(), ada.ID, test.cond); !errors.Is(err, store.ErrETagMismatch) {
				t.Errorf("CancelSubscription: got %v, want ErrETagMismatch", err)
			}
			active, err := s.GetActiveSubscription(t.Context(), ada.ID)
			if err != nil {
				t.Fatalf("GetActiveSubscription: %v", err)
			}
			if diff := cmp.Diff(first, active); diff != "" {
				t.Errorf("after a refused cancel (-want +got):\n%s", diff)
			}
		})
	}

	canceled, err := s.CancelSubscription(t.Context(), ada.ID, etag.NewCondition(first.ETag(), []string{`"x", ` + quoted}))
	if err != nil {
		t.Fatalf("CancelSubscription with the current etag: %v", err)
	}
	if canceled.Status != store.StatusCanceled || canceled.Version != 2 || canceled.ETag() == first.ETag() {
		t.Errorf("canceled: got %+v (etag %q), want canceled at version 2 with an etag other than %q", canceled, canceled.ETag(), first.ETag())
	}
	for _, cond := range []etag.Condition{etag.NewCondition(canceled.ETag(), nil), etag.NewCondition("", []string{"*"})} {
		if _, err := s.CancelSubscription(t.Context(), ada.ID, cond); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("CancelSubscription of a canceled subscription under %+v: got %v, want ErrNotFound", cond, err)
		}
	}
}

// TestUpdateSubscriptionPlan changes the plan of the active subscription:
// a new plan is a new version (and etag), the same plan changes nothing,
// another etag refuses the change, and an account with no active
// subscription is not found, whatever the etag.
func TestUpdateSubscriptionPlan(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ada := mustCreateAccount(t, s, "ada")
	first, err := s.CreateSubscription(t.Context(), ada.ID, "pro")
	if err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	updated, changed, err := s.UpdateSubscriptionPlan(t.Context(), ada.ID, "team", etag.Condition{})
	if err != nil || !changed || updated.Plan != "team" || updated.Version != 2 || updated.ID != first.ID || updated.Status != store.StatusActive {
		t.Fatalf("UpdateSubscriptionPlan: got %+v, changed %v, %v; want plan team at version 2, changed", updated, changed, err)
	}
	same, changed, err := s.UpdateSubscriptionPlan(t.Context(), ada.ID, "team", etag.NewCondition(updated.ETag(), nil))
	if err != nil || changed || cmp.Diff(updated, same) != "" {
		t.Errorf("the same plan again: got %+v, changed %v, %v; want %+v unchanged", same, changed, err, updated)
	}
	for _, cond := range []etag.Condition{etag.NewCondition(first.ETag(), nil), etag.NewCondition("", []string{`W/"` + updated.ETag() + `"`})} {
		if _, _, err := s.UpdateSubscriptionPlan(t.Context(), ada.ID, "solo", cond); !errors.Is(err, store.ErrETagMismatch) {
			t.Errorf("under %+v: got %v, want ErrETagMismatch", cond, err)
		}
	}
	active, err := s.GetActiveSubscription(t.Context(), ada.ID)
	if err != nil || cmp.Diff(updated, active) != "" {
		t.Errorf("after the refused changes: got %+v, %v; want %+v", active, err, updated)
	}
	bob := mustCreateAccount(t, s, "bob")
	if _, _, err := s.UpdateSubscriptionPlan(t.Context(), bob.ID, "solo", etag.NewCondition(first.ETag(), nil)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("no active subscription: got %v, want ErrNotFound", err)
	}
}

// TestCancelSubscriptionETagConcurrent races conditional cancels of one
// subscription under its etag: the row lock lets one win, and the others
// find no active subscription.
func TestCancelSubscriptionETagConcurrent(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ada := mustCreateAccount(t, s, "ada")
	sub, err := s.CreateSubscription(t.Context(), ada.ID, "pro")
	if err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = s.CancelSubscription(t.Context(), ada.ID, etag.NewCondition(sub.ETag(), nil))
		})
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrNotFound):
			t.Errorf("cancel %d: got %v, want nil or ErrNotFound", i, err)
		}
	}
	if won != 1 {
		t.Errorf("got %d cancels through, want 1", won)
	}
}

func TestListSubscriptions(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	s := store.New(pool)

	// 250 subscriptions over 10 accounts, one active per account. Groups of
	// four share a create_time, so paging must break ties by id.
	const total = 250
	var accounts []string
	for i := range 10 {
		accounts = append(accounts, mustCreateAccount(t, s, fmt.Sprintf("user%d", i)).ID)
	}
	plans := []string{"basic", "pro", "team"}
	base := time.Date(2025, 6, 1, 12, 0, 0, 123456000, time.UTC)
	var all []store.Subscription
	for i := range total {
		sub := store.Subscription{
			ID:         uuid.NewString(),
			AccountID:  accounts[i%len(accounts)],
			Plan:       plans[i%len(plans)],
			Status:     store.StatusActive,
			CreateTime: base.Add(-time.Duration(i/4) * time.Second),
			// The column's default, as the rows written before versions
			// were counted read.
			Version: 1,
		}
		if i >= len(accounts) {
			sub.Status = store.StatusCanceled
			cancel := sub.CreateTime.Add(time.Hour)
			sub.CancelTime = &cancel
		}
		all = append(all, sub)
	}
	insertSubscriptions(t, pool, all)
	// Newest first, ties by id descending: uuid order is the order of their
	// canonical lowercase text.
	slices.SortFunc(all, func(a, b store.Subscription) int {
		if c := b.CreateTime.Compare(a.CreateTime); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})

	for _, test := range []struct {
		name  string
		plan  string
		limit int
	}{
		{name: "all by 7", limit: 7},
		{name: "all by 1", limit: 1},
		{name: "all in one page", limit: total},
		{name: "all in a larger page", limit: 1000},
		{name: "basic by 7", plan: "basic", limit: 7},
		{name: "pro by 7", plan: "pro", limit: 7},
		{name: "team by 7", plan: "team", limit: 7},
		{name: "unknown plan", plan: "gold", limit: 7},
		{name: "plan is exact, not a prefix", plan: "bas", limit: 7},
	} {
		t.Run(test.name, func(t *testing.T) {
			t.Parallel()
			var want []store.Subscription
			for _, sub := range all {
				if test.plan == "" || sub.Plan == test.plan {
					want = append(want, sub)
				}
			}
			got := listAll(t, s, test.plan, test.limit)
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("paged listing mismatch (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("limit not positive", func(t *testing.T) {
		t.Parallel()
		for _, limit := range []int{0, -1} {
			if _, err := s.ListSubscriptions(t.Context(), store.ListSubscriptionsParams{Limit: limit}); err == nil {
				t.Errorf("ListSubscriptions(Limit: %d): got nil error, want one", limit)
			}
		}
	})
}

// listAll pages through ListSubscriptions and returns every row seen. It
// fails the test if a page is longer than limit.
func listAll(t *testing.T, s *store.Store, plan string, limit int) []store.Subscription {
	t.Helper()
	var (
		all   []store.Subscription
		after *store.Cursor
	)
	for page := 0; ; page++ {
		if page > 1000 {
			t.Fatalf("more than 1000 pages: the cursor does not advance")
		}
		got, err := s.ListSubscriptions(t.Context(), store.ListSubscriptionsParams{Plan: plan, Limit: limit, After: after})
		if err != nil {
			t.Fatalf("ListSubscriptions page %d: %v", page, err)
		}
		if len(got) > limit {
			t.Fatalf("page %d: got %d rows, want at most %d", page, len(got), limit)
		}
		all = append(all, got...)
		if len(got) < limit {
			return all
		}
		last := got[len(got)-1]
		after = &store.Cursor{CreateTime: last.CreateTime, ID: last.ID}
	}
}

// insertSubscriptions writes subs as they are, chosen ids and times included,
// in one statement.
func insertSubscriptions(tb testing.TB, pool *pgxpool.Pool, subs []store.Subscription) {
	tb.Helper()
	var (
		ids, accountIDs, plans, statuses []string
		createTimes                      []time.Time
		cancelTimes                      []*time.Time
	)
	for _, sub := range subs {
		ids = append(ids, sub.ID)
		accountIDs = append(accountIDs, sub.AccountID)
		plans = append(plans, sub.Plan)
		statuses = append(statuses, string(sub.Status))
		createTimes = append(createTimes, sub.CreateTime)
		cancelTimes = append(cancelTimes, sub.CancelTime)
	}
	_, err := pool.Exec(tb.Context(), `
		INSERT INTO subscriptions (id, account_id, plan, status, create_time, cancel_time)
		SELECT id::uuid, account_id::uuid, plan, status, create_time, cancel_time
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[])
			AS t (id, account_id, plan, status, create_time, cancel_time)`,
		ids, accountIDs, plans, statuses, createTimes, cancelTimes)
	if err != nil {
		tb.Fatalf("insert %d subscriptions: %v", len(subs), err)
	}
}

func BenchmarkGetActiveSubscription(b *testing.B) {
	s := newStore(b)
	ada := mustCreateAccount(b, s, "ada")
	if _, err := s.CreateSubscription(b.Context(), ada.ID, "pro"); err != nil {
		b.Fatalf("CreateSubscription: %v", err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.GetActiveSubscription(b.Context(), ada.ID); err != nil {
			b.Fatal(err)
		}
	}
}
