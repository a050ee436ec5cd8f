package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shebasvc/sheba/internal/etag"
)

// Status is the state of a subscription.
type Status string

// The values of Status.
const (
	StatusActive   Status = "active"
	StatusCanceled Status = "canceled"
)

// Subscription is a row of the subscriptions table.
type Subscription struct {
	ID         string
	AccountID  string
	Plan       string
	Status     Status
	CreateTime time.Time
	// CancelTime is nil while the subscription is active.
	CancelTime *time.Time
	// Version counts the changes: 1 at creation, one more at each change
	// (migrations/000008_subscription_version.up.sql).
	Version int64
}

// ETag returns the subscription's etag (AIP-154), which names its version:
// it changes with every change of the subscription, and only then.
func (s Subscription) ETag() string {
	return etag.Of(s.ID, s.Version)
}

// subscriptionColumns are the columns scanSubscription reads, in its
// order.
const subscriptionColumns = `id, account_id, plan, status, create_time, cancel_time, version`

// scanSubscription reads the subscriptionColumns.
func scanSubscription(row pgx.CollectableRow) (Subscription, error) {
	var sub Subscription
	if err := row.Scan(&sub.ID, &sub.AccountID, &sub.Plan, &sub.Status, &sub.CreateTime, &sub.CancelTime, &sub.Version); err != nil {
		return Subscription{}, err
	}
	sub.CreateTime = sub.CreateTime.UTC()
	if sub.CancelTime != nil {
		t := sub.CancelTime.UTC()
		sub.CancelTime = &t
	}
	return sub, nil
}

// CreateSubscription starts an active subscription to plan for the account.
// It returns ErrNotFound if the account does not exist and ErrConflict if the
// account already has an active subscription.
func (s *Store) CreateSubscription(ctx context.Context, accountID, plan string) (Subscription, error) {
	// One statement, no look first: the partial unique index on active
	// subscriptions decides between concurrent creates, and the foreign key
	// decides whether the account exists.
	rows, _ := s.db(ctx).Query(ctx, `
		INSERT INTO subscriptions (account_id, plan, status)
		VALUES ($1, $2, 'active')
		RETURNING `+subscriptionColumns,
		accountID, plan)
	sub, err := pgx.CollectExactlyOneRow(rows, scanSubscription)
	if err != nil {
		return Subscription{}, fmt.Errorf("create subscription for account %q: %w", accountID, translate(err))
	}
	return sub, nil
}

// GetActiveSubscription returns the account's active subscription, or
// ErrNotFound if it has none (or the account does not exist).
func (s *Store) GetActiveSubscription(ctx context.Context, accountID string) (Subscription, error) {
	// The status predicate matches the partial unique index, which answers
	// this query.
	rows, _ := s.db(ctx).Query(ctx, `
		SELECT `+subscriptionColumns+`
		FROM subscriptions
		WHERE account_id = $1 AND status = 'active'`,
		accountID)
	sub, err := pgx.CollectExactlyOneRow(rows, scanSubscription)
	if err != nil {
		return Subscription{}, fmt.Errorf("get active subscription of account %q: %w", accountID, translate(err))
	}
	return sub, nil
}

// CancelSubscription cancels the account's active subscription if cond
// allows its etag, and returns it as canceled, with its next version. It
// returns ErrNotFound if the account has no active subscription, and
// ErrETagMismatch (changing nothing) if cond refuses its etag; not found
// comes first.
func (s *Store) CancelSubscription(ctx context.Context, accountID string, cond etag.Condition) (Subscription, error) {
	var (
		sub Subscription
		err error
	)
	if cond.IsZero() {
		// One UPDATE: of two concurrent cancels, the second waits for the
		// row lock, re-checks status and matches nothing, so it gets
		// ErrNotFound.
		rows, _ := s.db(ctx).Query(ctx, `
			UPDATE subscriptions
			SET status = 'canceled', cancel_time = now(), version = version + 1
			WHERE account_id = $1 AND status = 'active'
			RETURNING `+subscriptionColumns,
			accountID)
		sub, err = pgx.CollectExactlyOneRow(rows, scanSubscription)
	} else {
		err = s.InTx(ctx, func(ctx context.Context) error {
			cur, err := s.lockActiveSubscription(ctx, accountID, cond)
			if err != nil {
				return err
			}
			rows, _ := s.db(ctx).Query(ctx, `
				UPDATE subscriptions
				SET status = 'canceled', cancel_time = now(), version = version + 1
				WHERE id = $1
				RETURNING `+subscriptionColumns,
				cur.ID)
			sub, err = pgx.CollectExactlyOneRow(rows, scanSubscription)
			return err
		})
	}
	if err != nil {
		return Subscription{}, fmt.Errorf("cancel subscription of account %q: %w", accountID, translate(err))
	}
	return sub, nil
}

// UpdateSubscriptionPlan sets the plan of the account's active
// subscription if cond allows its etag, and returns it with changed true
// and its next version; a subscription that has the plan already is
// returned as it is, with changed false (same version, same etag). It
// returns ErrNotFound if the account has no active subscription, and
// ErrETagMismatch (changing nothing) if cond refuses its etag; not found
// comes first. Call it within InTx, with the change's event.
func (s *Store) UpdateSubscriptionPlan(ctx context.Context, accountID, plan string, cond etag.Condition) (sub Subscription, changed bool, err error) {
	err = s.InTx(ctx, func(ctx context.Context) error {
		cur, err := s.lockActiveSubscription(ctx, accountID, cond)
		if err != nil || cur.Plan == plan {
			sub = cur
			return err
		}
		rows, _ := s.db(ctx).Query(ctx, `
			UPDATE subscriptions
			SET plan = $2, version = version + 1
			WHERE id = $1
			RETURNING `+subscriptionColumns,
			cur.ID, plan)
		sub, err = pgx.CollectExactlyOneRow(rows, scanSubscription)
		changed = err == nil
		return err
	})
	if err != nil {
		return Subscription{}, false, fmt.Errorf("update subscription of account %q: %w", accountID, translate(err))
	}
	return sub, changed, nil
}

// lockActiveSubscription returns the account's active subscription, locked
// until the transaction of ctx ends, if cond allows its etag: what a
// conditional change (AIP-154) checks in its transaction before it writes.
// It returns ErrNotFound if the account has none active (so 404 comes
// before a mismatch), and ErrETagMismatch if cond refuses its etag. Call it
// within InTx: outside a transaction the lock ends with the statement, and
// the check with it.
func (s *Store) lockActiveSubscription(ctx context.Context, accountID string, cond etag.Condition) (Subscription, error) {
	// FOR UPDATE waits for a concurrent change of the row to commit, then
	// reads the row as that change left it (and skips it if it is active
	// no more): the etag checked is the one the write below replaces.
	rows, _ := s.db(ctx).Query(ctx, `
		SELECT `+subscriptionColumns+`
		FROM subscriptions
		WHERE account_id = $1 AND status = 'active'
		FOR UPDATE`,
		accountID)
	sub, err := pgx.CollectExactlyOneRow(rows, scanSubscription)
	if err != nil {
		return Subscription{}, translate(err)
	}
	if !cond.Match(sub.ETag()) {
		return Subscription{}, ErrETagMismatch
	}
	return sub, nil
}

// Cursor is the position of the last row of a page in the lists paged
// newest first by (create_time, id): subscriptions, webhook endpoints, and
// webhook deliveries (whose ID is the event id). The next page starts after
// it. CreateTime must keep its microseconds, the precision Postgres stores.
type Cursor struct {
	CreateTime time.Time
	ID         string
}

// ListSubscriptionsParams selects a page of subscriptions.
type ListSubscriptionsParams struct {
	// Plan keeps only subscriptions to this plan; "" keeps all.
	Plan string
	// Limit is the most rows returned. It must be positive.
	Limit int
	// After is the last row of the previous page; nil asks for the first page.
	After *Cursor
}

// ListSubscriptions returns up to p.Limit subscriptions, newest first (by
// create_time, then id, both descending), starting after p.After. A page
// shorter than p.Limit is the last one. Rows created between two calls are
// seen only if they sort after the cursor.
func (s *Store) ListSubscriptions(ctx context.Context, p ListSubscriptionsParams) ([]Subscription, error) {
	if p.Limit <= 0 {
		// Callers validate page sizes, so this is a bug, not a sentinel case.
		return nil, fmt.Errorf("list subscriptions: limit %d is not positive", p.Limit)
	}
	var (
		where []string
		args  []any
	)
	// arg adds a value and returns its placeholder.
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if p.Plan != "" {
		where = append(where, "plan = "+arg(p.Plan))
	}
	if p.After != nil {
		// Keyset paging: the row comparison is one range in the
		// (create_time DESC, id DESC) indexes, so a deep page costs what the
		// first one does, unlike OFFSET.
		where = append(where, "(create_time, id) < ("+arg(p.After.CreateTime)+", "+arg(p.After.ID)+")")
	}
	sql := `
		SELECT ` + subscriptionColumns + `
		FROM subscriptions`
	if len(where) > 0 {
		sql += `
		WHERE ` + strings.Join(where, " AND ")
	}
	sql += `
		ORDER BY create_time DESC, id DESC
		LIMIT ` + arg(p.Limit)

	rows, _ := s.db(ctx).Query(ctx, sql, args...)
	subs, err := pgx.CollectRows(rows, scanSubscription)
	if err != nil {
		return nil, fmt.Errorf("list subscriptions (plan %q): %w", p.Plan, translate(err))
	}
	return subs, nil
}
