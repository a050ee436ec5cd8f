package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Sentinel errors. Test for them with errors.Is: they come wrapped with the
// operation that failed.
var (
	// ErrNotFound means the row asked for, or a row it refers to, does not
	// exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict means the write would break a uniqueness rule, such as a
	// taken username or a second active subscription.
	ErrConflict = errors.New("conflict")
	// ErrETagMismatch means the etag a conditional change was made under
	// (AIP-154: a request's etag, If-Match) is not the resource's current
	// one: the resource changed since the client read it, and the change
	// was not made.
	ErrETagMismatch = errors.New("etag mismatch")
	// ErrLimit means the write would take more than a limit allows, such
	// as an API key's most webhook endpoints.
	ErrLimit = errors.New("limit reached")
	// ErrUnavailable means the database could not be reached, or the
	// connection broke before an answer came: the operation may be retried
	// later, and says nothing about the data.
	ErrUnavailable = errors.New("database unavailable")
)

// Postgres error codes the store turns into sentinels
// (https://www.postgresql.org/docs/current/errcodes-appendix.html).
const (
	codeUniqueViolation     = "23505"
	codeForeignKeyViolation = "23503"
	codeInvalidTextRep      = "22P02"
	// query_canceled: the cancel request sent when a query's context
	// ended, or statement_timeout.
	codeQueryCanceled = "57014"
)

// querier is what the store's methods run their SQL on: the pool, or the
// transaction of InTx.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store reads and writes sheba's tables. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
}

// New returns a Store that runs its queries on pool. The caller keeps
// ownership of pool and closes it after the last use of the Store.
func New(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool}
}

type txKey struct{}

// TxFromContext returns the transaction that InTx put in ctx, for packages
// that write in the same transaction with their own tools (a job queue's
// InsertTx, say).
func TxFromContext(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	return tx, ok
}

// db returns what a method called with ctx runs its SQL on: the transaction
// of InTx, the LazyTx of ctx, the standby connection of ctx
// (StandbyConn.Context), or the pool.
func (s *Store) db(ctx context.Context) querier {
	if tx, ok := TxFromContext(ctx); ok {
		return tx
	}
	if lt, ok := lazyTxFromContext(ctx); ok {
		return lazyQuerier{lt}
	}
	if c, ok := standbyFromContext(ctx); ok {
		return c.conn
	}
	return s.pool
}

// InTx runs fn in one transaction: every method of the Store called with
// the context fn is given runs in it, and they commit together when fn
// returns nil, or roll back together when it returns an error (which InTx
// returns, translated as every store error is). Changes that must not be
// seen one without the other (a row, the event that announces it, the
// record of the request that made it) go through here. A call of InTx with
// a context that already carries a transaction runs fn in that one, so the
// outermost caller decides when it commits; so does the owner of a
// LazyTx in ctx, which InTx begins if it has not begun. The context fn is
// given must not outlive fn.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context) error) error {
	if _, ok := TxFromContext(ctx); ok {
		return fn(ctx)
	}
	if lt, ok := lazyTxFromContext(ctx); ok {
		if err := lt.begin(ctx); err != nil {
			return err
		}
		return translate(fn(context.WithValue(ctx, txKey{}, lt.tx)))
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return translate(err)
	}
	// After a commit the rollback does nothing; it runs on a panic too.
	defer rollback(ctx, tx)
	if err := fn(context.WithValue(ctx, txKey{}, tx)); err != nil {
		return translate(err)
	}
	return translate(tx.Commit(ctx))
}

// rollbackTimeout bounds the rollback of a transaction whose context ended.
const rollbackTimeout = 5 * time.Second

// rollback rolls tx back even when ctx has ended, which is often why the
// transaction failed. pgx.BeginTxFunc would roll back with the ended
// context, which cannot send the ROLLBACK and closes the connection
// instead: the server then frees the transaction's locks only when it
// notices, and the pool loses the connection.
func rollback(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_ = tx.Rollback(ctx)
}

// Ping checks that the database answers a query.
func (s *Store) Ping(ctx context.Context) error {
	// Pool.Ping only checks that a connection can be acquired; a query also
	// proves the server is serving.
	var one int
	if err := s.pool.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
		return fmt.Errorf("ping database: %w", translate(err))
	}
	return nil
}

// translate turns the database errors that callers act on into sentinels and
// returns every other error unchanged, so that no caller needs to know the
// driver.
//
// Each code means one thing in this schema: a unique violation is a taken
// username or a second active subscription, a foreign key violation an
// unknown account, and invalid text representation a malformed uuid, which
// cannot name an existing row. The constraint name is kept for the logs.
//
// A driver timeout (a network deadline that pgx set from the context's) is
// reported as context.DeadlineExceeded, the error callers already test for.
// A connection that could not be made, or broke before the query was
// answered, is ErrUnavailable, and so is a server that answers it is
// read-only, shutting down or starting (failover.go's switchCode); the
// driver's error stays wrapped for the log.
func translate(err error) error {
	if err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) || errors.Is(err, ErrLimit) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrETagMismatch) {
		return err
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if pgconn.Timeout(err) {
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) || connectionLost(err) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	if switchCode(pgErr.Code) {
		// The server is read-only (a demoted primary), stopping or
		// starting: the write may be retried on the next primary.
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	switch pgErr.Code {
	case codeQueryCanceled:
		// A query cancelled at its deadline, or by statement_timeout, ran
		// out of time: the caller's deadline, not a fault.
		return fmt.Errorf("%w: %s", context.DeadlineExceeded, pgErr.Message)
	case codeUniqueViolation:
		return fmt.Errorf("%w: %s", ErrConflict, pgErr.ConstraintName)
	case codeForeignKeyViolation:
		return fmt.Errorf("%w: %s", ErrNotFound, pgErr.ConstraintName)
	case codeInvalidTextRep:
		return fmt.Errorf("%w: %s", ErrNotFound, pgErr.Message)
	}
	return err
}

// connectionLost reports whether err says the connection to the database
// broke (the server went away mid-query, or before the query was sent),
// rather than that the query failed.
func connectionLost(err error) bool {
	var netErr *net.OpError
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.As(err, &netErr) || pgconn.SafeToRetry(err)
}
