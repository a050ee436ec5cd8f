package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// LazyTx is a transaction that its owner commits or rolls back, but that
// begins only when it is first needed: at the first store call made with
// the context that carries it (InTx, or any method of the Store), not when
// it is made. Until then it holds no connection.
//
// It is for work that must commit in one transaction but may wait for
// something else before its first statement. The idempotency interceptor
// wraps a handler in one: the handler's change, the record of its outcome
// and its event commit together, while a sign-up that waits for a
// password hash slot, before its first statement, holds no connection nor
// transaction (docs/operations.md#password-hashing).
//
// The store calls that begin or join it never end it; InTx called with
// its context runs its function in it and returns without committing.
// Like the pgx.Tx in it, a LazyTx serves one call at a time.
type LazyTx struct {
	pool    *pgxpool.Pool
	onBegin func(ctx context.Context) error
	tx      pgx.Tx
	// err ends it for every later store call with its context: the
	// error of its begin or of onBegin, or errTxEnded once its owner
	// ended it.
	err error
}

// errTxEnded is the error of a store call with the context of a LazyTx
// that its owner has committed or rolled back.
var errTxEnded = errors.New("transaction already ended")

type lazyTxKey struct{}

// WithLazyTx returns ctx carrying a new LazyTx, and the LazyTx. When the
// transaction begins, onBegin (if not nil) runs in it first, before the
// store call that began it; an error from onBegin rolls the transaction
// back, and that call and every later one with ctx fail with it.
func (s *Store) WithLazyTx(ctx context.Context, onBegin func(ctx context.Context) error) (context.Context, *LazyTx) {
	lt := &LazyTx{pool: s.pool, onBegin: onBegin}
	return context.WithValue(ctx, lazyTxKey{}, lt), lt
}

func lazyTxFromContext(ctx context.Context) (*LazyTx, bool) {
	lt, ok := ctx.Value(lazyTxKey{}).(*LazyTx)
	return lt, ok
}

// begin begins lt if it has not begun, and returns the error that ended
// it, if any.
func (lt *LazyTx) begin(ctx context.Context) error {
	if lt.tx != nil || lt.err != nil {
		return lt.err
	}
	tx, err := lt.pool.Begin(ctx)
	if err != nil {
		lt.err = translate(err)
		return lt.err
	}
	lt.tx = tx
	if lt.onBegin == nil {
		return nil
	}
	if err := lt.onBegin(context.WithValue(ctx, txKey{}, tx)); err != nil {
		rollback(ctx, tx)
		lt.err = translate(err)
	}
	return lt.err
}

// Commit commits lt, if it began, and ends it.
func (lt *LazyTx) Commit(ctx context.Context) error {
	if lt.err != nil {
		return lt.err
	}
	lt.err = errTxEnded
	if lt.tx == nil {
		return nil
	}
	return translate(lt.tx.Commit(ctx))
}

// Rollback rolls lt back, if it began and has not ended, and ends it. It
// does nothing after Commit, so it may be deferred; it rolls back even
// when ctx has ended.
func (lt *LazyTx) Rollback(ctx context.Context) {
	if lt.tx != nil && lt.err == nil {
		rollback(ctx, lt.tx)
	}
	lt.err = errTxEnded
}

// lazyQuerier runs each statement in its LazyTx, which the first one
// begins.
type lazyQuerier struct {
	lt *LazyTx
}

func (q lazyQuerier) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := q.lt.begin(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return q.lt.tx.Exec(ctx, sql, args...)
}

func (q lazyQuerier) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := q.lt.begin(ctx); err != nil {
		return errRows{err}, err
	}
	return q.lt.tx.Query(ctx, sql, args...)
}

func (q lazyQuerier) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := q.lt.begin(ctx); err != nil {
		return errRows{err}
	}
	return q.lt.tx.QueryRow(ctx, sql, args...)
}

// errRows are the rows, or the row, of a statement that could not be
// sent. pgx's own Query returns such rows with its error, never nil, and
// the store's methods read the error from them (pgx.CollectRows).
type errRows struct {
	err error
}

func (r errRows) Close()                                       {}
func (r errRows) Err() error                                   { return r.err }
func (r errRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r errRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (r errRows) Next() bool                                   { return false }
func (r errRows) Scan(...any) error                            { return r.err }
func (r errRows) Values() ([]any, error)                       { return nil, r.err }
func (r errRows) RawValues() [][]byte                          { return nil }
func (r errRows) Conn() *pgx.Conn                              { return nil }
func (r errRows) TypeMap() *pgtype.Map                         { return nil }
